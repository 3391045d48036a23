"""The merge train: verified winners onto the run branch, in the order they won, without any
checkout (the branch moves through an :class:`~orchardist.seams.Integrator`, see
``integrators.py``). How batches are formed, stacked and bisected: docs/architecture.md, "The
merge queue".
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, replace

from ..confine.procs import new_marker
from ..errors import GitError
from ..executors import AttemptJob, Job, Outcome, VerifyJob
from ..seams import Integrator, Prepared
from ..specs import Reverify
from ..state.records import AttemptState
from .heads import Heads

__all__ = ["MergeStep", "MergeTrain"]


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
    """The tip moved since the attempts' bases: the merged tree runs ``job`` before it lands."""

    outcome: Outcome  # the batch's last entry: the job verifies its tree
    job: VerifyJob
    tip: str  # the commit it was stacked on
    batch: tuple[Outcome, ...] = ()  # every entry the job verifies, in order


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


@dataclass(frozen=True)
class Bisected:
    """A batch's merged tree failed: its entries are verified again in smaller batches (none is
    to blame yet). ``outcome`` is the batch's last entry; ``sizes`` the new batches' sizes."""

    outcome: Outcome
    result: Outcome
    sizes: tuple[int, ...]


MergeStep = (
    Merged | Conflict | NeedsVerify | VerifyFailed | BranchMoved | MoveFailed | Requeued | Bisected
)


@dataclass(frozen=True)
class _Entry:
    """A winner prepared on the entry ahead of it in the queue (or on the tip)."""

    outcome: Outcome
    prepared: Prepared


@dataclass(frozen=True)
class _Batch:
    """Entries verified together: ``job`` runs on the last one's tree, which holds all of
    theirs and everything ahead; None when nothing needs verifying (the tree was verified as it
    is, or the user let disjoint patches skip it)."""

    entries: tuple[_Entry, ...]
    job: VerifyJob | None
    result: Outcome | None = None  # the job's outcome, once it ended

    @property
    def top(self) -> str:
        """The commit the next batch is stacked on."""
        commit = self.entries[-1].prepared.commit
        assert commit is not None  # only prepared commits are stacked
        return commit

    @property
    def waiting(self) -> bool:
        """Whether its verification is still out."""
        return self.job is not None and self.result is None


class MergeTrain:
    """Winners wait in a queue, in the order they won, and land on the tip in that order.

    A merge queue after Zuul and bors (see docs/architecture.md, "The merge queue"): waiting
    winners are taken in batches, each verified once on the tree of the tip plus every batch
    ahead of it, so batches are verified side by side in the slots the loop gives (``room``).
    A batch lands when it is at the head and passed; one that fails is split into ``ways``
    smaller ones until the failing entry stands alone, and everything stacked behind it is
    verified again without it. The branch moves one entry at a time, with compare-and-swap.

    The train owns the queue, the stack of batches, the patches parked for a later replay and
    the tip orchardist last put the branch at; it tells the loop what happened to each patch as
    a :data:`MergeStep`.
    """

    def __init__(
        self,
        integrator: Integrator,
        branch: str,
        intend: Callable[[str, Job], None],
        deleted: Callable[[bool, str], None],
        *,
        cancel: Callable[[str], None] = lambda job_id: None,
        reverify: Reverify = Reverify.ALWAYS,
        ways: int = 2,
        stacks: Container[str] = (),
    ) -> None:
        self.integrator, self.branch = integrator, branch
        self._intend = intend  # records a commit as orchardist's before the branch moves to it
        self._deleted = deleted  # hears that the branch was deleted (made again?, at which tip)
        self._cancel = cancel  # stops a verification whose tree will not land
        self.reverify, self.ways = reverify, max(2, ways)
        self.queue: deque[Outcome] = deque()  # winners not in a batch yet
        self.stack: list[_Batch] = []  # batches being verified or waiting to land, in order
        self.parked: dict[str, Outcome] = {}  # landed or verified patches a rewind may replay
        self.tip = ""
        # where attempts are verified (those of the tasks in ``stacks``): the tip and what is
        # ahead; not with reverify = "overlap", which lands their own trees unverified
        self.heads = Heads(integrator, stacks if reverify is Reverify.ALWAYS else ())
        self._sizes: deque[int] = deque()  # the next batches' sizes while bisecting
        self._cancelled: set[str] = set()  # verifications cancelled, holding a slot until they end
        self._jobs = itertools.count(1)

    @property
    def busy(self) -> bool:
        """Whether a patch waits or is being verified."""
        return bool(self.queue) or bool(self.stack)

    @property
    def verifying(self) -> int:
        """How many of the train's verifications run (each holds a slot)."""
        return sum(b.waiting for b in self.stack) + len(self._cancelled)

    def jobs(self) -> list[VerifyJob]:
        """The verifications out."""
        return [b.job for b in self.stack if b.job is not None and b.waiting]

    def owns(self, job_id: str) -> bool:
        """Whether ``job_id`` is one of the train's verifications still out (cancelled or not)."""
        return job_id in self._cancelled or any(j.id == job_id for j in self.jobs())

    def enqueue(self, outcome: Outcome) -> None:
        """A winner waits for its turn."""
        self.queue.append(outcome)

    def unless_queued(self, job_id: str) -> None:
        """An attempt ended: unless its patch waits in the queue, nothing stacked on it on the
        head waits for it (see heads.py)."""
        if all(o.job.id != job_id for o in self.queue):
            self.heads.dropped(job_id)

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

    def halt(self) -> list[VerifyJob]:
        """Stop merging (the run stops): forget the queue and the stack; the verifications
        out, to cancel. The tasks stay merging in the store: a resume queues them again."""
        out = self.jobs()
        self._cancelled.update(j.id for j in out)
        self.queue.clear()
        self.stack.clear()
        self._sizes.clear()
        return out

    def next(self, lands: Callable[[str], bool], room: int = 1) -> MergeStep | None:
        """The next thing that happens on the way to the branch: the head batch lands or fails,
        or waiting winners form a batch (its verification may take one of ``room`` slots).
        None while nothing can move."""
        if self.stack and not self.stack[0].waiting:
            return self._settle_head()
        if not self.queue:
            return None
        return self._take(lands, room)

    def verified(self, result: Outcome) -> None:
        """A batch's verification ended (the next call to :meth:`next` acts on it)."""
        self._cancelled.discard(result.job.id)
        for i, batch in enumerate(self.stack):
            if batch.job is not None and batch.job.id == result.job.id:
                self.stack[i] = replace(batch, result=result)

    # -- forming batches -----------------------------------------------------------------

    def _take(self, lands: Callable[[str], bool], room: int) -> MergeStep | None:
        """Stack the first waiting winner (and, in a batch, those behind it); winners that need
        no verification are stacked as they are, one after another."""
        self._order()
        while self.queue and not self.heads.waits(self.queue[0].job.id):
            outcome = self.queue[0]
            job = outcome.job
            assert isinstance(job, AttemptJob)  # winners are attempts, never verify-only jobs
            if outcome.patch_commit is None or not lands(job.task_id):
                # A task that changes nothing (a scanner), or a stage that hands over instead.
                self.queue.popleft()
                return self.landed(outcome, None)
            on = self.stack[-1].top if self.stack else self.tip
            checked = bool(outcome.verify_commands or job.verify)
            moved = on != job.base_commit
            stacked = outcome.verified_on or outcome.failed_on  # known without a slot
            if checked and moved and room < 1 and self.reverify is Reverify.ALWAYS and not stacked:
                return None  # it needs a slot to verify in: wait for one
            patch, message = outcome.patch_commit, job.message
            prepared = self.integrator.prepare(job.base_commit, patch, message, on)
            if prepared.commit is None:
                if self.stack:  # it may conflict only with a batch ahead that will not land
                    return None
                self.queue.popleft()
                return Conflict(outcome, prepared.conflicts)
            if checked and not self.stack and self._failed_here(outcome, prepared.commit):
                self.queue.popleft()
                return VerifyFailed(outcome, _failed_result(outcome))
            if checked and self._needs_verify(outcome, prepared):
                if room < 1:
                    return None
                self.queue.popleft()
                return self._batch(_Entry(outcome, prepared), lands, on)
            self.queue.popleft()
            if not self.stack:
                return self.advance(outcome, prepared)
            self.stack.append(_Batch((_Entry(outcome, prepared),), None))
        return None

    def _order(self) -> None:
        """Winners verified on the head wait behind the patches under them (which are still
        verifying, or in the queue behind them: they won first): the others go first."""
        waiting = [o for o in self.queue if self.heads.waits(o.job.id)]
        if waiting:
            ready = [o for o in self.queue if not self.heads.waits(o.job.id)]
            self.queue = deque(ready + waiting)

    def _failed_here(self, outcome: Outcome, commit: str) -> bool:
        """Whether its attempt saw the patch fail on the branch as it is (``commit``: the patch
        on the tip) or as it was (stacked on a tree the branch held): not verified again to
        fail again, it is re-run from the tip (see heads.py)."""
        failed = outcome.failed_on
        if failed is None:
            return False
        return self.integrator.same_tree(commit, failed) or self.heads.held(
            self.integrator.parent(failed)
        )

    def _needs_verify(self, outcome: Outcome, prepared: Prepared) -> bool:
        """Whether the merged tree must be verified: it is neither the patch's own verified
        tree nor the stacked tree its attempt verified (see heads.py), and (with ``reverify =
        "overlap"``) the patch and what landed since its base share a file."""
        assert prepared.commit is not None and outcome.patch_commit is not None
        verified, job = outcome.verified_on, outcome.job
        assert isinstance(job, AttemptJob)
        if verified == "" and self.heads.may_stack(job):
            return True  # rebuilt: it may have been verified on a head, not on its own tree
        if verified:  # not its own tree: only that tree was verified
            return not self.integrator.same_tree(prepared.commit, verified)
        if not prepared.needs_verify:
            return False
        if self.reverify is Reverify.ALWAYS:
            return True
        base = outcome.job.base_commit
        moved = self.integrator.changed(base, prepared.tip)
        return not moved.isdisjoint(self.integrator.changed(base, outcome.patch_commit))

    def _batch(self, first: _Entry, lands: Callable[[str], bool], on: str) -> NeedsVerify:
        """A batch from ``first`` and the winners behind it, verified once on the last one's
        tree. Its size: the next bisection's, or every winner waiting that stacks cleanly."""
        size = self._sizes.popleft() if self._sizes else len(self.queue) + 1
        entries = [first]
        while self.queue and len(entries) < size:
            outcome = self.queue[0]
            job = outcome.job
            if outcome.patch_commit is None or not lands(job.task_id) or self.heads.waits(job.id):
                break
            top = entries[-1].prepared.commit
            assert top is not None and isinstance(job, AttemptJob)
            prepared = self.integrator.prepare(
                job.base_commit, outcome.patch_commit, job.message, top
            )
            if prepared.commit is None:
                break  # it waits: the conflict may be with an entry that will not land
            entries.append(_Entry(self.queue.popleft(), prepared))
        last = entries[-1]
        verify = merge_verify_job(last.outcome, last.prepared, next(self._jobs), baseline=on)
        self.stack.append(_Batch(tuple(entries), verify))
        return NeedsVerify(last.outcome, verify, on, tuple(e.outcome for e in entries))

    # -- landing -------------------------------------------------------------------------

    def _settle_head(self) -> MergeStep:
        """The head batch ended its verification (or needed none): land its first entry, or
        split it, or blame its only entry."""
        head = self.stack[0]
        if head.result is None or head.result.state is AttemptState.PASSED:
            entry, rest = head.entries[0], head.entries[1:]
            if rest:
                self.stack[0] = replace(head, entries=rest)
            else:
                self.stack.pop(0)
            return self.advance(entry.outcome, entry.prepared)
        self.stack.pop(0)
        self._restack()  # everything behind was verified with the failing tree under it
        outcomes = [e.outcome for e in head.entries]
        if len(outcomes) == 1:
            return VerifyFailed(outcomes[0], head.result)
        sizes = _split(len(outcomes), self.ways)
        self._sizes.extendleft(reversed(sizes))
        self.queue.extendleft(reversed(outcomes))
        return Bisected(outcomes[-1], head.result, sizes)

    def _restack(self) -> None:
        """Take every batch off the stack and queue its entries again, in order; their
        verifications out are cancelled (the trees they test will not land)."""
        for job in self.jobs():
            self._cancelled.add(job.id)
            self._cancel(job.id)
        outcomes = [e.outcome for b in self.stack for e in b.entries]
        self.stack.clear()
        self.queue.extendleft(reversed(outcomes))
        self.heads.follow(self.tip)  # what was stacked ahead may not land as it was

    def advance(self, outcome: Outcome, prepared: Prepared) -> MergeStep:
        """Move the branch onto the prepared commit, with compare-and-swap."""
        assert prepared.commit is not None
        self._intend(prepared.commit, outcome.job)  # resume trusts only recorded commits
        if self.integrator.advance(prepared):
            return self.landed(outcome, prepared.commit)
        self._restack()  # whatever happened, the stack was built on a tip that did not move
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
            self.heads.landed(outcome.job.id, commit)
            self.parked[outcome.job.task_id] = outcome  # a regression may rewind past it
        return Merged(outcome, commit)

    def park(self, task_id: str, outcome: Outcome) -> None:
        """Keep a patch merged before a resume, for a rewind to replay."""
        self.parked[task_id] = outcome

    def follow(self, last_known: str | None = None) -> None:
        """Take the branch's tip as the train's (``last_known``: where the store says the
        branch is, to make it again there if it was deleted)."""
        if last_known is not None:
            self.tip = last_known
        self.tip = self.branch_tip()
        self.heads.follow(self.tip)

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
        """Move the branch back to ``to`` if it is still where orchardist put it (the stack,
        built on the old tip, is queued again)."""
        if not self.integrator.reset(to, self.tip):
            return False
        self.tip = to
        self._restack()
        return True


def _failed_result(outcome: Outcome) -> Outcome:
    """What a merged tree's verification said, taken from the attempt that ran it on that very
    tree (``feedback``: its failing output)."""
    assert outcome.failed_on is not None
    detail = f"its attempt's verify failed on it merged onto the branch ({outcome.failed_on[:12]})"
    return replace(outcome, state=AttemptState.FAILED, detail=detail, verdict="failed")


def _split(n: int, ways: int) -> tuple[int, ...]:
    """``n`` entries in ``ways`` batches (at most ``n``) as even as can be, larger first."""
    parts = min(n, ways)
    return tuple(n // parts + (i < n % parts) for i in range(parts))


def merge_verify_job(outcome: Outcome, prepared: Prepared, n: int, baseline: str) -> VerifyJob:
    """The job that verifies a merged tree (the patch of ``outcome`` on top of what is ahead of
    it); failures are judged against ``baseline``, the tree it was stacked on."""
    assert prepared.commit is not None
    job = outcome.job
    return VerifyJob(
        purpose="merge",
        id=f"{job.id}.merge{n}",  # unique: a cancelled one's late outcome is not taken for it
        run_id=job.run_id,
        task_id=job.task_id,
        attempt=job.attempt,
        candidate=job.candidate,
        base_commit=prepared.commit,
        verify=outcome.verify_commands or job.verify,
        workdir=job.workdir,
        timeout_s=job.timeout_s,
        marker=new_marker(),
        baseline=baseline,
        network=job.network,
    )
