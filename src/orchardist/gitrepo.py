"""git, through its command line: worktrees, snapshots of a worktree as a commit, and merges.

Merges never use a checkout: ``git merge-tree --write-tree`` computes the merged tree and the
run branch moves with a compare-and-swap (in-process on the loose ref under git's lock protocol,
else ``git update-ref``), so the user's working tree, index and current branch are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import GitError
from .safeio import read_capped
from .treehash import (
    Entry,
    ObjectWriter,
    escaping_symlinks,
    read_entry,
    refused_path,
    tree_objects,
)

FALLBACK_NAME = "orchardist"
FALLBACK_EMAIL = "orchardist@localhost"
TRAILER_PREFIX = "Orchardist-"
# Resolved once: a `git` an agent drops earlier on PATH later is never the one we run.
GIT = shutil.which("git") or "git"
REFLOG_MESSAGE = "orchardist"
# Outranking the repository's own config too: no command git would run on its own.
FIXED_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
# Data, not commands, kept from the user's global configuration: which files they ignore
# everywhere (a snapshot must not commit them), and repositories they trust though another
# user owns them.
CARRIED_CONFIG = r"^(core\.excludesfile|safe\.directory)$"


def find_toplevel(path: Path) -> Path | None:
    """The work tree root containing ``path``, or None when it is not in a git repository."""
    try:
        out = subprocess.run(
            [GIT, "-C", str(path), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    return Path(out.stdout.strip()).resolve()


@dataclass(frozen=True)
class MergeResult:
    """Outcome of a three-way tree merge: a tree id, or the conflicting paths."""

    tree: str | None
    conflicts: tuple[str, ...] = ()


class Repo:
    """One repository, driven by git commands with a fixed, quiet environment."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._env = self._git_env()
        self.common_dir = Path(self.git("rev-parse", "--path-format=absolute", "--git-common-dir"))
        self._native = self._native_identities()

    def _git_env(self) -> dict[str, str]:
        """orchardist's own git: a fixed configuration in which nothing configured runs.

        No system or global configuration (an agent that could write ``~/.gitconfig.local``,
        pulled in by an ``[include]``, would otherwise plant an fsmonitor, a filter driver or
        a ``gpg.program`` that runs in the orchestrator, with its environment), no global
        attributes, no hooks, no fsmonitor. What orchardist needs from the user's own
        configuration is data, read once here: the identity and a few settings (FIXED_CONFIG,
        CARRIED_CONFIG). The repository's own config is still read: only the user writes it.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
        carried = carried_config(self.root, env)
        identity = identity_env(self.root, env)
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_ATTR_NOSYSTEM="1")
        env.update(config_env([*FIXED_CONFIG, *carried]))
        env.update(identity)
        return env

    # -- plumbing ------------------------------------------------------------------------

    def git(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        ok: Sequence[int] = (0,),
    ) -> str:
        """Run git and return stdout stripped of its final newline; GitError on failure."""
        proc = self.run_git(*args, cwd=cwd, input=input, env=env)
        if proc.returncode not in ok:
            cmd = " ".join(["git", *args])
            raise GitError(f"{cmd} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout.rstrip("\n")

    def run_git(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run git and return the completed process whatever its exit code."""
        full_env = {**self._env, **(env or {})}
        try:
            return subprocess.run(
                [GIT, *args],
                cwd=cwd or self.root,
                input=input,
                capture_output=True,
                text=True,
                errors="replace",
                env=full_env,
                stdin=None if input is not None else subprocess.DEVNULL,
                check=False,
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc}") from exc

    def rev_parse(self, ref: str) -> str:
        """The commit id ``ref`` names."""
        return self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")

    def try_rev_parse(self, ref: str) -> str | None:
        """The commit id ``ref`` names, or None."""
        proc = self.run_git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return proc.stdout.strip() if proc.returncode == 0 else None

    def tree_of(self, commit: str) -> str:
        """The tree id of a commit."""
        loose = self._read_loose(commit)
        if loose is not None and loose[0] == "commit" and loose[1].startswith(b"tree "):
            return loose[1][5:45].decode()
        return self.git("rev-parse", f"{commit}^{{tree}}")

    def update_ref(self, ref: str, new: str, old: str | None) -> bool:
        """Move ``ref`` to ``new`` only if it still points at ``old`` (None: must not exist)."""
        if old is not None and self._native is not None and ref.startswith("refs/heads/"):
            moved = self._move_loose_ref(ref, new, old)
            if moved is not None:
                return moved
        expected = old if old is not None else "0" * 40
        # The reflog message tells our moves from anyone else's (see checkout_fingerprint).
        proc = self.run_git("update-ref", "-m", REFLOG_MESSAGE, ref, new, expected)
        return proc.returncode == 0

    def set_ref(self, ref: str, new: str) -> None:
        """Point ``ref`` at ``new`` whatever it pointed at before."""
        self.git("update-ref", ref, new)

    def delete_ref(self, ref: str) -> None:
        """Delete a ref if it exists."""
        self.run_git("update-ref", "-d", ref)

    def commit_tree(self, tree: str, parents: Sequence[str], message: str) -> str:
        """Create a commit object (no ref moves).

        Written in-process as a loose object when it can be (a SHA-1 repository, no commit
        signing, ids given in full): merging is on the scheduler's path, and a git process
        costs milliseconds. Otherwise, and for tree expressions, ``git commit-tree``.
        """
        if self._native is not None and _is_oid(tree) and all(_is_oid(p) for p in parents):
            author, committer = self._native
            stamp = f"{int(time.time())} {time.strftime('%z')}"
            lines = [f"tree {tree}", *(f"parent {p}" for p in parents)]
            lines += [f"author {author} {stamp}", f"committer {committer} {stamp}", ""]
            return self._write_object("commit", ("\n".join(lines) + "\n" + message).encode())
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, input=message)

    def _native_identities(self) -> tuple[str, str] | None:
        """``(author, committer)`` as ``Name <email>`` when commits may be written in-process."""
        if self.run_git("rev-parse", "--show-object-format").stdout.strip() != "sha1":
            return None
        if self.run_git("config", "--bool", "commit.gpgSign").stdout.strip() == "true":
            return None
        idents = []
        for role in ("AUTHOR", "COMMITTER"):
            proc = self.run_git("var", f"GIT_{role}_IDENT")
            ident = proc.stdout.strip().rsplit(" ", 2)[0]
            if proc.returncode != 0 or "<" not in ident:
                return None
            idents.append(ident)
        return idents[0], idents[1]

    def _move_loose_ref(self, ref: str, new: str, old: str) -> bool | None:
        """Compare-and-swap a loose ref as git's files backend does: take ``<ref>.lock``
        exclusively, check the value, write, rename, and log it. None: leave it to git (the
        ref is packed or locked, or the value is not a plain id)."""
        path = self.common_dir / ref
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
            if not _is_oid(current):
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
        assert self._native is not None
        entry = f"{old} {new} {self._native[1]} {int(time.time())} {time.strftime('%z')}"
        log = self.common_dir / "logs" / ref
        if log.exists():
            with log.open("a") as fh:
                fh.write(f"{entry}\t{REFLOG_MESSAGE}\n")
        return True

    def _read_loose(self, oid: str) -> tuple[str, bytes] | None:
        """``(type, body)`` of a loose object, or None (packed, missing, not a full id)."""
        if not _is_oid(oid):
            return None
        try:
            data = zlib.decompress((self.common_dir / "objects" / oid[:2] / oid[2:]).read_bytes())
        except (OSError, zlib.error):
            return None
        header, _, body = data.partition(b"\0")
        return header.split(b" ", 1)[0].decode(), body

    def _write_object(self, kind: str, body: bytes) -> str:
        """Store a loose object the way git does, replacing a copy whose bytes are not ours."""
        return ObjectWriter(self.common_dir / "objects").write(kind, body)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether ``ancestor`` is reachable from ``descendant``."""
        proc = self.run_git("merge-base", "--is-ancestor", ancestor, descendant)
        return proc.returncode == 0

    # -- worktrees -----------------------------------------------------------------------

    @contextlib.contextmanager
    def worktree_lock(self) -> Iterator[None]:
        """Serialize worktree administration (git's own is not safe against a concurrent prune).

        An flock on a file of our own: it excludes other threads (each opens its own file
        description) and other orchardist processes on the same repository alike.
        """
        path = self.common_dir / "orchardist" / "worktrees.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def add_worktree(self, path: Path, commit: str) -> None:
        """A detached worktree at ``commit``; an old directory at ``path`` is replaced."""
        with self.worktree_lock():
            if path.exists():
                self._remove_worktree(path)
            else:  # git refuses a path still registered to a worktree whose folder was deleted
                self.run_git("worktree", "prune")
            path.parent.mkdir(parents=True, exist_ok=True)
            self.git("worktree", "add", "--detach", "--quiet", str(path), commit)

    def remove_worktree(self, path: Path) -> None:
        """Remove a worktree, even one an agent damaged or deleted."""
        with self.worktree_lock():
            self._remove_worktree(path)

    def prune_worktrees(self) -> None:
        """Forget worktrees whose folders are gone."""
        with self.worktree_lock():
            self.run_git("worktree", "prune")

    def _remove_worktree(self, path: Path) -> None:
        self.run_git("worktree", "remove", "--force", "--force", str(path))
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        self.run_git("worktree", "prune")

    def worktree_admin(self, worktree: Path) -> Path | None:
        """The administration folder git keeps for a linked worktree (read from git's side)."""
        proc = self.run_git("rev-parse", "--path-format=absolute", "--git-dir", cwd=worktree)
        admin = Path(proc.stdout.strip()) if proc.returncode == 0 else None
        if admin is None or not admin.is_relative_to(self.common_dir / "worktrees"):
            return None
        return admin

    def worktrees(self) -> list[Path]:
        """Paths of all worktrees git knows, the main one first."""
        with self.worktree_lock():  # a listing races with an add, as a prune does
            out = self.git("worktree", "list", "--porcelain")
        return [Path(line[9:]) for line in out.splitlines() if line.startswith("worktree ")]

    def snapshot(
        self, worktree: Path, base: str, message: str, checkout: Checkout | None = None
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
            return self._snapshot_changes(worktree, base, message, checkout)
        index = worktree.parent / f".{worktree.name}.index"
        # The agent could write the worktree's .git file and its admin folder: never let git
        # find its repository (and config: core.fsmonitor runs a command) through them.
        env = {
            "GIT_INDEX_FILE": str(index),
            "GIT_DIR": str(self.common_dir),
            "GIT_WORK_TREE": str(worktree),
        }
        try:
            self.git("read-tree", base, cwd=worktree, env=env)
            staged = self._git_bytes("ls-files", "-z", "--stage", cwd=worktree, env=env)
            others = self._git_bytes(
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
        paths += added
        writer = ObjectWriter(self.common_dir / "objects")
        entries = dict(gitlinks)
        root_fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for path in paths:
                entry = read_entry(root_fd, path, writer)
                if entry is not None:
                    entries[path] = entry
        finally:
            os.close(root_fd)
        # The base's own paths passed git's checks when they were committed.
        checked = {*added, *(p for p, e in entries.items() if e.mode == "120000")}
        refused = [p for p in checked if p in entries and refused_path(p, entries[p].mode)]
        if refused:
            names = ", ".join(sorted(os.fsdecode(p) for p in refused))
            raise GitError(f"paths git refuses to record (they name a .git folder): {names}")
        tree, trees = tree_objects(entries, writer)
        self.check_objects([e.oid for e in entries.values() if e.mode != "160000"] + trees)
        return self.commit_tree(tree, [base], message)

    def _snapshot_changes(self, worktree: Path, base: str, message: str, checkout: Checkout) -> str:
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
            listed = self._git_bytes(
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
        writer = ObjectWriter(self.common_dir / "objects")
        changes: dict[bytes, Entry | None] = {}
        root_fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for path in paths:
                changes[path] = read_entry(root_fd, path, writer)
        finally:
            os.close(root_fd)
        refused = [p for p, e in changes.items() if e is not None and refused_path(p, e.mode)]
        if refused:
            names = ", ".join(sorted(os.fsdecode(p) for p in refused))
            raise GitError(f"paths git refuses to record (they name a .git folder): {names}")
        tree, trees = self._tree_with(self.tree_of(base), changes, writer)
        self.check_objects([e.oid for e in changes.values() if e is not None] + trees)
        return self.commit_tree(tree, [base], message)

    def _tree_with(
        self, base_tree: str, changes: Mapping[bytes, Entry | None], writer: ObjectWriter
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
            bodies = self.read_objects([ids[f] for f in level])
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

    def check_objects(self, oids: Sequence[str]) -> None:
        """GitError unless git reads back, for each id, bytes that hash to that id.

        A pack can hold other bytes under an id, and git prefers packs to loose objects.
        """
        for oid, (kind, body) in self.read_objects(oids).items():
            data = f"{kind} {len(body)}\0".encode() + body
            if hashlib.sha1(data).hexdigest() != oid:
                raise GitError(
                    f"object {oid} in the repository does not hold what its id says "
                    "(a forged object in the object store)"
                )

    def read_objects(self, oids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """``{id: (type, bytes)}`` as git reads them (``cat-file --batch``); GitError if one
        is missing."""
        wanted = list(dict.fromkeys(oids))
        if not wanted:
            return {}
        stdin = "".join(f"{oid}\n" for oid in wanted).encode()
        out = self._git_bytes("cat-file", "--batch", cwd=self.root, env={}, stdin=stdin)
        found, pos = {}, 0
        for oid in wanted:
            end = out.find(b"\n", pos)
            header = out[pos:end].decode(errors="replace").split()
            if end < 0 or len(header) != 3 or header[0] != oid or not header[2].isdigit():
                raise GitError(f"object {oid} cannot be read from the repository")
            size = int(header[2])
            found[oid] = (header[1], out[end + 1 : end + 1 + size])
            pos = end + 2 + size
        return found

    def _git_bytes(
        self, *args: str, cwd: Path, env: Mapping[str, str], stdin: bytes | None = None
    ) -> bytes:
        """git's raw stdout (paths are bytes, not always UTF-8); GitError on failure."""
        try:
            proc = subprocess.run(
                [GIT, *args],
                cwd=cwd,
                input=stdin,
                capture_output=True,
                env={**self._env, **env},
                stdin=subprocess.DEVNULL if stdin is None else None,
                check=False,
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc}") from exc
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise GitError(f"git {' '.join(args)} failed ({proc.returncode}): {err}")
        return proc.stdout

    def changed_lines(self, old: str, new: str) -> int:
        """Lines added plus lines removed between two commits (binary files count 1 each)."""
        out = self.git("diff", *_PLAIN_DIFF, "--numstat", "--no-renames", old, new)
        total = 0
        for line in out.splitlines():
            added, removed, _ = line.split("\t", 2)
            total += 1 if added == "-" else int(added) + int(removed)
        return total

    def changed_files(self, old: str, new: str) -> list[str]:
        """Paths that differ between two commits."""
        out = self.git("diff", *_PLAIN_DIFF, "--name-only", "--no-renames", "-z", old, new)
        return [p for p in out.split("\0") if p]

    def merge_trees(self, base: str, ours: str, theirs: str) -> MergeResult:
        """Three-way merge of commits with ``base`` as the merge base, touching no checkout.

        ``theirs`` must be a child of ``base``. git < 2.40 has no ``--merge-base``, and the
        base git would find is wrong when ``base`` is not in ``ours``'s history (a patch made
        on a commit that was later taken off the branch). So ``ours``'s tree is merged from a
        stand-in commit whose only parent is ``base``: then git's merge base is ``base``.
        """
        stand_in = self.commit_tree(self.tree_of(ours), [base], "orchardist merge base\n")
        proc = self.run_git(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", stand_in, theirs
        )
        lines = proc.stdout.splitlines()
        if proc.returncode == 0:
            return MergeResult(lines[0].strip())
        if proc.returncode == 1 and lines:  # git also exits 1, printing no tree, on bad input
            return MergeResult(None, tuple(line for line in lines[1:] if line))
        raise GitError(f"git merge-tree failed ({proc.returncode}): {proc.stderr.strip()}")

    def first_parents(self, since: str, until: str) -> list[str]:
        """Commits in ``since..until`` along first parents, oldest first."""
        return self.git("rev-list", "--reverse", "--first-parent", f"{since}..{until}").split()

    def patch_problems(self, base: str, patch: str, max_file_bytes: int | None) -> list[str]:
        """Reasons a patch must not be merged: symlinks it makes lead outside the repository
        (the whole chain resolved inside the patch's tree), huge files.

        Only what the patch changes is looked at: a patch that adds, changes or removes no
        symlink leaves the tree's links as the base has them (the user's own).
        """
        out = self.git(
            "diff", *_PLAIN_DIFF, "--raw", "--no-renames", "-z", "--no-abbrev", base, patch
        )
        fields = out.split("\0")
        changes = [
            (meta.split(), path)
            for meta, path in zip(fields[0::2], fields[1::2], strict=False)
            if len(meta.split()) >= 5
        ]
        problems = []
        if any("120000" in parts[:2] for parts, _ in changes):
            theirs = set(escaping_symlinks(self._symlinks(base)))
            problems += [
                f"{path} is a symlink pointing outside the repository"
                for path in escaping_symlinks(self._symlinks(patch))
                if path not in theirs
            ]
        if max_file_bytes is None:
            return problems
        blobs = {
            path: parts[3]
            for parts, path in changes
            if not parts[4].startswith("D") and parts[1] not in ("120000", "160000")
        }
        sizes = self.object_sizes(list(blobs.values()))
        for path, oid in blobs.items():
            size = sizes[oid]
            if size > max_file_bytes:
                mib = 1024 * 1024
                problems.append(
                    f"{path} is {size / mib:.1f} MiB, over the {max_file_bytes / mib:g} MiB "
                    "limit (max_patch_mb)"
                )
        return problems

    def object_sizes(self, oids: Sequence[str]) -> dict[str, int]:
        """``{id: size}`` of objects, with one git process."""
        wanted = list(dict.fromkeys(oids))
        if not wanted:
            return {}
        stdin = "".join(f"{oid}\n" for oid in wanted).encode()
        out = self._git_bytes("cat-file", "--batch-check", cwd=self.root, env={}, stdin=stdin)
        sizes = {}
        for line in out.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) != 3 or not parts[2].isdigit():
                raise GitError(f"cannot read object sizes: {line}")
            sizes[parts[0]] = int(parts[2])
        missing = [oid for oid in wanted if oid not in sizes]
        if missing:
            raise GitError(f"object {missing[0]} cannot be read from the repository")
        return sizes

    def _symlinks(self, commit: str) -> dict[str, str]:
        """Every symlink of a commit's tree: ``path -> target``."""
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit)
        links = {}
        for record in out.split("\0"):
            meta, _, path = record.partition("\t")
            if meta.startswith("120000 "):
                links[path] = meta.split()[2]
        blobs = self.read_objects(list(links.values()))
        return {path: blobs[oid][1].decode(errors="replace") for path, oid in links.items()}

    def checkout_fingerprint(
        self, ignore_refs: Sequence[str] = (), watch_reflogs: Sequence[str] = ()
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
            path = self.common_dir / name
            files = sorted(path.rglob("*")) if path.is_dir() and not path.is_symlink() else [path]
            for file in files:
                digest.update(str(file).encode() + b"\0" + _fingerprint_of(file) + b"\0")
        parts: dict[str, str] = {"git config, hooks or info": digest.hexdigest()}
        for ref in watch_reflogs:
            moves = self.run_git("reflog", "show", "--format=%gs", ref).stdout.splitlines()
            count = sum(m != REFLOG_MESSAGE for m in moves)
            if count:  # only foreign moves show, so a changing watch list does not
                parts[f"run branch {ref.removeprefix('refs/heads/')}"] = str(count)
        head = self.run_git("symbolic-ref", "-q", "HEAD").stdout.strip()
        commit = self.run_git("rev-parse", "-q", "--verify", "HEAD").stdout.strip()
        refs = [
            line
            for line in self.git(
                "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"
            ).splitlines()
            if not any(line.startswith(prefix) for prefix in ignore_refs)
        ]
        parts["HEAD"] = f"{head} {commit}"
        parts["files or index"] = self._checkout_files()
        parts["branches or tags"] = "\n".join(refs)
        return parts

    def _checkout_files(self) -> str:
        """A digest of the checkout's index entries and of every file's ``lstat``, tracked or
        not (ignored files excepted). Neither ``ls-files`` nor ``lstat`` reads a file's bytes:
        unlike ``git status``, no clean filter a repository's config names ever runs here."""
        root = self.root
        digest = hashlib.sha256(self._git_bytes("ls-files", "-z", "--stage", cwd=root, env={}))
        listing = self._git_bytes(
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

    def status_porcelain(self) -> str:
        """``git status --porcelain`` of the main checkout (for checks, never changed by us)."""
        return self.git("status", "--porcelain=v1", "--untracked-files=all")


# Bigger than any config, hook or info file: past it, a file is told apart by its metadata.
MAX_FINGERPRINT_BYTES = 1 << 20


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


def commit_message(title: str, trailers: Mapping[str, str | int]) -> str:
    """A commit message: the title, a blank line, then ``Orchardist-*`` trailers."""
    lines = [title.strip() or "orchardist task", ""]
    lines += [f"{TRAILER_PREFIX}{key}: {value}" for key, value in trailers.items()]
    return "\n".join(lines) + "\n"


def identity_env(root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """Author and committer variables for commits: the identity the user's git has (read with
    the user's own configuration), or orchardist's where git has none."""
    out: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        proc = subprocess.run(
            [GIT, "var", f"GIT_{role}_IDENT"],
            cwd=root,
            capture_output=True,
            text=True,
            env={**env, "GIT_TERMINAL_PROMPT": "0"},
            check=False,
        )
        name, _, email = proc.stdout.rsplit(" ", 2)[0].partition(" <")
        email = email.removesuffix(">")
        if proc.returncode != 0 or "@" not in email or "(none)" in email or not name.strip():
            name, email = FALLBACK_NAME, FALLBACK_EMAIL
        out[f"GIT_{role}_NAME"] = name.strip()
        out[f"GIT_{role}_EMAIL"] = email.strip()
    return out


def carried_config(root: Path, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The settings of CARRIED_CONFIG as the user's git has them (system, global, includes)."""
    proc = subprocess.run(
        [GIT, "config", "-z", "--includes", "--get-regexp", CARRIED_CONFIG],
        cwd=root,
        capture_output=True,
        text=True,
        errors="replace",
        env={**env, "GIT_TERMINAL_PROMPT": "0"},
        check=False,
    )
    carried = []
    for record in proc.stdout.split("\0"):
        key, _, value = record.partition("\n")
        if key:
            if key == "core.excludesfile":
                value = os.path.expanduser(value)
                if not _regular_file(value):  # a FIFO there would hang every ls-files
                    continue
            carried.append((key, value))
    return carried


def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def config_env(settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``GIT_CONFIG_COUNT``/``KEY``/``VALUE`` variables: command-line configuration, which
    outranks every configuration file."""
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for n, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return env


_OID = re.compile(r"[0-9a-f]{40}")
# No diff command or text conversion a repository's config names.
_PLAIN_DIFF = ("--no-ext-diff", "--no-textconv")


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


def _is_oid(text: str) -> bool:
    return _OID.fullmatch(text) is not None
