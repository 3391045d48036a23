"""A worktree's files hashed by orchardist itself into git objects it writes and checks.

An agent can write its worktree and, depending on the containment, git's object store: a
loose object planted under a blob id, or a pack holding other bytes for that id, would make
git's ``add`` keep the agent's bytes instead of the file that was verified. So the snapshot
never asks git to hash: every file is read here (``O_NOFOLLOW`` for each path component, never
a FIFO or device), each object written here replaces any copy whose bytes do not match its id,
and at the end git is asked to read every object back, each checked against its id.

Since git's own path checks are skipped that way, ``refused_path`` applies them: a tree never
names a path ``git add`` or a checkout would refuse (``.GIT/hooks``, ``git~1``, ``.g\u200cit``).

Symlinks are judged by resolving their whole chain inside the new tree, as the kernel would
(``a/f -> ..`` then ``x -> a/f/../../etc`` leaves it): ``escaping_symlinks``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Entry",
    "ObjectWriter",
    "escaping_symlinks",
    "read_entry",
    "refused_path",
    "tree_objects",
]

MAX_SYMLINK_HOPS = 40  # as Linux's ELOOP limit

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    """One tree entry: git mode (``100644``, ``100755``, ``120000``, ``160000``) and object id."""

    mode: str
    oid: str


class ObjectWriter:
    """Writes loose objects into ``objects``; a copy already there is kept only if its bytes
    hash to its id, else it is replaced by ours."""

    def __init__(self, objects: Path) -> None:
        self.objects = Path(objects)

    def write(self, kind: str, body: bytes) -> str:
        """Store ``body`` as a ``kind`` object; its id."""
        data = f"{kind} {len(body)}\0".encode() + body
        oid = hashlib.sha1(data).hexdigest()
        path = self.objects / oid[:2] / oid[2:]
        if _holds(path, data):
            return oid
        path.parent.mkdir(exist_ok=True)
        tmp = path.parent / f"tmp_obj_orchardist_{os.getpid()}_{threading.get_ident()}"
        tmp.write_bytes(zlib.compress(data, 1))
        tmp.chmod(0o444)
        os.replace(tmp, path)  # over a planted object too
        return oid


def _holds(path: Path, data: bytes) -> bool:
    """Whether the loose object at ``path`` holds exactly ``data``."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with os.fdopen(os.dup(fd), "rb") as fh:
            return zlib.decompress(fh.read()) == data
    except (OSError, zlib.error):
        return False
    finally:
        os.close(fd)


def read_entry(root_fd: int, path: bytes, writer: ObjectWriter) -> Entry | None:
    """The entry for ``path`` under the folder ``root_fd``; None if it is not a regular file or
    a symlink, or if any folder on its way is a symlink (git would not look through it)."""
    *folders, name = path.split(b"/")
    fd = root_fd
    try:
        for folder in folders:
            try:
                nxt = os.open(folder, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                return None
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return Entry("120000", writer.write("blob", os.readlink(name, dir_fd=fd)))
        if not stat.S_ISREG(st.st_mode):
            return None
        body = _read_regular(fd, name)
        if body is None:
            return None
        mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
        return Entry(mode, writer.write("blob", body))
    finally:
        if fd != root_fd:
            os.close(fd)


def _read_regular(dir_fd: int, name: bytes) -> bytes | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(fd)


def tree_objects(entries: Mapping[bytes, Entry], writer: ObjectWriter) -> tuple[str, list[str]]:
    """Write the trees holding ``entries`` (full paths); the root tree's id and every tree id."""
    root: dict[bytes, object] = {}
    for path, entry in entries.items():
        *folders, name = path.split(b"/")
        node = root
        for folder in folders:
            child = node.setdefault(folder, {})
            if not isinstance(child, dict):  # a file and a folder of one name: keep the file
                break
            node = child
        else:
            node[name] = entry
    written: list[str] = []

    def write(node: dict[bytes, object]) -> str:
        items = []
        for name, child in node.items():
            if isinstance(child, dict):
                if not child:
                    continue
                items.append((name + b"/", b"40000 " + name, write(child)))
            else:
                assert isinstance(child, Entry)
                items.append((name, child.mode.encode() + b" " + name, child.oid))
        body = b"".join(head + b"\0" + bytes.fromhex(oid) for _, head, oid in sorted(items))
        oid = writer.write("tree", body)
        written.append(oid)
        return oid

    return write(root), written


def escaping_symlinks(links: Mapping[str, str]) -> list[str]:
    """The symlinks of a tree (``path -> target``) that lead outside it, followed hop by hop
    through the tree's other symlinks; a chain longer than the kernel follows counts too."""
    return [path for path in links if not _stays_inside(path, links)]


def _stays_inside(path: str, links: Mapping[str, str]) -> bool:
    resolved: list[str] = []
    pending = path.split("/")
    pending.reverse()  # a stack: the next component last
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return False
            resolved.pop()
            continue
        here = "/".join([*resolved, part])
        target = links.get(here)
        if target is None:
            resolved.append(part)
            continue
        hops += 1
        if hops > MAX_SYMLINK_HOPS or target.startswith("/"):
            return False
        pending.extend(reversed(target.split("/")))  # relative to the link's folder
    return True


# Code points HFS+ ignores in file names (git's utf8.c, next_hfs_char): ".g\u200cit" is ".git".
_HFS_IGNORED = frozenset(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def refused_path(path: bytes, mode: str) -> bool:
    """Whether git refuses ``path`` in an index or a checkout (read-cache.c ``verify_path``,
    with ``core.protectHFS`` and ``core.protectNTFS`` on): an empty, ``.`` or ``..``
    component, or one that names a ``.git`` folder on some file system; a ``.gitmodules``
    symlink."""
    parts = path.split(b"/")
    if any(_refused_component(part) for part in parts):
        return True
    return mode == "120000" and _names(parts[-1], b".gitmodules")


def _refused_component(part: bytes) -> bool:
    if part in (b"", b".", b".."):
        return True
    return _names(part, b".git") or _ntfs_names(part, b"git~1")


def _names(part: bytes, dotfile: bytes) -> bool:
    """``part`` is ``dotfile`` to a case-insensitive file system: NTFS (trailing spaces and
    dots, an alternate data stream after ``:``) or HFS+ (ignorable code points)."""
    if _ntfs_names(part, dotfile):
        return True
    if part.isascii():
        return part.lower() == dotfile
    text = part.decode("utf-8", errors="replace")
    folded = "".join(c for c in text if ord(c) not in _HFS_IGNORED)
    return folded.lower() == dotfile.decode()


def _ntfs_names(part: bytes, name: bytes) -> bool:
    stem = part.split(b":", 1)[0].split(b"\\", 1)[0]
    return stem[: len(name)].lower() == name and not stem[len(name) :].strip(b" .")
