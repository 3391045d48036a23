"""Putting a verified patch onto the run branch, without any checkout.

``prepare`` turns a patch commit (made on top of the attempt's base) into a commit whose parent
is the branch's current tip. When the tip has not moved, that commit's tree *is* the verified
tree. When it moved, the patch is merged three ways and the result must be verified again before
``advance`` moves the branch, with a compare-and-swap, onto it.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..confine.procs import new_marker
from ..errors import GitError
from ..executors import AttemptJob, Job, Outcome, VerifyJob
from ..git.repo import Repo
from ..seams import Integrator, Prepared
from ..state.records import AttemptState

__all__ = ["GitIntegrator", "MemoryIntegrator", "MergeStep", "MergeTrain", "Prepared"]


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

    def parent(self, commit: str) -> str:
        """The first parent of a commit."""
        return self.repo.rev_parse(f"{commit}^")

    def reset(self, new_tip: str, old_tip: str) -> bool:
        """Move the branch back to ``new_tip`` if it is still at ``old_tip``."""
        return self.repo.update_ref(self.ref, new_tip, old_tip)

    def advance(self, prepared: Prepared) -> bool:
        """Move the branch onto the prepared commit if it is still at the prepared tip."""
        assert prepared.commit is not None
        return self.repo.update_ref(self.ref, prepared.commit, prepared.tip)


class MemoryIntegrator:
    """The Integrator seam without git: the branch is a variable and commits are counters.

    Patches carry no content, so nothing conflicts; everything else behaves as
    :class:`GitIntegrator` does (a moved tip needs verifying again, ``advance`` and ``reset``
    compare and swap, first parents are remembered).
    """

    def __init__(self, tip: str) -> None:
        self._tip: str | None = tip  # None: the branch was deleted
        self._lock = threading.Lock()
        self._made = itertools.count(1)
        self._parents: dict[str, str] = {}
        self.messages: dict[str, str] = {}  # commit -> its message

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

    def first_parent_commits(self, since: str, until: str) -> list[str]:
        """Commits in ``since..until`` along first parents, oldest first."""
        found: list[str] = []
        with self._lock:
            commit = until
            while commit != since and commit in self._parents:
                found.append(commit)
                commit = self._parents[commit]
        return found[::-1]


# -- the merge train -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Merged:
    """The winner landed: ``commit`` is the new tip (None: a task that lands nothing)."""

    outcome: Outcome
    commit: str | None


@dataclass(frozen=True)
class Conflict:
    """The patch does not apply on the tip any more."""

    outcome: Outcome
    paths: tuple[str, ...]


@dataclass(frozen=True)
class NeedsVerify:
    """The tip moved since the attempt's base: the merged tree runs ``job`` before it lands."""

    outcome: Outcome
    job: VerifyJob
    tip: str  # the tip it was merged onto


@dataclass(frozen=True)
class VerifyFailed:
    """The merged tree failed its verification."""

    outcome: Outcome
    result: Outcome


@dataclass(frozen=True)
class BranchMoved:
    """Someone else moved the run branch; it was put back (if ``restored``), the patch re-queued."""

    outcome: Outcome
    found: str
    restored: bool


@dataclass(frozen=True)
class MoveFailed:
    """git could not move the branch although nobody else did (a stale lock, a full disk)."""

    outcome: Outcome


@dataclass(frozen=True)
class Requeued:
    """The branch was deleted under the run: it was made again and the patch re-queued."""

    outcome: Outcome


MergeStep = Merged | Conflict | NeedsVerify | VerifyFailed | BranchMoved | MoveFailed | Requeued


@dataclass(frozen=True)
class _InFlight:
    """A merged tree being verified before it may become the branch tip."""

    outcome: Outcome  # the attempt whose patch it carries
    prepared: Prepared
    job: VerifyJob


class MergeTrain:
    """Winners wait in a queue and land one at a time, in the order they won, on the tip.

    The train owns the queue, the patches parked for a later replay, the merge being verified
    and the tip orchardist last put the branch at; it tells the loop what happened to each
    patch as a :data:`MergeStep`.
    """

    def __init__(
        self,
        integrator: Integrator,
        branch: str,
        intend: Callable[[str, Job], None],
        deleted: Callable[[bool, str], None],
    ) -> None:
        self.integrator, self.branch = integrator, branch
        self._intend = intend  # records a commit as orchardist's before the branch moves to it
        self._deleted = deleted  # hears that the branch was deleted (made again?, at which tip)
        self.queue: deque[Outcome] = deque()
        self.parked: dict[str, Outcome] = {}  # landed or verified patches a rewind may replay
        self.merging: _InFlight | None = None
        self.tip = ""

    @property
    def busy(self) -> bool:
        """Whether a patch waits or is being verified."""
        return bool(self.queue) or self.merging is not None

    def enqueue(self, outcome: Outcome) -> None:
        """A winner waits for its turn."""
        self.queue.append(outcome)

    def unpark(self, task_id: str) -> bool:
        """Queue the task's parked patch again (to re-verify it on the new tip), if it has one."""
        if task_id not in self.parked:
            return False
        self.queue.append(self.parked.pop(task_id))
        return True

    def drop(self, task_id: str) -> None:
        """The task's queued patches will not land."""
        for outcome in [o for o in self.queue if o.job.task_id == task_id]:
            self.queue.remove(outcome)

    def next(self, lands: Callable[[str], bool]) -> MergeStep | None:
        """Take the next winner towards the branch; None while a merge is verified or none
        waits."""
        if not self.queue or self.merging is not None:
            return None
        outcome = self.queue.popleft()
        job = outcome.job
        assert isinstance(job, AttemptJob)  # winners are attempts, never verify-only jobs
        if outcome.patch_commit is None or not lands(job.task_id):
            # A task that changes nothing (a scanner), or a stage that hands over instead.
            return self.landed(outcome, None)
        prepared = self.integrator.prepare(
            job.base_commit, outcome.patch_commit, job.message, self.tip
        )
        if prepared.commit is None:
            return Conflict(outcome, prepared.conflicts)
        if prepared.needs_verify and (outcome.verify_commands or job.verify):
            verify = merge_verify_job(outcome, prepared)
            self.merging = _InFlight(outcome, prepared, verify)
            return NeedsVerify(outcome, verify, prepared.tip)
        return self.advance(outcome, prepared)

    def verified(self, result: Outcome) -> MergeStep:
        """The merge being verified ended."""
        merge, self.merging = self.merging, None
        assert merge is not None
        if result.state is AttemptState.PASSED:
            return self.advance(merge.outcome, merge.prepared)
        return VerifyFailed(merge.outcome, result)

    def advance(self, outcome: Outcome, prepared: Prepared) -> MergeStep:
        """Move the branch onto the prepared commit, with compare-and-swap."""
        assert prepared.commit is not None
        self._intend(prepared.commit, outcome.job)  # resume trusts only recorded commits
        if self.integrator.advance(prepared):
            return self.landed(outcome, prepared.commit)
        if self.integrator.current() is None:  # deleted under the run: made again, retried
            self.branch_tip()
            self.queue.appendleft(outcome)
            return Requeued(outcome)
        moved = self.branch_tip()
        if moved == prepared.tip:
            return MoveFailed(outcome)
        # Only orchardist may move the run branch: put it back where we left it (what an agent
        # committed there is not kept) and merge again.
        restored = self.integrator.reset(self.tip, moved)
        self.queue.appendleft(outcome)
        return BranchMoved(outcome, moved, restored)

    def landed(self, outcome: Outcome, commit: str | None) -> Merged:
        """The patch is on the branch (or needed no commit)."""
        if commit is None:
            self.parked.pop(outcome.job.task_id, None)
        else:
            self.tip = commit
            self.parked[outcome.job.task_id] = outcome  # a regression may rewind past it
        return Merged(outcome, commit)

    def branch_tip(self) -> str:
        """The run branch's tip. A branch deleted under the run is made again where orchardist
        last put it (a commit the store recorded): only orchardist moves it."""
        tip = self.integrator.current()
        if tip is not None:
            return tip
        self._deleted(self.integrator.recreate(self.tip), self.tip)
        tip = self.integrator.current()
        if tip is None:
            raise GitError(
                f"the run branch {self.branch} is gone or names no readable commit "
                "(a damaged object store?) and cannot be made again"
            )
        return tip

    def start_on(self, base: str, patch: str, message: str, tip: str) -> str | None:
        """``patch`` (made on ``base``) as a commit on ``tip``, without moving the branch;
        None when it conflicts with what landed since (a pipeline's fix starts there)."""
        return self.integrator.prepare(base, patch, message, tip).commit

    def rewind(self, to: str) -> bool:
        """Move the branch back to ``to`` if it is still where orchardist put it."""
        if not self.integrator.reset(to, self.tip):
            return False
        self.tip = to
        return True


def merge_verify_job(outcome: Outcome, prepared: Prepared) -> VerifyJob:
    """The job that verifies a patch merged onto a tip that moved since its attempt's base."""
    assert prepared.commit is not None
    job = outcome.job
    return VerifyJob(
        purpose="merge",
        id=f"{job.id}.merge",
        run_id=job.run_id,
        task_id=job.task_id,
        attempt=job.attempt,
        candidate=job.candidate,
        base_commit=prepared.commit,
        verify=outcome.verify_commands or job.verify,
        workdir=job.workdir,
        timeout_s=job.timeout_s,
        marker=new_marker(),
        baseline=prepared.tip,
        network=job.network,
    )
