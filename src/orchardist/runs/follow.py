"""Following a run from another process, without polling: inotify on the store and the logs,
and a pidfd on the orchestrator.

SQLite in WAL mode appends every commit to ``state.db-wal`` (and a checkpoint rewrites
``state.db``), so a change of any file in the state folder is the signal to read again; each
commit then touches ``state.db-bell`` (an attribute change), once it is visible to readers
(see ``Store.transaction``). The
orchestrator's pidfd becomes readable when it exits, which is when a follower stops: the run has
ended (or its orchestrator died; ``resume`` picks it up). Readers always read after arming the
watches, so nothing written in between is missed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
from collections.abc import Iterator
from pathlib import Path

from ..errors import OrchardistError
from .control import Orchestrator

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x4, 0x8, 0x80, 0x100
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class Watch:
    """Wakes when a file in one of the watched folders changes, or the orchestrator exits."""

    def __init__(self, orchestrator: Orchestrator | None) -> None:
        self.orchestrator = orchestrator
        self.fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise OrchardistError(f"cannot watch for changes (inotify): {os.strerror(err)}")
        self.folders: set[Path] = set()
        self.ended = orchestrator is None  # nobody drives the run: read what is there, stop

    def add(self, folder: Path) -> None:
        """Watch ``folder`` (ignored while it does not exist; call again later)."""
        if folder in self.folders or not folder.is_dir():
            return
        if _libc.inotify_add_watch(self.fd, os.fsencode(folder), _MASK) >= 0:
            self.folders.add(folder)

    def wait(self) -> None:
        """Block until something changed; sets ``ended`` when the orchestrator exited."""
        fds = [self.fd]
        if self.orchestrator is not None:
            fds.append(self.orchestrator.pidfd)
        readable, _, _ = select.select(fds, [], [])
        if self.orchestrator is not None and self.orchestrator.pidfd in readable:
            self.ended = True
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):  # drain; which file changed does not matter
                pass

    def close(self) -> None:
        """Release the inotify descriptor and the pidfd."""
        os.close(self.fd)
        if self.orchestrator is not None:
            self.orchestrator.close()


@contextlib.contextmanager
def watching(state_dir: Path, run_id: str) -> Iterator[Watch]:
    """A :class:`Watch` on the store of ``state_dir``, for the run ``run_id``."""
    watch = Watch(Orchestrator.find(state_dir, run_id))
    try:
        watch.add(state_dir)
        yield watch
    finally:
        watch.close()


def follow(state_dir: Path, run_id: str, extra: tuple[Path, ...] = ()) -> Iterator[bool]:
    """Yield each time the reader should read again (True on the last time: the run ended).

    The first yield is at once; after the run's orchestrator exits, one last yield follows.
    ``extra`` folders are watched too, from the moment each exists.
    """
    with watching(state_dir, run_id) as watch:
        while True:
            for folder in extra:
                watch.add(folder)
            if watch.ended:
                yield True
                return
            yield False
            watch.wait()
