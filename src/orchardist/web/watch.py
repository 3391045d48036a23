"""Wake asyncio waiters when the store's files change: inotify, no polling.

SQLite in WAL mode appends every commit to ``state.db-wal``; a watch on the store's folder sees
each write as it lands. One watcher serves every client of the dashboard: each change bumps a
generation counter and wakes all who wait for a newer one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
from pathlib import Path

_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class StoreWatcher:
    """Counts changes to the files of one folder; ``wait_newer`` blocks until the count grows."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.generation = 0
        self._changed: asyncio.Condition | None = None
        self._fd = -1
        self._watching_folder = False

    async def start(self) -> None:
        """Open the inotify watch and hook it into the running loop."""
        self._changed = asyncio.Condition()
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        # Before the first run there is no store folder: watch its parent until it appears.
        self._watching_folder = self._watch(self.folder)
        if not self._watching_folder and not self._watch(self.folder.parent):
            os.close(fd)
            self._fd = -1
            raise OSError(f"cannot watch {self.folder} or its parent")
        asyncio.get_running_loop().add_reader(fd, self._on_readable)

    def _watch(self, folder: Path) -> bool:
        mask = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
        return bool(
            folder.is_dir() and _libc.inotify_add_watch(self._fd, os.fsencode(folder), mask) >= 0
        )

    def _on_readable(self) -> None:
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        if not self._watching_folder:
            self._watching_folder = self._watch(self.folder)
        self.generation += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_newer(self, seen: int, timeout_s: float) -> int:
        """The generation once it is past ``seen``, or the current one after ``timeout_s``."""
        assert self._changed is not None
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.generation > seen), timeout_s
                )
        return self.generation

    def stop(self) -> None:
        """Close the watch."""
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
