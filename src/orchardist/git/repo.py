"""git, through its command line: worktrees, snapshots of a worktree as a commit, and merges.

Merges never use a checkout: ``git merge-tree --write-tree`` computes the merged tree and the
run branch moves with a compare-and-swap (in-process on the loose ref under git's lock protocol,
else ``git update-ref``), so the user's working tree, index and current branch are never touched.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GitError
from .diffstat import numstat_total, raw_and_numstat
from .env import GIT, git_setup, identity_env, user_env

if TYPE_CHECKING:
    from .merges import MergeResult
    from .snapshots import Checkout

# Snapshots, fingerprints, loose objects and refs (with zlib), object writing, merges' outcomes
# and shutil are imported where used: a command that only reads (validate) needs none (a record
# costs a millisecond to make).

TRAILER_PREFIX = "Orchardist-"


class Repo:
    """One repository, driven by git commands with a fixed, quiet environment.

    ``identity=False``: for checks that only read (``validate``'s preflight), without the
    user's identity, which only commits and reflogs carry; asking git for it is two processes.
    ``resolve``: a commit to look up with the repository's own facts, in the same git process
    (``validate`` and ``run`` ask for their base); its id is ``resolved`` (:meth:`commit_of`),
    None where it names no commit.
    ``untracked=False``: for a caller that lists no untracked or ignored file (validate's
    preflight), the user's ``core.excludesfile`` and ``safe.directory`` are asked only if git
    refuses the repository without them (another user owns it): a git process fewer.
    ``within``: ``root`` is any folder of a work tree, whose top level, asked in the same git
    process, becomes ``root`` (the plan's loader learns where the repository is and its facts
    at once); GitError where it is in none.
    """

    def __init__(
        self,
        root: Path,
        identity: bool = True,
        resolve: str | None = None,
        untracked: bool = True,
        within: bool = False,
    ) -> None:
        self.root = Path(root)
        self._env, self._signing = git_setup(self.root, identity, carry=untracked)
        top = ["--show-toplevel"] if within else []
        asked = ["rev-parse", "--path-format=absolute", *top, "--git-common-dir"]
        asked.append("--show-object-format")
        if resolve is not None:  # (printed after the facts; a bad one only makes the exit 1)
            asked += ["--verify", "--quiet", f"{resolve}^{{commit}}"]
        proc = self.run_git(*asked)
        if not untracked and proc.returncode == 128:  # refused: perhaps trusted, not owned
            self._env, self._signing = git_setup(self.root, identity)
            proc = self.run_git(*asked)
        if proc.returncode not in ((0, 1) if resolve is not None else (0,)):
            cmd = " ".join(["git", *asked])
            raise GitError(f"{cmd} failed ({proc.returncode}): {proc.stderr.strip()}")
        lines = proc.stdout.rstrip("\n").split("\n")
        if len(lines) < 2 + within:  # exit 1 without the facts: not the commit's doing
            raise GitError(f"git {' '.join(asked)} failed: {lines[0]!r}")
        if within:
            self.root = Path(lines.pop(0)).resolve()
        self.common_dir = Path(lines[0])
        self.object_format = lines[1].strip() or "sha1"
        self.resolved: str | None = lines[2].strip() if len(lines) > 2 else None
        self._resolving = resolve
        self._counted: dict[tuple[str, str], int] = {}  # see changed_lines

    def for_commits(self) -> Repo:
        """This repository as set up with ``identity=True, untracked=True``, its facts kept: what
        a run needs of the repository its plan's loader found (the user's config and identity
        asked: two git processes, where a set-up runs three)."""
        new = copy.copy(self)
        new._env, new._signing = git_setup(self.root)
        new._counted = {}
        return new

    # -- plumbing ------------------------------------------------------------------------

    def git(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        ok: Sequence[int] = (0,),
        umask: int = -1,
    ) -> str:
        """Run git and return stdout stripped of its final newline; GitError on failure."""
        proc = self.run_git(*args, cwd=cwd, input=input, env=env, umask=umask)
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
        umask: int = -1,
    ) -> subprocess.CompletedProcess[str]:
        """Run git; the completed process whatever its exit code (``umask``: the child's)."""
        try:
            return subprocess.run(
                [GIT, *args],
                cwd=cwd or self.root,
                input=input,
                capture_output=True,
                text=True,
                errors="replace",
                env={**self._env, **(env or {})},
                stdin=None if input is not None else subprocess.DEVNULL,
                check=False,
                umask=umask,
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc}") from exc

    def start_git(self, *args: str) -> subprocess.Popen[str]:
        """git left running, its output piped, for the caller to read (``communicate``) once
        its own work is done."""
        try:
            return subprocess.Popen(
                [GIT, *args],
                cwd=self.root,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                errors="replace",
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

    def commit_of(self, ref: str) -> str | None:
        """The commit id ``ref`` names, or None: the set-up's answer if it was asked for ``ref``
        (``run`` starts from the base its checks saw, without asking git again)."""
        return self.resolved if ref == self._resolving else self.try_rev_parse(ref)

    def tree_of(self, commit: str) -> str:
        """The tree id of a commit."""
        from .loose import read_loose

        loose = read_loose(self.common_dir, commit)
        if loose is not None and loose[0] == "commit" and loose[1].startswith(b"tree "):
            return loose[1][5:45].decode()
        return self.git("rev-parse", f"{commit}^{{tree}}")

    def update_ref(self, ref: str, new: str, old: str | None) -> bool:
        """Move ``ref`` to ``new`` only if it still points at ``old`` (None: must not exist)."""
        if old is not None and self._native is not None and ref.startswith("refs/heads/"):
            from .loose import move_loose_ref

            moved = move_loose_ref(self.common_dir, ref, new, old, self._native[1])
            if moved is not None:
                return moved
        from .fingerprint import REFLOG_MESSAGE

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
        from .loose import is_oid

        self.identity()  # in the environment before any commit, however the repo was set up
        if self._native is not None and is_oid(tree) and all(is_oid(p) for p in parents):
            author, committer = self._native
            stamp = f"{int(time.time())} {time.strftime('%z')}"
            lines = [f"tree {tree}", *(f"parent {p}" for p in parents)]
            lines += [f"author {author} {stamp}", f"committer {committer} {stamp}", ""]
            return self._write_object("commit", ("\n".join(lines) + "\n" + message).encode())
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, input=message)

    def identity(self, role: str = "AUTHOR") -> tuple[str, str]:
        """``(name, email)`` of the user's git identity for ``role`` (AUTHOR or COMMITTER), or
        orchardist's fallback: what ``git var GIT_<role>_IDENT`` prints in this repository's
        git environment, which :func:`gitenv.identity_env` filled from that very command (on
        first use, for a repository set up with ``identity=False``: then its commands carry it)."""
        if f"GIT_{role}_NAME" not in self._env:
            self._env.update(identity_env(self.root, user_env()))
        return self._env[f"GIT_{role}_NAME"], self._env[f"GIT_{role}_EMAIL"]

    @functools.cached_property
    def _native(self) -> tuple[str, str] | None:
        """``(author, committer)`` as ``Name <email>`` when commits may be written in-process;
        asked on first use (signing: told at set-up, else a git process)."""
        if self.object_format != "sha1":
            return None
        if self._signing is None:
            self._signing = self.run_git("config", "--bool", "commit.gpgSign").stdout == "true\n"
        if self._signing:
            return None
        author, committer = (self.identity(role) for role in ("AUTHOR", "COMMITTER"))
        return f"{author[0]} <{author[1]}>", f"{committer[0]} <{committer[1]}>"

    def _write_object(self, kind: str, body: bytes) -> str:
        """Store a loose object the way git does, replacing a copy whose bytes are not ours."""
        from .treehash import ObjectWriter

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
            import shutil  # (not for the commands that only read: see git.which)

            shutil.rmtree(path, ignore_errors=True)
        self.run_git("worktree", "prune")

    def worktrees(self) -> list[Path]:
        """Paths of all worktrees git knows, the main one first."""
        with self.worktree_lock():  # a listing races with an add, as a prune does
            out = self.git("worktree", "list", "--porcelain")
        return [Path(line[9:]) for line in out.splitlines() if line.startswith("worktree ")]

    def snapshot(
        self, worktree: Path, base: str, message: str, checkout: Checkout | None = None
    ) -> str:
        """Commit everything in ``worktree`` that differs from ``base`` (ignored files
        excepted); see :func:`snapshots.snapshot`."""
        from . import snapshots

        return snapshots.snapshot(self, worktree, base, message, checkout)

    def check_objects(self, oids: Sequence[str]) -> None:
        """GitError unless git reads back, for each id, bytes that hash to that id.

        A pack can hold other bytes under an id, and git prefers packs to loose objects."""
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
        out = self.git_bytes("cat-file", "--batch", cwd=self.root, env={}, stdin=stdin)
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

    def git_bytes(
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
        """Lines added plus lines removed between two commits (binary files count 1 each).

        Counted already where :meth:`patch_problems` diffed the same two commits by id (the
        answer is the commits', which never change): a git process fewer per attempt."""
        counted = self._counted.pop((old, new), None)
        if counted is not None:
            return counted
        out = self.git("diff", *_PLAIN_DIFF, "--numstat", "--no-renames", old, new)
        return numstat_total(out.splitlines())

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
        from .merges import MergeResult

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
            "diff", *_PLAIN_DIFF, "--raw", "--numstat", "--no-renames", "-z", "--no-abbrev",
            base, patch,
        )  # fmt: skip
        changes, numstat = raw_and_numstat(out)
        from .loose import is_oid

        if is_oid(base) and is_oid(patch):  # for changed_lines, asked next
            self._counted[(base, patch)] = numstat_total(numstat)
        problems = []
        if any("120000" in parts[:2] for parts, _ in changes):
            from .treehash import escaping_symlinks

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
        out = self.git_bytes("cat-file", "--batch-check", cwd=self.root, env={}, stdin=stdin)
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
        """The user's checkout, by part (:func:`fingerprint.checkout_fingerprint`)."""
        from . import fingerprint

        return fingerprint.checkout_fingerprint(self, ignore_refs, watch_reflogs)


def commit_message(title: str, trailers: Mapping[str, str | int]) -> str:
    """A commit message: the title, a blank line, then ``Orchardist-*`` trailers."""
    lines = [title.strip() or "orchardist task", ""]
    lines += [f"{TRAILER_PREFIX}{key}: {value}" for key, value in trailers.items()]
    return "\n".join(lines) + "\n"


# No diff command or text conversion a repository's config names.
_PLAIN_DIFF = ("--no-ext-diff", "--no-textconv")
