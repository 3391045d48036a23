"""Loose objects read and loose refs moved in-process, as git's files backend does them: a
merge is on the scheduler's path, and each git process it spares is milliseconds.

Apart from :mod:`.repo` because only a run that merges uses them (:meth:`.repo.Repo.tree_of`,
:meth:`~.repo.Repo.update_ref`); a command that only reads (``validate``) imports none of it,
nor the ``zlib`` it reads objects with.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from pathlib import Path

OID = re.compile(r"[0-9a-f]{40}")  # a full SHA-1 id: what a loose ref or object is named by


def is_oid(text: str) -> bool:
    """Whether ``text`` is a full SHA-1 object id."""
    return OID.fullmatch(text) is not None


def read_loose(common_dir: Path, oid: str) -> tuple[str, bytes] | None:
    """``(type, body)`` of a loose object, or None (packed, missing, not a full id)."""
    if not is_oid(oid):
        return None
    try:
        data = zlib.decompress((common_dir / "objects" / oid[:2] / oid[2:]).read_bytes())
    except (OSError, zlib.error):
        return None
    header, _, body = data.partition(b"\0")
    return header.split(b" ", 1)[0].decode(), body


def move_loose_ref(common_dir: Path, ref: str, new: str, old: str, committer: str) -> bool | None:
    """Compare-and-swap a loose ref as git's files backend does: take ``<ref>.lock``
    exclusively, check the value, write, rename, and log it (by ``committer``, as ``Name
    <email>``). None: leave it to git (the ref is packed or locked, or the value is not a
    plain id)."""
    path = common_dir / ref
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return None
    try:
        try:
            current = path.read_text().strip()
        except OSError:
            current = ""
        if not is_oid(current):
            return None
        if current != old:
            return False
        os.write(fd, f"{new}\n".encode())
        os.close(fd)
        fd = -1
        os.replace(lock, path)
    finally:
        if fd >= 0:
            os.close(fd)
        lock.unlink(missing_ok=True)
    entry = f"{old} {new} {committer} {int(time.time())} {time.strftime('%z')}"
    log = common_dir / "logs" / ref
    if log.exists():
        from .fingerprint import REFLOG_MESSAGE

        with log.open("a") as fh:
            fh.write(f"{entry}\t{REFLOG_MESSAGE}\n")
    return True
