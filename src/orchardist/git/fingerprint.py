"""The checkout guard's view of the user's checkout: a fingerprint of HEAD, the index and
working tree, branch and tag refs, the git directory's config, hooks and info files, and
foreign moves of watched refs, compared before and after agents run."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ..safeio import read_capped
from .env import Plumbing

REFLOG_MESSAGE = "orchardist"  # what orchardist's own ref moves say in the reflog
# Bigger than any config, hook or info file: past it, a file is told apart by its metadata.
MAX_FINGERPRINT_BYTES = 1 << 20


def checkout_fingerprint(
    repo: Plumbing, ignore_refs: Sequence[str] = (), watch_reflogs: Sequence[str] = ()
) -> dict[str, str]:
    """What the user's checkout looks like, by part: HEAD, index and working tree, branch
    and tag refs, the repository's config, hooks and info files, and foreign moves of
    watched refs.

    Compared before and after agents run, to catch one that wrote outside its worktree.
    Refs named in ``ignore_refs`` (prefixes) are the ones orchardist itself moves; for
    those in ``watch_reflogs``, moves whose reflog entry is not ours are counted instead.
    """
    digest = hashlib.sha256()
    for name in ("config", "hooks", "info"):
        path = repo.common_dir / name
        files = sorted(path.rglob("*")) if path.is_dir() and not path.is_symlink() else [path]
        for file in files:
            digest.update(str(file).encode() + b"\0" + _fingerprint_of(file) + b"\0")
    parts: dict[str, str] = {"git config, hooks or info": digest.hexdigest()}
    for ref in watch_reflogs:
        moves = repo.run_git("reflog", "show", "--format=%gs", ref).stdout.splitlines()
        count = sum(m != REFLOG_MESSAGE for m in moves)
        if count:  # only foreign moves show, so a changing watch list does not
            parts[f"run branch {ref.removeprefix('refs/heads/')}"] = str(count)
    head = repo.run_git("symbolic-ref", "-q", "HEAD").stdout.strip()
    listed = repo.git(
        "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"
    ).splitlines()
    # HEAD's commit is its branch's, listed (a ref name has no space); git is asked only for a
    # detached HEAD, or one on a branch not listed (unborn, broken, elsewhere than heads)
    tips = dict(line.rsplit(" ", 1) for line in listed if " " in line)
    commit = tips.get(head) or repo.run_git("rev-parse", "-q", "--verify", "HEAD").stdout.strip()
    refs = [line for line in listed if not any(line.startswith(p) for p in ignore_refs)]
    parts["HEAD"] = f"{head} {commit}"
    parts["files or index"] = _checkout_files(repo)
    parts["branches or tags"] = "\n".join(refs)
    return parts


def _checkout_files(repo: Plumbing) -> str:
    """A digest of the checkout's index entries and of every file's ``lstat``, tracked or
    not (ignored files excepted). Neither ``ls-files`` nor ``lstat`` reads a file's bytes:
    unlike ``git status``, no clean filter a repository's config names ever runs here."""
    root = repo.root
    digest = hashlib.sha256(repo.git_bytes("ls-files", "-z", "--stage", cwd=root, env={}))
    listing = repo.git_bytes(
        "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root, env={}
    )
    for path in dict.fromkeys(listing.split(b"\0")):
        try:
            st = os.lstat(os.path.join(root, os.fsdecode(path)))
        except OSError:
            digest.update(path + b"\0-\0")
            continue
        stamp = f"{st.st_mode} {st.st_size} {st.st_mtime_ns} {st.st_ino}"
        digest.update(path + b"\0" + stamp.encode() + b"\0")
    return digest.hexdigest()


def _fingerprint_of(path: Path) -> bytes:
    """What a file of the git directory holds, read without following a symlink, opening a
    FIFO or device, or reading more than MAX_FINGERPRINT_BYTES (sandbox off, an agent can
    plant any of them there): its bytes, else its type, target or size and time."""
    body = read_capped(path, MAX_FINGERPRINT_BYTES)
    if body is not None:
        return body
    try:
        st = os.lstat(path)
    except OSError:
        return b"-"
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            return b"link " + os.fsencode(os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return b"folder"
    return f"{st.st_mode:o} {st.st_size} {st.st_mtime_ns} {st.st_ino}".encode()
