"""Overlay mounts for attempt trees, in a mount namespace of orchardist's own.

An attempt's tree (and its git directory) can be an overlay of a pristine checkout of its base
commit (shared, read-only) and an upper folder of its own: making one costs a mount, whatever
the repository's size, and its disk holds only what the attempt changes (see worktree.Layout).

The mounts live in a private mount namespace that :func:`enter` gives the calling thread (and
the threads and processes it starts afterwards; a thread that calls it later joins the same
one): nothing is mounted on the host, and whatever is left mounted goes away with the
orchestrator's processes. Overlays are used only where the kernel lets us mount with
``redirect_dir=on`` (so an agent can rename a folder as on any file system); where it does not
(no ``CAP_SYS_ADMIN``; an unprivileged user namespace refuses ``redirect_dir``), attempts get a
full checkout as before. ``ORCHARDIST_OVERLAY=0`` turns the overlays off.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

OVERLAY_VAR = "ORCHARDIST_OVERLAY"
_CLONE_NEWNS = 0x00020000
_CLONE_FS = 0x00000200
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MNT_DETACH = 0x2
_UNSAFE = frozenset(",:\\\n")  # characters the overlay's option string cannot hold

_lock = threading.Lock()
_namespace: str | None = None  # the mount namespace enter() made ("mnt:[...]")
_namespace_fd: int | None = None  # held open: other threads join it, and it outlives its thread
_tried = False


def _libc() -> ctypes.CDLL:
    import ctypes  # only where a mount is made: validate's look at a layout makes none

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _current() -> str:
    return os.readlink("/proc/thread-self/ns/mnt")


def enter(environ: Mapping[str, str] | None = None) -> bool:
    """Put the calling thread in orchardist's private mount namespace, made at the first call
    in the process; True when it is in it and overlays can be mounted there."""
    global _namespace, _namespace_fd, _tried
    env = os.environ if environ is None else environ
    if env.get(OVERLAY_VAR, "1") == "0":
        return False
    with _lock:
        if not _tried:
            _tried = True
            try:
                libc = _libc()
                _check(libc.unshare(_CLONE_NEWNS), "unshare")
                # our mounts must not reach the host, nor the host's ours
                _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount")
                _namespace = _current()
                _namespace_fd = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except (OSError, AttributeError):
                _namespace = None
        elif _namespace_fd is not None and not usable():
            with contextlib.suppress(OSError):  # a thread leaves the fs it shares, then joins
                libc = _libc()
                _check(libc.unshare(_CLONE_FS), "unshare")
                _check(libc.setns(_namespace_fd, _CLONE_NEWNS), "setns")
        return usable()


def usable() -> bool:
    """Whether the calling thread is in the namespace :func:`enter` made."""
    if _namespace is None:
        return False
    try:
        return _current() == _namespace
    except OSError:
        return False


def mountable(*paths: Path) -> bool:
    """Whether every path can be written into an overlay's options."""
    return not any(_UNSAFE & set(str(path)) for path in paths)


def overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    """Mount an overlay of ``lower`` (never written) and ``upper`` (where changes go) at
    ``target``; OSError when the kernel refuses."""
    if not usable():
        raise OSError(errno.EPERM, "not in orchardist's mount namespace")
    if not mountable(lower, upper, work, target):
        raise OSError(errno.EINVAL, f"a path an overlay cannot name: {target}")
    # metacopy off: an upper file always holds its data (changed_paths reads only upper)
    options = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=on,metacopy=off"
    result = _libc().mount(
        b"overlay",
        os.fsencode(target),
        b"overlay",
        _MS_NOSUID | _MS_NODEV,
        options.encode(),
    )
    _check(result, f"mount overlay at {target}")


def probe(folder: Path) -> bool:
    """Whether an overlay can be mounted here, with its folders beneath ``folder`` (made, then
    removed): some file systems cannot be an overlay's upper layer (an overlay itself, as
    the root of many containers)."""
    if not usable():
        return False
    parts = [folder / name for name in ("lower", "upper", "work", "tree")]
    try:
        for part in parts:
            part.mkdir(parents=True)
        overlay(*parts)
    except OSError:
        return False
    else:
        unmount(parts[3])
        return True
    finally:
        for part in parts:
            with contextlib.suppress(OSError):
                for leftover in part.iterdir():  # the overlay's own scratch under work/
                    leftover.rmdir()
                part.rmdir()
        with contextlib.suppress(OSError):
            folder.rmdir()


def unmount(target: Path) -> None:
    """Detach whatever is mounted at ``target`` (nothing when nothing is)."""
    if _namespace is None:
        return
    _libc().umount2(os.fsencode(target), _MNT_DETACH)


_OPAQUE = "trusted.overlay.opaque"
_REDIRECT = "trusted.overlay.redirect"


def changed_paths(upper: Path, lower: Path, limit: int) -> list[bytes] | None:
    """Paths (relative, as pathspecs) that cover every change made in an overlay whose upper
    folder is ``upper`` over ``lower``: what the upper folder holds, found without reading
    the rest of the tree. A folder replaced whole (opaque, renamed, or where ``lower`` has a
    file) is one path for all beneath it. None when there are more than ``limit`` or the
    overlay's marks cannot be read: then the caller looks at every file."""
    found: list[bytes] = []
    stack = [b""]
    try:
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(os.fsencode(upper), rel)) as entries:
                for entry in entries:
                    path = rel + b"/" + entry.name if rel else entry.name
                    if path == b".git":  # orchardist's own pointer to the private git dir
                        continue
                    if entry.is_dir(follow_symlinks=False) and not _whole(entry.path, lower, path):
                        stack.append(path)
                        continue
                    found.append(path)  # a file, link, whiteout, or a folder replaced whole
                    if len(found) > limit:
                        return None
    except OSError:
        return None
    return found


def _whole(folder: bytes, lower: Path, path: bytes) -> bool:
    """Whether an upper folder stands for all beneath it: marked opaque or renamed by the
    overlay, or a file (not a folder) in the lower tree."""
    names = os.listxattr(folder, follow_symlinks=False)
    if _OPAQUE in names or _REDIRECT in names:
        return True
    try:
        below = os.lstat(os.path.join(os.fsencode(lower), path))
    except FileNotFoundError:
        return False  # a new folder: its entries are listed one by one
    return not stat.S_ISDIR(below.st_mode)
