"""A pristine checkout moved from one commit to the next at a cost that follows the change.

``git read-tree -m -u old new`` reads and rewrites the whole index and walks both trees: its
cost grows with the repository (10 ms per move at 1,000 files, 40 ms at 6,000 in a run whose
every task adds a file). Here git lists what differs (``diff-tree``, which skips identical
folders) and reads the new blobs; orchardist writes those files and patches its own parsed
copy of the index (git's version 2 format), so only the changed entries are made again.

Only the plain case is done here: regular files added, changed or removed, in a SHA-1
repository whose index is version 2 without extended flags, with no ``.gitattributes`` in the
tree (which could ask for a conversion on checkout) and no path where a file becomes a folder
or back. Anything else returns None, and the caller has git do the move.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .env import Plumbing

_HEADER = struct.Struct(">4sII")
_STAT = struct.Struct(">10I")  # ctime s, ns; mtime s, ns; dev, ino, mode, uid, gid, size
_FIXED = 62  # stat fields, the object id, the flags
_PLAIN_MODES = {"100644": 0o100644, "100755": 0o100755}
_ATTRIBUTES = b".gitattributes"


@dataclass
class IndexFile:
    """A version 2 index as its entries' bytes, kept sorted by path (git's order)."""

    paths: list[bytes] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)
    attributes: bool = False  # a .gitattributes file is in the tree

    @classmethod
    def parse(cls, data: bytes) -> IndexFile | None:
        """The entries of ``data``; None where it is not a plain version 2 index at stage 0."""
        if len(data) < _HEADER.size + 20:
            return None
        signature, version, count = _HEADER.unpack_from(data)
        if signature != b"DIRC" or version != 2:
            return None
        index, pos = cls(), _HEADER.size
        for _ in range(count):
            (flags,) = struct.unpack_from(">H", data, pos + 60)
            if flags & 0x7000:  # extended flags, or a stage other than 0
                return None
            end = data.find(b"\0", pos + _FIXED)
            if end < 0:
                return None
            path = data[pos + _FIXED : end]
            size = (_FIXED + len(path) + 8) & ~7
            index.paths.append(path)
            index.entries.append(data[pos : pos + size])
            index.attributes |= path.rpartition(b"/")[2] == _ATTRIBUTES
            pos += size
        return index

    def to_bytes(self) -> bytes:
        """The index file: header, entries, no extensions, SHA-1 trailer."""
        body = _HEADER.pack(b"DIRC", 2, len(self.entries)) + b"".join(self.entries)
        return body + hashlib.sha1(body, usedforsecurity=False).digest()

    def has(self, path: bytes) -> bool:
        at = bisect.bisect_left(self.paths, path)
        return at < len(self.paths) and self.paths[at] == path

    def has_under(self, folder: bytes) -> bool:
        """Whether any entry is inside ``folder``."""
        at = bisect.bisect_left(self.paths, folder + b"/")
        return at < len(self.paths) and self.paths[at].startswith(folder + b"/")

    def put(self, path: bytes, entry: bytes) -> None:
        at = bisect.bisect_left(self.paths, path)
        if at < len(self.paths) and self.paths[at] == path:
            self.entries[at] = entry
        else:
            self.paths.insert(at, path)
            self.entries.insert(at, entry)

    def drop(self, path: bytes) -> None:
        at = bisect.bisect_left(self.paths, path)
        if at < len(self.paths) and self.paths[at] == path:
            del self.paths[at], self.entries[at]


def advance(repo: Plumbing, tree: Path, index: IndexFile, old: str, new: str) -> bytes | None:
    """Move the checkout ``tree`` of ``old``, whose index is ``index``, to ``new``: the new
    index file's bytes (``index`` now says ``new``), or None, nothing changed, where the
    move is not the plain case (then git must do it)."""
    return index.to_bytes() if write_changes(repo, tree, index, old, new, update=True) else None


def write_changes(
    repo: Plumbing,
    tree: Path,
    index: IndexFile,
    old: str,
    new: str,
    update: bool = False,
    loose: Path | None = None,
) -> bool:
    """Write into the checkout ``tree`` of ``old`` (whose index is ``index``) the files that
    differ in ``new``; False, nothing written, where that is not the plain case. ``update``:
    make ``index`` say ``new`` too (else it is only read). ``loose``: an objects folder whose
    loose blobs are read here, checked against their ids, before git is asked for the rest."""
    raw = repo.git_bytes(
        "diff-tree",
        "-r",
        "-z",
        "--raw",
        "--no-abbrev",
        "--no-renames",
        old,
        new,
        cwd=repo.root,
        env={},
    )
    changes = parse_raw(raw)
    if not plain(index, changes):
        return False
    wanted = [c.new_oid for c in changes if c.status != "D"]
    objects = {oid: found for oid in wanted if (found := _loose(loose, oid)) is not None}
    objects.update(repo.read_objects([oid for oid in wanted if oid not in objects]))
    if any(kind != "blob" for kind, _ in objects.values()):
        return False
    apply(tree, index if update else None, changes, {o: b for o, (_, b) in objects.items()})
    return True


def _loose(objects: Path | None, oid: str) -> tuple[str, bytes] | None:
    """A loose object's type and body, if it is there and hashes to ``oid`` (what orchardist's
    own snapshot just wrote: read without starting git); else None."""
    if objects is None or len(oid) != 40:
        return None
    try:
        data = zlib.decompress((objects / oid[:2] / oid[2:]).read_bytes())
    except (OSError, ValueError, zlib.error):
        return None
    if hashlib.sha1(data, usedforsecurity=False).hexdigest() != oid:
        return None
    header, _, body = data.partition(b"\0")
    return header.split(b" ", 1)[0].decode(errors="replace"), body


def entry(path: bytes, mode: int, oid: str, st: os.stat_result) -> bytes:
    """An index entry for ``path`` as checked out, with its stat data."""
    stat = _STAT.pack(
        *(int(t) & 0xFFFFFFFF for t in divmod(st.st_ctime_ns, 1_000_000_000)),
        *(int(t) & 0xFFFFFFFF for t in divmod(st.st_mtime_ns, 1_000_000_000)),
        st.st_dev & 0xFFFFFFFF,
        st.st_ino & 0xFFFFFFFF,
        mode,
        st.st_uid & 0xFFFFFFFF,
        st.st_gid & 0xFFFFFFFF,
        st.st_size & 0xFFFFFFFF,
    )
    body = stat + bytes.fromhex(oid) + struct.pack(">H", min(len(path), 0xFFF)) + path
    return body + b"\0" * (8 - len(body) % 8)


@dataclass(frozen=True)
class Change:
    """One path that differs between two commits (``diff-tree --raw``)."""

    path: bytes
    old_mode: str
    new_mode: str
    new_oid: str
    status: str


def parse_raw(raw: bytes) -> list[Change]:
    """The records of ``git diff-tree -r -z --raw --no-abbrev --no-renames``."""
    fields = raw.split(b"\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.decode().lstrip(":").split()
        if len(parts) == 5:
            changes.append(Change(path, parts[0], parts[1], parts[3], parts[4]))
    return changes


def plain(index: IndexFile, changes: Iterable[Change]) -> bool:
    """Whether the move is the plain case this module does (see the module docstring)."""
    if index.attributes:
        return False
    for change in changes:
        if change.status not in ("A", "M", "D") or len(change.new_oid) != 40:
            return False
        modes = {change.old_mode, change.new_mode} - {"000000"}
        if not modes <= _PLAIN_MODES.keys():
            return False
        if change.path.rpartition(b"/")[2] == _ATTRIBUTES:
            return False
        if change.status == "A" and (index.has_under(change.path) or _file_above(index, change)):
            return False  # a folder becomes a file, or a file a folder
    return True


def _file_above(index: IndexFile, change: Change) -> bool:
    parts = change.path.split(b"/")
    return any(index.has(b"/".join(parts[:i])) for i in range(1, len(parts)))


def apply(
    tree: Path, index: IndexFile | None, changes: Iterable[Change], blobs: Mapping[str, bytes]
) -> None:
    """Make ``tree`` and ``index`` say the new commit: removed files first (and the folders
    they leave empty), then every added or changed file written anew (a new inode, as git's
    checkout makes), its entry made from its stat."""
    changes = list(changes)
    root = os.fsencode(tree)
    for change in changes:
        if change.status == "D":
            os.unlink(os.path.join(root, change.path))
            if index is not None:
                index.drop(change.path)
            _prune(root, change.path.rpartition(b"/")[0])
    for change in changes:
        if change.status == "D":
            continue
        full = os.path.join(root, change.path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if change.status == "M":
            os.unlink(full)
        mode = _PLAIN_MODES[change.new_mode]
        perms = 0o777 if mode == 0o100755 else 0o666  # less the umask, as git's checkout
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, perms)
        try:
            view = memoryview(blobs[change.new_oid])
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        if index is not None:
            index.put(change.path, entry(change.path, mode, change.new_oid, os.lstat(full)))


def _prune(root: bytes, folder: bytes) -> None:
    """Remove ``folder`` and its parents while they are empty (git's checkout does)."""
    while folder:
        try:
            os.rmdir(os.path.join(root, folder))
        except OSError:
            return
        folder = folder.rpartition(b"/")[0]
