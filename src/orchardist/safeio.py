"""Reading files an agent (or the code it wrote) could have put in orchardist's way.

Such a path may hold a FIFO (an ordinary open would block for good), a symlink to
``/dev/zero`` or to a file the agent should not see, or a file of hundreds of megabytes. So a
file is opened without following a final symlink and without blocking, read only if it is a
regular file, and read only up to a cap.

A folder the agent could write (the attempt's io folder and what is in it) may have become a
symlink to any folder of the user's: orchardist makes such a folder afresh after the agent ends
(``fresh_folder``, removing what is there without following links) and works in it through a
descriptor opened without following one (``open_folder``, then ``dir_fd`` relative names), so
a link made later, by the code verify runs, leads nowhere.

Output the user names (``scan -o``) is written whole or not at all (``write_whole``): to a
temporary file renamed onto the path. But a path that is not a regular file (``/dev/null``,
``/dev/stdout``, a FIFO) is written in place: renaming onto it would replace the device with a
file (as root, ``/dev/null`` for every program on the machine).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Tail",
    "flocked",
    "fresh_folder",
    "open_folder",
    "read_capped",
    "read_tail",
    "remove_tree",
    "remove_trees",
    "write_whole",
]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read_capped(path: Path | str, max_bytes: int, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given); None when
    it is missing, a symlink, not a regular file, or larger than ``max_bytes``."""
    try:
        fd = os.open(path, _FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        chunks, total = [], 0
        while total <= max_bytes:  # it may still grow while we read
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return None if total > max_bytes else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Tail:
    """A slice of a file that may still be growing, as one look saw it."""

    data: bytes
    start: int  # where ``data`` begins in the file
    size: int  # the file's size at the look
    found: bool = True  # False: missing, a symlink or not a regular file (``data`` is empty)

    @property
    def end(self) -> int:
        """Where the next look at a growing file starts."""
        return self.start + len(self.data)

    def text(self) -> str:
        """``data`` decoded leniently (a slice may cut a character in two)."""
        return self.data.decode("utf-8", errors="replace")


def read_tail(path: Path, offset: int, max_bytes: int, last: bool = False) -> Tail:
    """At most ``max_bytes`` of the regular file at ``path`` from ``offset`` on (a log that
    grows, read a slice per look); with ``last``, its last ``max_bytes``, none before
    ``offset``. The one reader of logs: they live where agents write."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return Tail(b"", offset, 0, found=False)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Tail(b"", offset, 0, found=False)
        start = max(offset, st.st_size - max_bytes) if last else offset
        return Tail(os.pread(fd, max_bytes, start), start, st.st_size)
    except OSError:
        return Tail(b"", offset, 0, found=False)
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if need be): it excludes other threads
    (each opens its own file description) and other processes alike."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def open_folder(path: Path) -> int | None:
    """A descriptor of the folder at ``path``, opened without following a symlink there; None
    when ``path`` is not (or no longer) a real folder. The caller closes it."""
    try:
        return os.open(path, _FOLDER_FLAGS)
    except OSError:
        return None


def fresh_folder(path: Path) -> None:
    """An empty folder at ``path``, made now: whatever was there (a symlink, a file, a folder
    an agent filled) removed first without following any link."""
    remove_tree(path)
    path.mkdir(mode=0o755)


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything in it, even folders an agent made read-only; a symlink
    is removed, never followed (``shutil.rmtree`` works through descriptors on Linux)."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        for folder, _, _ in os.walk(path):
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o700)
        shutil.rmtree(path, ignore_errors=True)


REMOVE_WAYS = 8


def remove_trees(paths: Iterable[Path]) -> None:
    """:func:`remove_tree` for each of ``paths`` (disjoint), up to :data:`REMOVE_WAYS` at a
    time: an unlink or rmdir waits on the file system's journal, not on the CPU, so trees
    removed side by side take the time of the largest. Five checkouts of 66 entries on a
    loaded disk: 1.0-1.6 s one after the other, 0.24-0.30 s side by side."""
    todo = list(dict.fromkeys(paths))
    if len(todo) < 2:
        for path in todo:
            remove_tree(path)
        return
    from concurrent.futures import ThreadPoolExecutor  # (and logging): not for what only reads

    with ThreadPoolExecutor(min(len(todo), REMOVE_WAYS), thread_name_prefix="rm") as pool:
        for done in [pool.submit(remove_tree, path) for path in todo]:
            done.result()


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a regular file (or none yet) is replaced whole by a rename,
    so a reader never sees half of it; anything else (a device, a FIFO, a terminal, what
    ``/dev/stdout`` leads to) is opened and written in place, never replaced. OSError on
    failure, with no temporary file left behind."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "wb") as out:
            out.write(data)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def copy_regular(source: Path, target: Path) -> bool:
    """Copy one regular file with its permission bits and times, as ``shutil.copy2`` would,
    but opened without following a link and without blocking: a file swapped for a symlink or
    a FIFO since it was looked at is not read (False). What stands at ``target`` and is no
    regular file is removed first."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink
            return False
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if os.path.lexists(target) and not os.path.isfile(target):
            remove_tree(target)
        with os.fdopen(os.dup(fd), "rb") as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
            os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        return True
    finally:
        os.close(fd)
