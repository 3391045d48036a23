"""Where attempts run: a folder of orchardist's own per repository, outside any git directory.

Agents' own safety rules treat everything under ``.git`` as sensitive (Claude Code refuses to
edit there), so an attempt's files never live inside the user's git directory::

    <root>/<repo-key>/runs/<run>/<job>/
        tree/  the files the agent works on; its .git file points at git/
        git/   a private git directory: its own HEAD, index, refs and config; objects are read
               from the user's repository through objects/info/alternates and written here
        home/  the attempt's HOME
        tmp/   its TMPDIR
        io/    what orchardist and the agent exchange: output.json, JUnit reports
        checkout.index  the index git wrote with the checkout, out of the agent's reach: the
               snapshot reads only the files whose stat changed since (see gitrepo.Checkout)
    <root>/<repo-key>/runs/<run>/listing.git/  the git directory the snapshots list changes in
    <root>/<repo-key>/runs/<run>/pristine/<k>/   a checkout of one base commit (tree/, git/),
               shared read-only by the overlays of the attempts on that commit
    <root>/<repo-key>/baselines/<name>/...   the same, for a baseline run
    <root>/<repo-key>/links/git   a symlink to the user's git directory (see userlink.py)

Where orchardist can mount overlays (see mounts.py) and the attempt's processes are confined
(so no agent can write the pristine checkout beneath its neighbours), an attempt's ``tree/`` is an
overlay of the pristine checkout of its base commit and ``upper/`` (its changes; ``work/`` is
the overlay's scratch folder), and ``git/`` one of the pristine's git directory (``upper.git/``):
making them costs two mounts, whatever the repository's size. A pristine is made once (a full
checkout), and moved to the next base commit when no overlay uses it: only the files that
differ are written and only their index entries made again (indexfile.py; git's two-tree
``read-tree -m -u`` where that cannot). Otherwise ``tree/`` is a full checkout of its own.

``<root>`` is ``[run] workspace``, else ``$ORCHARDIST_WORKDIR_ROOT``, else
``${XDG_CACHE_HOME:-~/.cache}/orchardist``. Nothing an agent does in its git directory reaches
the user's repository: orchardist reads the result by hashing the tree itself.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OrchardistError
from ..git.repo import Repo
from . import mounts, userlink
from .paths import repo_key

if TYPE_CHECKING:
    from ..git.snapshots import Checkout
    from .attemptpaths import AttemptPaths
    from .pristine import Pristine

LISTING = "listing.git"  # in a run folder; job ids end in ".<number>", so none is named so
PRISTINE = "pristine"  # in a run folder, likewise
VIEWS = "views"  # in a run folder: what verify runs on (see executors/views.py)
MAX_LISTED = 2000  # more changes than this in an overlay's upper folder: list every file
MAX_LISTED_BYTES = 256 * 1024
# The listing git directory's config: stat data compared in full, executable bits and symlinks
# as on disk, no fsmonitor, caches or split index; and its attributes: no conversion or filter
# ever, so a content comparison is of raw bytes, as the snapshot hashes them.
_LISTING_CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\ttrustctime = true
\tcheckStat = default
\tignoreStat = false
\tignoreCase = false
\tautocrlf = false
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = false
"""
_LISTING_ATTRIBUTES = "* -text -filter -ident -working-tree-encoding\n"


class Layout:
    """The attempt folders of one repository, and how to make and remove them."""

    def __init__(self, repo: Repo, root: Path, state_dir: Path, overlays: bool = False) -> None:
        self.repo = repo
        self.folder = Path(root) / repo_key(repo.common_dir)  # everything of this repository
        self.state_dir = Path(state_dir)
        # Overlays of a shared pristine checkout (see the module docstring): only where the
        # attempts' processes cannot write the pristine (confined) and mounts are possible.
        self.overlays = overlays
        self._config: str | None = None
        self._recorded: set[str] = set()
        self._lock = threading.Lock()
        self._indexes: dict[Path, bytes] = {}  # digest of each attempt's checkout.index
        self._pristines: list[Pristine] = []
        self._lowers: dict[Path, Pristine] = {}  # attempt root -> the pristine under it
        self._removing: dict[Path, threading.Event] = {}  # attempt roots being removed
        self._skeletons: set[Path] = set()  # removed overlaid attempts: their empty tree/ left

    @property
    def user_git(self) -> Path:  # the link the attempts' alternates name (see userlink.py)
        return userlink.path(self.folder)

    def attempt(self, run_id: str, job_id: str) -> AttemptPaths:
        """The folders of a run's job (not created)."""
        from .attemptpaths import AttemptPaths  # (its record: not made by validate's look)

        return AttemptPaths.under(self.run_folder(run_id) / job_id)

    def baseline(self, name: str) -> AttemptPaths:
        """The folders of a baseline run (not created)."""
        from .attemptpaths import AttemptPaths

        return AttemptPaths.under(self.folder / "baselines" / name)

    def run_folder(self, run_id: str) -> Path:
        """Where a run's attempts live."""
        return self.folder / "runs" / run_id

    def create(self, paths: AttemptPaths, commit: str, run_id: str | None = None) -> None:
        """Fresh folders for ``paths`` with the tree at ``commit``: an overlay of the run's
        pristine checkout of ``commit`` where that can be done, else a checkout of its own.

        The git directory is written by hand (it is a handful of small files); a checkout of
        its own is filled by one ``git read-tree``: cheaper than ``git init`` and a checkout.
        """
        with self._lock:
            removing = self._removing.get(paths.root)
        if removing is not None:  # the same job folder, still being removed after its end
            removing.wait()
        if run_id is not None:
            self._record(run_id)
        self._clear(paths)
        if run_id is not None and self.overlays and mounts.usable():
            if self._overlaid(paths, commit, run_id):
                return
            self._clear(paths)
        for folder in (paths.tree, paths.home, paths.tmp, paths.io):
            folder.mkdir(parents=True, exist_ok=folder == paths.tree)
        self._git_dir(paths.git, commit)
        (paths.tree / ".git").write_text(f"gitdir: {paths.git.resolve()}\n")
        index = self._read_tree(paths.git, paths.tree, commit)
        self._checked_out(paths, index)

    def _overlaid(self, paths: AttemptPaths, commit: str, run_id: str) -> bool:
        """Make ``paths`` an overlay of the pristine checkout of ``commit``; False (nothing
        mounted) where that fails."""
        base = self._pristine(run_id, commit)
        if base is None:
            return False
        try:
            for folder in (paths.tree, paths.home, paths.tmp, paths.io):
                folder.mkdir(parents=True, exist_ok=folder == paths.tree)
            for folder in (paths.upper, paths.overlay_work, paths.git, *paths.git_layers):
                folder.mkdir()
            mounts.overlay(base.root / "tree", paths.upper, paths.overlay_work, paths.tree)
            # the git directory too: the pristine's (its index included) until git writes
            mounts.overlay(base.root / "git", *paths.git_layers, paths.git)
        except OSError:
            mounts.unmount(paths.tree)  # (nothing, unless the git directory's mount failed)
            self._release(base)
            self.overlays = False  # the kernel or the file system refuses: full checkouts
            return False
        with self._lock:
            self._lowers[paths.root] = base
        (paths.tree / ".git").write_text(f"gitdir: {paths.git.resolve()}\n")
        # a link, not a copy: the pristine never rewrites this file in place (see _fill_pristine)
        os.link(base.root / "checkout.index", paths.checkout_index)
        with self._lock:
            self._indexes[paths.root] = base.digest
        return True

    def _pristine(self, run_id: str, commit: str) -> Pristine | None:
        """A pristine checkout of ``commit``, in use by the caller until :meth:`_release`:
        one already there, else an unused one moved to ``commit``, else a new one."""
        from ..safeio import (
            remove_tree,  # (removing and reading files: validate's look at a layout does neither)
        )

        with self._lock:
            found = next((p for p in self._pristines if p.commit == commit), None)
            if found is not None:
                found.users += 1
            else:
                base, old = self._claim(run_id, commit)
        if found is not None:
            found.ready.wait()
            if found.failed:
                self._release(found)
                return None
            return found
        try:
            base.index = self._fill_pristine(base, old)
            base.digest = hashlib.sha256(base.index).digest()
            fresh = base.root / "checkout.index.new"  # replaced whole: attempts link the old one
            fresh.write_bytes(base.index)
            fresh.replace(base.root / "checkout.index")
        except (OSError, OrchardistError):
            with self._lock:
                base.failed = True
                self._pristines.remove(base)
            base.ready.set()
            remove_tree(base.root)
            return None
        base.ready.set()
        return base

    def _claim(self, run_id: str, commit: str) -> tuple[Pristine, str | None]:
        """An unused pristine, now for ``commit``, and the commit it holds (None: a new one,
        empty). Called with the lock held."""
        idle = next((p for p in self._pristines if p.users == 0), None)
        if idle is None:
            # (its record is made where overlays are: validate's look at a layout makes none)
            from .pristine import Pristine

            name = os.urandom(4).hex()  # never a resumed run's leftover
            idle = Pristine(self.run_folder(run_id) / PRISTINE / name, commit)
            self._pristines.append(idle)
            return idle, None
        old = idle.commit
        idle.commit, idle.users, idle.ready = commit, 1, threading.Event()
        return idle, old

    def _fill_pristine(self, base: Pristine, old: str | None) -> bytes:
        """Check ``base.commit`` out in its folder: all of it, or from ``old`` only what
        differs (by orchardist, see indexfile.py; by git where that cannot)."""
        git, tree, commit = base.root / "git", base.root / "tree", base.commit
        if old is None:
            tree.mkdir(parents=True)
            self._git_dir(git, commit)
            return self._read_tree(git, tree, commit)
        from ..git.indexfile import IndexFile, advance  # (two records): not for validate

        if base.parsed is None:
            base.parsed = IndexFile.parse(base.index)
        moved = base.parsed and advance(self.repo, tree, base.parsed, old, commit)
        if moved:
            (git / "index.new").write_bytes(moved)
            (git / "index.new").replace(git / "index")
        else:
            base.parsed = None  # parsed again from what git writes, at the next move
            self.repo.git(
                f"--git-dir={git}",
                f"--work-tree={tree}",
                "-c",
                "core.splitIndex=false",
                "read-tree",
                "-m",
                "-u",
                old,
                commit,
            )
            moved = (git / "index").read_bytes()
        (git / "HEAD").write_text(f"{commit}\n")
        return moved

    def _release(self, base: Pristine) -> None:
        with self._lock:
            base.users -= 1

    def _git_dir(self, git: Path, commit: str) -> None:
        """A private git directory at ``commit``: objects read from the user's repository."""
        for sub in ("objects/info", "refs/heads", "refs/tags", "info"):
            (git / sub).mkdir(parents=True)
        objects = userlink.ensure(self.folder, self.repo.common_dir)
        (git / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        (git / "HEAD").write_text(f"{commit}\n")
        (git / "config").write_text(self._git_config())
        copy_excludes(self.repo.common_dir, git)  # the agent's status matches the user's

    def _read_tree(self, git: Path, tree: Path, commit: str) -> bytes:
        """Check every file of ``commit`` out in ``tree``; the index written."""
        self.repo.git(
            f"--git-dir={git}",
            f"--work-tree={tree}",
            "-c",
            "core.splitIndex=false",  # the index copy must stand alone
            "read-tree",
            "--reset",
            "-u",
            commit,
        )
        return (git / "index").read_bytes()

    def _checked_out(self, paths: AttemptPaths, index: bytes) -> None:
        """Keep a copy of the index the checkout wrote, and its digest (see :meth:`checkout`)."""
        paths.checkout_index.write_bytes(index)
        with self._lock:
            self._indexes[paths.root] = hashlib.sha256(index).digest()

    def checkout(self, paths: AttemptPaths, run_id: str) -> Checkout | None:
        """How ``paths`` was checked out, for a snapshot that reads only what changed; None
        where the layout did not check it out, or the index copy is not the one it wrote (an
        agent without the sandbox can write anywhere): then the snapshot reads every file."""
        with self._lock:
            digest = self._indexes.get(paths.root)
        try:
            index = paths.checkout_index.read_bytes()
        except OSError:
            return None
        if digest is None or hashlib.sha256(index).digest() != digest:
            return None
        with self._lock:
            base = self._lowers.get(paths.root)
        only = None
        if base is not None and os.path.ismount(paths.tree):
            found = mounts.changed_paths(paths.upper, base.root / "tree", MAX_LISTED)
            if found is not None and sum(map(len, found)) <= MAX_LISTED_BYTES:  # argv room
                only = tuple(found)
        from ..git.snapshots import Checkout  # (a layout looked at by validate makes none)

        return Checkout(paths.checkout_index, self._listing(run_id), only)

    def _listing(self, run_id: str) -> Path:
        """The run's listing git directory (see the module docstring), made once."""
        gitdir = self.run_folder(run_id) / LISTING
        with self._lock:
            if not (gitdir / "HEAD").is_file():
                for sub in ("objects/info", "refs", "info"):
                    (gitdir / sub).mkdir(parents=True, exist_ok=True)
                # git compares a symlink written in the checkout's clock tick with its blob
                objects = (self.repo.common_dir / "objects").resolve()
                (gitdir / "objects" / "info" / "alternates").write_text(f"{objects}\n")
                (gitdir / "config").write_text(_LISTING_CONFIG)
                (gitdir / "info" / "attributes").write_text(_LISTING_ATTRIBUTES)
                copy_excludes(self.repo.common_dir, gitdir)  # ignore rules as the user's own
                (gitdir / "HEAD").write_text("ref: refs/heads/none\n")
        return gitdir

    def retire(self, paths: AttemptPaths) -> None:
        """Say that ``paths`` will be removed soon: a new attempt in the same folder waits."""
        with self._lock:
            self._removing.setdefault(paths.root, threading.Event())

    def remove(self, paths: AttemptPaths) -> None:
        """Remove an attempt's folders, whatever the agent did to them."""
        with self._lock:
            self._indexes.pop(paths.root, None)
            base = self._lowers.pop(paths.root, None)
        try:
            if base is not None:
                mounts.unmount(paths.tree)
                mounts.unmount(paths.git)
                # The empty tree/ and git/ stay until the run is tidied: a bwrap starting now
                # has a copy of these mounts, and fails when remounting one read-only finds
                # its path gone.
                with self._lock:
                    self._skeletons.add(paths.root)
            self._clear(paths)
        finally:
            if base is not None:
                self._release(base)
            with self._lock:
                removing = self._removing.pop(paths.root, None)
            if removing is not None:
                removing.set()

    def _clear(self, paths: AttemptPaths) -> None:
        """Remove an attempt's folder; only its contents but an empty tree/ where an overlay
        was mounted on it in this run (see :meth:`remove`)."""
        from ..safeio import remove_tree, remove_trees

        with self._lock:
            skeleton = paths.root in self._skeletons
        kept = (paths.tree, paths.git)
        if not skeleton or any(map(os.path.ismount, kept)):
            remove_trees(_entries(paths.root))  # side by side: the run's end waits for the last
            remove_tree(paths.root)
            return
        # tree/ and git/ stay, emptied (nothing in them, unless someone wrote there since)
        others = [entry for entry in _entries(paths.root) if entry not in kept]
        remove_trees([*others, *_entries(paths.tree), *_entries(paths.git)])

    def tidy(self) -> None:
        """Remove the run folders this layout made, and its parents, where they are empty."""
        from ..safeio import remove_tree, remove_trees

        with self._lock:
            self._pristines = [p for p in self._pristines if p.users > 0]
            skeletons, self._skeletons = self._skeletons, set()
        # every attempt has ended: no bwrap copies the skeletons' mounts now
        remove_trees([*skeletons, *self._run_leftovers()])
        for run_id in self._recorded:
            pristines = self._unused_pristines(run_id)
            if pristines is not None:  # emptied above
                remove_tree(pristines)
            for folder in (self.run_folder(run_id), self.folder / "runs", self.folder):
                if folder == self.folder:
                    userlink.remove(self.folder)
                try:
                    folder.rmdir()
                except OSError:
                    break

    def _run_leftovers(self) -> list[Path]:
        """What :meth:`tidy` removes of each run's folder, all side by side (the run's end
        waits for them): its listing, its views (each went with its attempt, unmounted), and
        each of its pristines where none is in use."""
        found: list[Path] = []
        for run_id in self._recorded:
            found += [self.run_folder(run_id) / LISTING, self.run_folder(run_id) / VIEWS]
            pristines = self._unused_pristines(run_id)
            if pristines is not None and pristines.is_dir() and not pristines.is_symlink():
                found += sorted(pristines.iterdir())
        return found

    def _unused_pristines(self, run_id: str) -> Path | None:
        """The folder of a run's pristines, None while one of them is in use."""
        folder = self.run_folder(run_id)
        with self._lock:
            if any(p.root.is_relative_to(folder) for p in self._pristines):
                return None
        return folder / PRISTINE

    def _git_config(self) -> str:
        if self._config is None:
            fmt = self.repo.object_format
            lines = ["[core]", f"\trepositoryformatversion = {0 if fmt == 'sha1' else 1}"]
            lines += ["\tfilemode = true", "\tbare = false", "\tlogallrefupdates = true"]
            if fmt != "sha1":
                lines += ["[extensions]", f"\tobjectformat = {fmt}"]
            lines += ["[gc]", "\tauto = 0"]  # the alternates are the user's: never repack here
            name, email = self.identity()
            lines += ["[user]", f"\tname = {_quoted(name)}", f"\temail = {_quoted(email)}"]
            self._config = "\n".join(lines) + "\n"
        return self._config

    def identity(self) -> tuple[str, str]:
        """The user's git identity (or orchardist's fallback), for commits inside the tree:
        the attempt's private HOME has no git config of its own."""
        return self.repo.identity()

    def _record(self, run_id: str) -> None:
        """Note where a run's folders are, for resume and gc (which do not read the plan)."""
        if run_id in self._recorded:
            return
        pointer = self.state_dir / "workdirs" / run_id
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(f"{self.run_folder(run_id)}\n")
        self._recorded.add(run_id)


MAX_EXCLUDE_BYTES = 1 << 20


def _entries(folder: Path) -> list[Path]:
    """What is in ``folder``, when it is a real folder (a symlink is never followed)."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    try:
        return [Path(entry.path) for entry in os.scandir(folder)]
    except OSError:
        return []


def copy_excludes(common_dir: Path, git_dir: Path) -> None:
    """Copy the repository's ``info/exclude`` into ``git_dir``: only a regular file, capped
    (without the sandbox an agent could have made it a FIFO or a link to /dev/zero)."""
    from ..safeio import read_capped

    body = read_capped(Path(common_dir) / "info" / "exclude", MAX_EXCLUDE_BYTES)
    if body is not None:
        (Path(git_dir) / "info" / "exclude").write_bytes(body)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
