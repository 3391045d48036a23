"""The Integrator seam's two implementations: git's branch (moved without any checkout), and a
variable for tests of the loop.

``prepare`` turns a patch commit (made on top of the attempt's base) into a commit whose parent
is the tip it is given. When that tip is the patch's base, the commit's tree *is* the verified
tree. Otherwise the patch is merged three ways and the result must be verified again before
``advance`` moves the branch, with a compare-and-swap, onto it.
"""

from __future__ import annotations

import itertools
import threading

from ..errors import GitError
from ..git.repo import Repo
from ..seams import Prepared

__all__ = ["GitIntegrator", "MemoryIntegrator"]


class GitIntegrator:
    """Moves one git branch forward, one commit per task (the Integrator seam, see seams.py)."""

    def __init__(self, repo: Repo, branch: str) -> None:
        self.repo = repo
        self.ref = f"refs/heads/{branch}"

    def tip(self) -> str:
        """The branch's current commit."""
        return self.repo.rev_parse(self.ref)

    def current(self) -> str | None:
        """The branch's current commit, or None when it was deleted."""
        return self.repo.try_rev_parse(self.ref)

    def recreate(self, tip: str) -> bool:
        """Make the deleted branch again at ``tip``; False if it exists by now."""
        return self.repo.update_ref(self.ref, tip, None)

    def prepare(self, base: str, patch: str, message: str, tip: str | None = None) -> Prepared:
        """A commit of ``patch``'s changes on the tip (``tip`` if the caller knows it).

        A stale ``tip`` is harmless: ``advance`` compares and swaps, and fails if it moved.
        """
        tip = tip or self.tip()
        if tip == base:
            return Prepared(tip, self.repo.commit_tree(self.repo.tree_of(patch), [tip], message))
        merged = self.repo.merge_trees(base, tip, patch)
        if merged.tree is None:
            return Prepared(tip, None, conflicts=merged.conflicts or ("(unknown)",))
        return Prepared(tip, self.repo.commit_tree(merged.tree, [tip], message), needs_verify=True)

    def first_parent_commits(self, since: str, until: str) -> list[str]:
        """Commits in ``since..until`` along first parents, oldest first."""
        return self.repo.first_parents(since, until)

    def changed(self, old: str, new: str) -> frozenset[str]:
        """The paths whose content differs between two commits (renames as two paths)."""
        return frozenset(self.repo.changed_files(old, new))

    def parent(self, commit: str) -> str:
        """The first parent of a commit."""
        return self.repo.rev_parse(f"{commit}^")

    def same_tree(self, one: str, other: str) -> bool:
        """Whether two commits hold the same tree."""
        return one == other or self.repo.tree_of(one) == self.repo.tree_of(other)

    def reset(self, new_tip: str, old_tip: str) -> bool:
        """Move the branch back to ``new_tip`` if it is still at ``old_tip``."""
        return self.repo.update_ref(self.ref, new_tip, old_tip)

    def advance(self, prepared: Prepared) -> bool:
        """Move the branch onto the prepared commit if it is still at the prepared tip."""
        assert prepared.commit is not None
        return self.repo.update_ref(self.ref, prepared.commit, prepared.tip)


class MemoryIntegrator:
    """The Integrator seam without git: the branch is a variable and commits are counters.

    Patches carry no content, so nothing conflicts; the paths a commit changes are what
    ``touched`` says (a prepared commit changes its patch's); its tree is the set of patches
    prepared on the way to it (the same patches in another order: the same tree). Everything
    else behaves as :class:`GitIntegrator` does (a moved tip needs verifying again, ``advance``
    and ``reset`` compare and swap, first parents are remembered).
    """

    def __init__(self, tip: str) -> None:
        self._tip: str | None = tip  # None: the branch was deleted
        self._lock = threading.Lock()
        self._made = itertools.count(1)
        self._parents: dict[str, str] = {}
        self.messages: dict[str, str] = {}  # commit -> its message
        self.touched: dict[str, frozenset[str]] = {}  # commit -> the paths it changes
        self._holds: dict[str, frozenset[str]] = {}  # prepared commit -> the patches it holds

    def tip(self) -> str:
        """The branch's current commit."""
        tip = self.current()
        if tip is None:
            raise GitError("the branch was deleted")
        return tip

    def current(self) -> str | None:
        """The branch's current commit, or None when it was deleted."""
        with self._lock:
            return self._tip

    def recreate(self, tip: str) -> bool:
        """Make the deleted branch again at ``tip``; False if it exists by now."""
        with self._lock:
            if self._tip is not None:
                return False
            self._tip = tip
            return True

    def delete(self) -> None:
        """Delete the branch, as someone might under a run."""
        with self._lock:
            self._tip = None

    def prepare(self, base: str, patch: str, message: str, tip: str | None = None) -> Prepared:
        """A new commit on the tip; it needs verifying when the tip is not the patch's base."""
        tip = tip or self.tip()
        with self._lock:
            commit = f"{next(self._made):040x}"
            self._parents[commit] = tip
            self.messages[commit] = message
            self.touched[commit] = self.touched.get(patch, frozenset())
            self._holds[commit] = self._holds.get(tip, frozenset({tip})) | {patch}
        return Prepared(tip, commit, needs_verify=tip != base)

    def advance(self, prepared: Prepared) -> bool:
        """Move the branch onto the prepared commit if it is still at the prepared tip."""
        assert prepared.commit is not None
        return self.reset(prepared.commit, prepared.tip)

    def reset(self, new_tip: str, old_tip: str) -> bool:
        """Move the branch to ``new_tip`` if it is still at ``old_tip``."""
        with self._lock:
            if self._tip != old_tip:
                return False
            self._tip = new_tip
            return True

    def parent(self, commit: str) -> str:
        """The first parent of a commit this integrator made."""
        with self._lock:
            try:
                return self._parents[commit]
            except KeyError:
                raise GitError(f"no commit {commit} made by this integrator") from None

    def same_tree(self, one: str, other: str) -> bool:
        """Whether two commits hold the same patches (a prepared commit: those of the commit it
        was prepared on, and its own; any other commit: itself alone)."""
        with self._lock:
            return self._holds.get(one, frozenset({one})) == self._holds.get(
                other, frozenset({other})
            )

    def first_parent_commits(self, since: str, until: str) -> list[str]:
        """Commits in ``since..until`` along first parents, oldest first."""
        found: list[str] = []
        with self._lock:
            commit = until
            while commit != since and commit in self._parents:
                found.append(commit)
                commit = self._parents[commit]
        return found[::-1]

    def changed(self, old: str, new: str) -> frozenset[str]:
        """The paths changed by the commits from ``old`` to ``new`` (a patch: its own)."""
        found: set[str] = set()
        with self._lock:
            commit = new
            while commit != old:
                found |= self.touched.get(commit, frozenset())
                if commit not in self._parents:
                    break
                commit = self._parents[commit]
        return frozenset(found)
