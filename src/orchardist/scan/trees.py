"""The trees scanners read: scratch exports of a commit (whole, or only some paths), what a
scanner changed in one, and the source lines a finding points at.

An export is a throwaway copy: its folders are writable, so that tools write their caches where
their documented commands put them (``.ruff_cache``, ``.mypy_cache``, ``.pytest_cache``), and
everything written is removed with the export. Its tracked files have no write bits; changing,
removing or replacing one is what :func:`changed_files` reports, and fails the scanner."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ..git.repo import Repo
from .waits import begin, once

if TYPE_CHECKING:  # imported once the scanner ran, by what reads its results
    from .findings import Finding


def ls_tree(repo: Repo, commit: str) -> tuple[dict[str, str], set[str]]:
    """Regular files of a commit (path -> blob id), and the folders of all its entries
    (symlinks' and submodules' too), each named by the deepest: what an export makes."""
    out = repo.git("ls-tree", "-r", "-z", "--full-tree", commit)
    entries: dict[str, str] = {}
    folders: set[str] = set()
    for record in out.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, kind, oid = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):
            entries[path] = oid
        folders.add(path.rpartition("/")[0])
    return entries, folders


# An export's files are written without write bits (git's umask), not made read-only by a
# chmod afterwards, and git notes their stat data in the export's index as it writes them
# (checkout-index -u). A chmod changed every file's ctime after the fact: the check found
# every entry changed, read each file, and wrote the index again. Now it finds them as noted,
# and writes nothing; it still reads the files written in the second the index was (git
# takes them for racily clean: most of an export's). READ_ONLY: the umask without write bits.
READ_ONLY = 0o222
# what lets the check trust a file whose stat data are those noted, whatever the repository's
# config says: every field compared (a write changes the ctime, which no process can set back)
# and none assumed unchanged
STAT_TRUSTED: tuple[str, ...] = ("-c", "core.trustctime=true", "-c", "core.checkStat=default")
STAT_TRUSTED += ("-c", "core.ignoreStat=false")


def export(
    repo: Repo,
    commit: str,
    folder: Path,
    paths: Collection[str] | None,
    folders: Iterable[str],
) -> None:
    """Write ``commit``'s tree (or only ``paths`` of it) to ``folder/tree``, its index beside
    it: its folders first, writable (scratch space for the scanner's caches): ``folders``
    (:func:`ls_tree`'s, for the whole tree) or those of ``paths``; then its files, read-only,
    their stat data in the index."""
    tree = folder / "tree"
    made = folders if paths is None else {path.rpartition("/")[0] for path in paths}
    for name in made:
        if not {"", ".", ".."} & set(name.split("/")):  # (git refuses to write the others)
            os.makedirs(tree / name, exist_ok=True)
    tree.mkdir(parents=True, exist_ok=True)
    env = _index_env(repo, folder)
    repo.git("read-tree", commit, env=env)
    checkout = (*STAT_TRUSTED, "checkout-index", "-u", "-f")
    if paths is None:
        repo.git(*checkout, "-a", env=env, cwd=tree, umask=READ_ONLY)
    elif paths:
        listed = "\0".join(sorted(paths))
        repo.git(*checkout, "-z", "--stdin", input=listed, env=env, cwd=tree, umask=READ_ONLY)


def changed_files(repo: Repo, folder: Path, exported: set[str] | None) -> list[str]:
    """Tracked paths of the export in ``folder`` that differ from the base: changed, removed,
    or (in a partial export) written where the base has a file that was not exported
    (``exported``: the paths a partial export holds; the others are absent by design). New
    untracked files are a scanner's scratch (its caches) and are not reported.

    Content is compared by hashing where the stat data differ from the index's (or cannot be
    trusted), and nothing is written to the object store. One git process: ``diff`` refreshes
    what only its stat data says changed (``autoRefreshIndex``, set here whatever the
    repository says), as ``update-index --refresh`` before ``diff-files`` did in two.
    """
    env = _index_env(repo, folder)
    tree = folder / "tree"
    refreshed = (*STAT_TRUSTED, "-c", "diff.autoRefreshIndex=true", "diff", "--no-ext-diff")
    changed = repo.git(*refreshed, "--no-renames", "--name-only", "-z", env=env, cwd=tree)
    differ = [p for p in changed.split("\0") if p]
    if exported is not None:  # an unexported file is "deleted"; one that appeared was written
        differ = [p for p in differ if p in exported or os.path.lexists(tree / p)]
    return sorted(set(differ))


class Check:
    """Whether a scanner changed tracked files of its export (:func:`changed_files`):
    started when its one process ends, to run (a git process) beside the parse of its output,
    or when asked for, after every process of the export ended."""

    __slots__ = ("start",)

    def __init__(self, repo: Repo, folder: Path, exported: set[str] | None) -> None:
        # (its export's processes have all ended when it starts; it starts once)
        self.start: Callable[[], Callable[[], list[str]]] = once(
            partial(begin, partial(changed_files, repo, folder, exported), "scan-check")
        )

    def changed(self) -> list[str]:
        """The tracked paths the scanner changed (the check started if it was not)."""
        return self.start()()


def _index_env(repo: Repo, folder: Path) -> dict[str, str]:
    """git pointed at the repository's objects, an export's work tree and its own index."""
    return {
        "GIT_DIR": str(repo.common_dir),
        "GIT_WORK_TREE": str(folder / "tree"),
        "GIT_INDEX_FILE": str(folder / "index"),
    }


def remove(folder: Path) -> None:
    """Delete a scan folder, read-only parts included."""
    import shutil  # (imported while the scanner runs, or after: not on the path to its start)

    for root, dirs, _files in os.walk(folder):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), 0o755)
    shutil.rmtree(folder, ignore_errors=True)


def removing(folder: Path) -> Callable[[], None]:
    """Start removing a scan folder, if there is one (a cache hit made none), on a thread of
    its own; what waits until it is gone. (A thread, not an ``rm`` process: the same CPU,
    and on a loaded machine a new process first waits for a core.)"""
    if not os.path.lexists(folder):
        return _nothing
    return begin(partial(remove, folder), "scan-cleanup")


def _nothing() -> None:
    pass


def with_sources(findings: Iterable[Finding], tree: Path) -> list[Finding]:
    """The findings with the normalized source of their lines, read from the tree (a finding
    made by a parser given :class:`.findings.SourceLines` has it already)."""
    from .findings import SourceLines

    source = SourceLines(tree)
    return [
        f if f.start_line < 1 else f.with_source(source(f.path, f.start_line, f.end_line))
        for f in findings
    ]
