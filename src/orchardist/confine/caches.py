"""Tool caches kept across attempts: what a CLI downloads into its home on start (OpenCode's
``@opencode-ai/plugin`` in ``~/.config/opencode``) is kept per profile, so that no attempt
downloads what an earlier one fetched.

Each attempt's HOME is new (:mod:`.homes`), so without this every OpenCode attempt installed
the same package again before its first model request. The kept cache lives in the state
folder (``<git common dir>/orchardist/caches/``), which no attempt can write: namespaces show
the host read-only, and Landlock protects the git directory. Each of the kind's cache entries
is kept once, by orchardist, from the first attempt of the profile whose tool ended well and
left it behind (after the attempt's processes are gone, copying regular files and symlinks
only, never through a symlink, at most :data:`MAX_CACHE_BYTES` at a time), and never replaced;
every later attempt gets a copy in its own home. An attempt can change its copy, never what
the next one gets. Delete the folder to have it filled again.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..safeio import copy_regular, remove_tree

MAX_CACHE_BYTES = 512 << 20  # a tool cache larger than this is not kept (a full disk is worse)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TooLarge(Exception):
    """The entries to keep are larger than :data:`MAX_CACHE_BYTES`."""


class Profile(Protocol):
    """What a cache is kept for: an agent profile (``state.agentrecords.AgentProfile``)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def options(self) -> Mapping[str, Any]: ...


def prepare(state_dir: Path, profile: Profile, home: Path, entries: Sequence[str]) -> Path | None:
    """The profile's kept cache, copied into the attempt's ``home`` when there is one yet;
    None for a kind that keeps none. After a run that ended well the caller passes the home to
    :func:`keep`."""
    if not entries:
        return None
    command = str(profile.options.get("command", ""))
    cache = cache_folder(state_dir / "caches", profile.kind, profile.name, command)
    restore(cache, home, entries)
    return cache


def cache_folder(root: Path, kind: str, profile: str, command: str) -> Path:
    """The kept cache of one profile: its name, and a digest of its kind and command (a
    profile that changes its tool starts a fresh cache)."""
    digest = hashlib.sha256(f"{kind}\0{profile}\0{command}".encode()).hexdigest()[:12]
    return root / f"{_UNSAFE.sub('_', profile)[:40]}-{digest}"


def restore(cache: Path, home: Path, entries: Sequence[str]) -> list[str]:
    """Copy the kept cache's entries into an attempt's private home; returns those copied."""
    copied = []
    for entry in entries:
        source = cache / entry
        if os.path.lexists(source):
            _copy(source, home / entry, [0])
            copied.append(entry)
    return copied


def keep(home: Path, cache: Path, entries: Sequence[str]) -> list[str]:
    """Keep the attempt's cache entries that the profile's cache lacks; returns those kept.

    Each entry is kept once and never replaced: copied into a fresh folder beside the cache,
    then moved into place by a rename (a folder) or a hard link (a file), which fail when
    another attempt kept it first. An entry reached through a symlink (an attempt could point
    ``~/.config/opencode`` at another attempt's folder) is not kept."""
    wanted = [
        e
        for e in entries
        if not os.path.lexists(cache / e) and os.path.lexists(home / e) and _inside(home, e)
    ]
    if not wanted:
        return []
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.parent / f".{cache.name}.{uuid.uuid4().hex}"
    kept = []
    try:
        total = [0]
        for entry in wanted:
            _copy(home / entry, staging / entry, total)
        for entry in wanted:
            if _settle(staging / entry, cache / entry):
                kept.append(entry)
    except (OSError, TooLarge):
        pass
    finally:
        remove_tree(staging)
    return kept


def _settle(staged: Path, target: Path) -> bool:
    """Move a staged entry to its place unless something is there already."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if staged.is_dir() and not staged.is_symlink():
            os.rename(staged, target)  # fails onto a folder that is not empty
        elif staged.is_symlink():
            os.symlink(os.readlink(staged), target)
        else:
            os.link(staged, target)
    except OSError:
        return False
    return True


def _inside(home: Path, entry: str) -> bool:
    """Whether ``home/entry`` is reached without a symlink on the way (the entry itself
    included): then what is copied lies in the attempt's home."""
    path = home
    for part in Path(entry).parts:
        path = path / part
        if path.is_symlink():
            return False
    return True


def _copy(source: Path, target: Path, total: list[int]) -> None:
    """Copy a file, a symlink (as a link) or a folder tree; other files (FIFOs, sockets,
    devices) are left out; raises :class:`TooLarge` past the cap."""
    if source.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        for folder, dirs, files in os.walk(source):
            here = target / Path(folder).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in [*files, *(d for d in dirs if Path(folder, d).is_symlink())]:
                _copy_one(Path(folder, name), here / name, total)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy_one(source, target, total)


def _copy_one(source: Path, target: Path, total: list[int]) -> None:
    st = source.lstat()
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
        return
    if not source.is_file():
        return
    total[0] += st.st_size
    if total[0] > MAX_CACHE_BYTES:
        raise TooLarge(str(source))
    copy_regular(source, target)  # (a file swapped for a FIFO since is not read)
