"""A worktree's changes as a commit, written by orchardist itself: git lists the paths,
orchardist reads and hashes the files (see :mod:`.treehash`) and has git read every object back.
With the :class:`Checkout` record of how the tree was made, only what changed is read again."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitError
from .env import Plumbing
from .treehash import Entry, ObjectWriter, read_entry, refused_path, tree_objects


@dataclass(frozen=True)
class Checkout:
    """How an attempt's tree was checked out, kept where its agent cannot write.

    ``index``: a copy of the index git wrote with the checkout (the stat data of every file as
    it was at the base). ``gitdir``: a git directory of orchardist's own to list changes in,
    whose ``info/attributes`` turns off every conversion and filter, so that where git has to
    compare contents (a file written in the same clock tick as the index) it compares raw
    bytes, as the snapshot hashes them. ``only``: paths that cover every change (an overlaid
    tree's upper folder says so), so that nothing else is looked at; None: look at all.
    """

    index: Path
    gitdir: Path
    only: tuple[bytes, ...] | None = None


def snapshot(
    repo: Plumbing, worktree: Path, base: str, message: str, checkout: Checkout | None = None
) -> str:
    """Commit everything in ``worktree`` that differs from ``base`` (ignored files excepted).

    git only lists the paths (from a private index of ``base``: whatever the agent did to
    the worktree's index or HEAD does not matter); orchardist reads and hashes the files
    and writes the objects itself (see treehash), then has git read every one back. With
    the ``checkout`` record of how the tree was made, only the files whose stat changed
    since are read, and only the folders holding them are written again: the cost follows
    the change, not the repository.
    """
    if checkout is not None:
        return _snapshot_changes(repo, worktree, base, message, checkout)
    gitlinks, paths, added = _listed(repo, worktree, base)
    writer = ObjectWriter(repo.common_dir / "objects")
    read = _read_entries(worktree, paths, writer)
    entries = {**gitlinks, **{p: e for p, e in read.items() if e is not None}}
    # The base's own paths passed git's checks when they were committed.
    checked = {*added, *(p for p, e in entries.items() if e.mode == "120000")}
    _refuse([p for p in checked if p in entries and refused_path(p, entries[p].mode)])
    tree, trees = tree_objects(entries, writer)
    repo.check_objects([e.oid for e in entries.values() if e.mode != "160000"] + trees)
    return repo.commit_tree(tree, [base], message)


def _listed(
    repo: Plumbing, worktree: Path, base: str
) -> tuple[dict[bytes, Entry], list[bytes], list[bytes]]:
    """What git lists of ``worktree`` against ``base``: the submodules (kept as the base has
    them), every other path to read, and of those the ones the base does not have."""
    index = worktree.parent / f".{worktree.name}.index"
    # The agent could write the worktree's .git file and its admin folder: never let git
    # find its repository (and config: core.fsmonitor runs a command) through them.
    env = {
        "GIT_INDEX_FILE": str(index),
        "GIT_DIR": str(repo.common_dir),
        "GIT_WORK_TREE": str(worktree),
    }
    try:
        repo.git("read-tree", base, cwd=worktree, env=env)
        staged = repo.git_bytes("ls-files", "-z", "--stage", cwd=worktree, env=env)
        others = repo.git_bytes(
            "ls-files", "-z", "--others", "--exclude-standard", cwd=worktree, env=env
        )
    finally:
        index.unlink(missing_ok=True)
    gitlinks: dict[bytes, Entry] = {}
    paths: list[bytes] = []
    for record in staged.split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            mode, oid, _ = meta.decode().split(" ", 2)
            if mode == "160000":  # a submodule stays as the base has it
                gitlinks[path] = Entry(mode, oid)
            else:
                paths.append(path)
    # A trailing slash is a nested repository, which is not the task's to add.
    added = [p for p in others.split(b"\0") if p and not p.endswith(b"/")]
    return gitlinks, paths + added, added


def _read_entries(
    worktree: Path, paths: Iterable[bytes], writer: ObjectWriter
) -> dict[bytes, Entry | None]:
    """Each path's entry as read from the worktree (None: it is gone), its blob written."""
    found: dict[bytes, Entry | None] = {}
    root_fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path in paths:
            found[path] = read_entry(root_fd, path, writer)
    finally:
        os.close(root_fd)
    return found


def _refuse(refused: Sequence[bytes]) -> None:
    """GitError naming the paths git would refuse to record, if there are any."""
    if refused:
        names = ", ".join(sorted(os.fsdecode(p) for p in refused))
        raise GitError(f"paths git refuses to record (they name a .git folder): {names}")


def _snapshot_changes(
    repo: Plumbing, worktree: Path, base: str, message: str, checkout: Checkout
) -> str:
    # Never the worktree's .git file or the agent's own index: git lists from the copy of
    # the index made at checkout, in a git directory of orchardist's own (see Checkout).
    env = {
        "GIT_INDEX_FILE": str(checkout.index),
        "GIT_DIR": str(checkout.gitdir),
        "GIT_WORK_TREE": str(worktree),
    }
    listed = b""
    if checkout.only is None or checkout.only:
        env["GIT_LITERAL_PATHSPECS"] = "1"
        only = [] if checkout.only is None else ["--", *map(os.fsdecode, checkout.only)]
        listed = repo.git_bytes(
            "ls-files",
            "-z",
            "-m",
            "-d",
            "-o",
            "--exclude-standard",
            *only,
            cwd=worktree,
            env=env,
        )
    # A trailing slash is a nested repository, which is not the task's to add.
    paths = dict.fromkeys(p for p in listed.split(b"\0") if p and not p.endswith(b"/"))
    writer = ObjectWriter(repo.common_dir / "objects")
    changes = _read_entries(worktree, paths, writer)
    _refuse([p for p, e in changes.items() if e is not None and refused_path(p, e.mode)])
    tree, trees = _tree_with(repo, repo.tree_of(base), changes, writer)
    repo.check_objects([e.oid for e in changes.values() if e is not None] + trees)
    return repo.commit_tree(tree, [base], message)


def _tree_with(
    repo: Plumbing, base_tree: str, changes: Mapping[bytes, Entry | None], writer: ObjectWriter
) -> tuple[str, list[str]]:
    """The tree ``base_tree`` with ``changes`` (path: new entry, or None: gone) applied;
    only the folders on the way to a change are read and written. Submodules stay as the
    base has them; a file and a folder of one name: the file is kept."""
    folders = {b""}
    for path in changes:
        parts = path.split(b"/")
        folders.update(b"/".join(parts[:i]) for i in range(1, len(parts)))
    listings: dict[bytes, dict[bytes, Entry]] = {}
    level, ids = [b""], {b"": base_tree}
    while level:  # the base's listing of each folder, one cat-file per depth
        bodies = repo.read_objects([ids[f] for f in level])
        following = []
        for folder in level:
            listing = listings[folder] = _tree_entries(bodies[ids[folder]][1])
            for name, old in listing.items():
                child = folder + b"/" + name if folder else name
                if old.mode == "40000" and child in folders:
                    ids[child] = old.oid
                    following.append(child)
        level = following
    files: dict[bytes, dict[bytes, Entry | None]] = {f: {} for f in folders}
    for path, entry in changes.items():
        parent, _, name = path.rpartition(b"/")
        files[parent][name] = entry
    subfolders: dict[bytes, list[bytes]] = {f: [] for f in folders}
    for folder in folders - {b""}:
        subfolders[folder.rpartition(b"/")[0]].append(folder)
    new_ids: dict[bytes, str | None] = {}
    written: list[str] = []
    for folder in sorted(folders, key=lambda f: -f.count(b"/") - bool(f)):  # deepest first
        entries = dict(listings.get(folder, {}))
        for name, entry in files[folder].items():
            if name in entries and entries[name].mode == "160000":
                continue  # a submodule stays as the base has it
            if entry is not None:
                entries[name] = entry
            elif name in entries and entries[name].mode != "40000":
                del entries[name]
        for child in subfolders[folder]:
            name, oid = child.rpartition(b"/")[2], new_ids[child]
            if name in entries and entries[name].mode == "160000":
                continue
            if oid is None:
                if name in entries and entries[name].mode == "40000":
                    del entries[name]
            elif files[folder].get(name) is None:  # a file of this name wins
                entries[name] = Entry("40000", oid)
        if not entries and folder:
            new_ids[folder] = None  # an emptied folder is gone
            continue
        oid = _write_tree(entries, writer)
        new_ids[folder] = oid
        written.append(oid)
    return written[-1], written


def _tree_entries(body: bytes) -> dict[bytes, Entry]:
    """A tree object's entries by name."""
    entries, pos = {}, 0
    while pos < len(body):
        space = body.index(b" ", pos)
        nul = body.index(b"\0", space)
        entries[body[space + 1 : nul]] = Entry(
            body[pos:space].decode(), body[nul + 1 : nul + 21].hex()
        )
        pos = nul + 21
    return entries


def _write_tree(entries: Mapping[bytes, Entry], writer: ObjectWriter) -> str:
    """Write a tree of ``entries`` (git's order: a folder sorts as its name and a slash)."""
    items = sorted(
        (name + b"/" if e.mode == "40000" else name, e.mode.encode() + b" " + name, e.oid)
        for name, e in entries.items()
    )
    return writer.write("tree", b"".join(h + b"\0" + bytes.fromhex(oid) for _, h, oid in items))
