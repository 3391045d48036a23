"""A task's way through a run once the loop decided something about it: a new round, a counted
failure (a retry after a back-off, an escalation, or failing for good and blocking what depends
on it), a bounded re-run, and the release of dependents when it lands.

:class:`Lifecycle` owns how many dependencies each task still waits for; every change goes
through the transaction the loop holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from ..executors import AttemptJob, Outcome
from ..pipelines.expand import Pipelines
from ..plan.graph import Graph
from ..specs import TaskSpec
from ..state.agentrecords import Failure
from ..state.events import Kind, MergeEvent, ReviewEvent, RoundEvent
from ..state.records import AttemptRecord, AttemptState, StoredDecision, TaskState, Verdict
from .jobs import Briefs
from .ledger import Ledger, Writes
from .merge import (
    Bisected,
    BranchMoved,
    Conflict,
    Merged,
    MergeStep,
    MergeTrain,
    MoveFailed,
    NeedsVerify,
    VerifyFailed,
)
from .policy import COUNTED, Backoff
from .regression import Rewind
from .review import Gate
from .rounds import Decision, Rounds

_IN_FLIGHT = {
    TaskState.READY,
    TaskState.RUNNING,
    TaskState.VERIFYING,
    TaskState.AWAITING_REVIEW,
    TaskState.MERGING,
}
MAX_RERUNS = 3  # re-runs per task not counted against ``retries`` (see ``rerun``)


class Lifecycle:
    """Task state transitions, and the dependency counts that release tasks."""

    def __init__(
        self,
        *,
        specs: Mapping[str, TaskSpec],
        graph: Graph,
        ledger: Ledger,
        rounds: Rounds,
        train: MergeTrain,
        briefs: Briefs,
        pipelines: Pipelines,
        gate: Gate,
        backoff: Backoff,
        rng: random.Random,
        retry_in: Callable[[float, str], None],
        cancel: Callable[[str, str], None],
    ) -> None:
        self.specs, self.graph, self.tasks = specs, graph, ledger.tasks
        self.rounds, self.train, self.briefs, self.pipelines = rounds, train, briefs, pipelines
        self.gate = gate  # which winners wait for a person, and what change requests ask
        self.backoff, self.rng = backoff, rng
        self.retry_in = retry_in  # wakes the loop after a delay to start the task's next round
        self.cancel = cancel  # stops a task's running attempts, saying why
        self.waiting: dict[str, int] = {}  # task -> dependencies not done yet

    def new_round(self, tx: Writes, task_id: str) -> None:
        """Queue a fresh round of candidates (or a parked patch) for a task."""
        if self.train.unpark(task_id):
            tx.state(task_id, TaskState.MERGING, reason="re-verifying its patch")
            return
        self.rounds.start(task_id, 1 if task_id in self.gate.requests else None)
        if self.tasks[task_id].state is not TaskState.READY:
            tx.state(task_id, TaskState.READY)

    def retry_due(self, tx: Writes, task_id: str) -> None:
        """A task's back-off ended: its next round starts if it still waits for one. A rewind
        (it waits for a dependency again) or a dependency failing for good (blocked) may have
        moved it meanwhile; such a task is not started."""
        if self.tasks[task_id].state is TaskState.READY:
            self.new_round(tx, task_id)

    def decided(self, tx: Writes, decision: Decision) -> None:
        """Record why each candidate won or lost; queue the winner, or count the failure."""
        task_id, winner = decision.task_id, decision.winner
        for outcome, selection in decision.selections:
            tx.attempt(task_id, outcome.job.attempt, selection=selection, won=outcome is winner)
        self.cancel(task_id, "another candidate was chosen")
        if winner is None:
            why, output = decision.detail, decision.feedback
            self.failed(tx, task_id, decision.failure, why, output, decision.final)
            return
        won = {"candidate": winner.job.candidate, "reason": decision.why}
        tx.event(Kind.ROUND, task_id, winner.job.attempt, state=RoundEvent.WON, **won)
        self.briefs.summaries[task_id] = winner.summary
        if self.gate.wants(task_id) and winner.patch_commit:  # (no patch: nothing to read)
            self._await_review(tx, winner)
            return
        tx.state(task_id, TaskState.MERGING)
        self.train.enqueue(winner)

    def _await_review(self, tx: Writes, winner: Outcome) -> None:
        """A reviewed task's winner waits for a person's decision instead of the merge train."""
        job = winner.job
        self.gate.hold(job.task_id, winner)
        tx.state(job.task_id, TaskState.AWAITING_REVIEW)
        agent = job.profile.name if isinstance(job, AttemptJob) and job.profile else ""
        title = job.title if isinstance(job, AttemptJob) else job.task_id
        commands = list(winner.verify_commands or getattr(job, "verify", ()))
        asked = {"agent": agent, "title": title, "verdict": winner.verdict, "commands": commands}
        tx.event(Kind.REVIEW, job.task_id, job.attempt, state=ReviewEvent.REQUESTED, **asked)

    def reviewed(self, tx: Writes, stored: StoredDecision, now: float) -> None:
        """Act on a person's decision, once: it is marked applied in this transaction."""
        task_id, n, decision = stored.task_id, stored.attempt, stored.decision
        if not tx.tx.apply_decision(tx.run_id, task_id, n, now):
            return  # acted on already
        who, verdict = decision.who, decision.verdict
        tx.event(Kind.REVIEW, task_id, n, state=ReviewEvent.APPLIED, verdict=verdict, who=who)
        winner = self.gate.awaiting[task_id]
        if verdict is Verdict.APPROVE:
            self.gate.settle(task_id)
            note = f": {decision.text}" if decision.text else ""
            tx.state(task_id, TaskState.MERGING, reason=f"approved by {who}{note}")
            self.train.enqueue(winner)
            return
        if verdict is Verdict.CHANGES:
            (reviewed,) = [a for a in tx.ledger.store.attempts(tx.run_id, task_id) if a.n == n]
            self.gate.requested(stored, winner.patch_commit, reviewed.agent)
            tx.attempt(task_id, n, won=False, selection=f"changes requested by {who}")
            tx.state(task_id, TaskState.READY, reason=f"changes requested by {who}")
            self.new_round(tx, task_id)
            return
        self.gate.settle(task_id)
        why = f"rejected by {who}" + (f": {decision.text}" if decision.text else "")
        tx.attempt(task_id, n, won=False, selection=f"rejected by {who}")
        tx.state(task_id, TaskState.FAILED, reason=why)
        self.block_dependents(tx, task_id)

    def landed(self, tx: Writes, merged: Merged) -> None:
        """A winner is on the run branch (or needed no commit): the task is done."""
        task_id, attempt, commit = (
            merged.outcome.job.task_id,
            merged.outcome.job.attempt,
            merged.commit,
        )
        tx.attempt(task_id, attempt, state=AttemptState.MERGED)
        tx.event(Kind.MERGE, task_id, attempt, state=MergeEvent.MERGED, commit=commit)
        tx.state(task_id, TaskState.DONE, commit=commit, reason="")
        owner = self.pipelines.landed(tx.tx, task_id, commit, tx.ledger.set_state)
        self.release(tx, task_id)
        if owner:  # a fix pipeline's shot landed: the task is done with its commit
            self.release(tx, owner)

    def merge_step(self, tx: Writes, step: MergeStep, stopping: bool) -> None:
        """Record what happened to a winner on its way to the branch; re-run it if it cannot
        land as it is (when ``stopping``, a failed merge stays merging: a resume retries it)."""
        job = step.outcome.job
        task_id, n = job.task_id, job.attempt
        if isinstance(step, Conflict):
            tx.event(Kind.MERGE, task_id, n, state=MergeEvent.CONFLICT, paths=list(step.paths))
            where = "conflict in " + ", ".join(step.paths)
            failed, conflict = AttemptState.FAILED, Failure.CONFLICT
            tx.attempt(task_id, n, state=failed, failure=conflict, detail=where)
            self.rerun(tx, task_id, where)
        elif isinstance(step, NeedsVerify):
            batch = step.batch or (step.outcome,)
            for outcome in batch:  # the job's log holds the verification of them all
                verifying = {"tip": step.tip[:12], "batch": len(batch), "job": step.job.id}
                tx.event(
                    Kind.MERGE,
                    outcome.job.task_id,
                    outcome.job.attempt,
                    state=MergeEvent.VERIFYING,
                    **verifying,
                )
        elif isinstance(step, Bisected):
            bisecting = {"detail": step.result.detail, "sizes": list(step.sizes)}
            tx.event(Kind.MERGE, task_id, n, state=MergeEvent.BISECTING, **bisecting)
        elif isinstance(step, VerifyFailed):
            result = step.result
            tx.event(Kind.MERGE, task_id, n, state=result.state.value, detail=result.detail)
            if not stopping:
                why = f"after merging with the moved run branch: {result.detail}"
                self.briefs.failed(task_id, why, result.feedback)
                self.rerun(tx, task_id, f"merged tree failed verify: {result.detail}")
        elif isinstance(step, MoveFailed):
            why = "could not move the run branch"
            tx.event(Kind.MERGE, task_id, n, state=MergeEvent.FAILED, reason=why)
            self.rerun(tx, task_id, why)
        elif isinstance(step, BranchMoved):
            moved = {"found": step.found, "restored": step.restored}
            tx.event(Kind.MERGE, task_id, n, state=MergeEvent.BRANCH_MOVED, **moved)
        elif isinstance(step, Merged):
            self.landed(tx, step)

    def failed(
        self,
        tx: Writes,
        task_id: str,
        failure: Failure | None,
        detail: str,
        feedback: str,
        final: bool,
    ) -> None:
        """A round ended without a winner: retry after a back-off, escalate, or fail (at once
        when ``final``: no new round can change it)."""
        counted = failure in COUNTED or failure is None or failure is Failure.INFRA_ERROR
        failures = self.tasks[task_id].failures + (1 if counted else 0)
        self.briefs.failed(task_id, detail, feedback)
        if failures <= self.specs[task_id].retries and not final:
            delay = self.backoff.delay(failures, self.rng)
            said = {"retry": failures, "retry_in_s": round(delay, 2)}
            tx.state(task_id, TaskState.READY, reason=detail, failures=failures, said=said)
            self.retry_in(delay, task_id)
            return
        reason = f"{failure.value if failure else 'failed'}: {detail}"
        if self.pipelines.escalates(task_id, failure):
            self._escalate(tx, task_id, reason, feedback, failures)
            return
        tx.state(task_id, TaskState.FAILED, reason=reason, failures=failures)
        self.block_dependents(tx, task_id)

    def _escalate(self, tx: Writes, task_id: str, reason: str, output: str, failures: int) -> None:
        """A fix pipeline's failed shot hands the bug to the debug stages."""
        owner, data = self.pipelines.escalation(task_id, reason, output)
        why = f"escalated to the debug pipeline: {reason}"
        tx.state(task_id, TaskState.SKIPPED, reason=why, failures=failures)
        tx.event(Kind.ESCALATION, owner, None, **data)
        self.release(tx, task_id)

    def block_dependents(self, tx: Writes, task_id: str) -> None:
        """Everything that depends on a task that failed for good is blocked."""
        for child in self.graph.descendants(task_id):
            if not self.tasks[child].state.terminal:
                self.rounds.unready(child)
                self.train.parked.pop(child, None)
                tx.state(child, TaskState.BLOCKED, reason=f"dependency {task_id} failed")

    def rerun(self, tx: Writes, task_id: str, reason: str) -> None:
        """Run again from the new tip: not the agent's failure, but bounded."""
        reruns = self.tasks[task_id].reruns + 1
        if reruns > MAX_RERUNS:
            why = f"{reason} (gave up after {MAX_RERUNS} re-runs)"
            tx.state(task_id, TaskState.FAILED, reruns=reruns, reason=why)
            self.block_dependents(tx, task_id)
            return
        tx.state(task_id, TaskState.READY, reason=reason, reruns=reruns, said={"rerun": reruns})
        self.new_round(tx, task_id)

    def merge_awaited(self) -> bool:
        """Whether a task waits for a winner in the merge queue to land (its dependent)."""
        queued = (o.job.task_id for o in self.train.queue)
        return any(not self.tasks[c].state.terminal for t in queued for c in self.graph.children[t])

    def release(self, tx: Writes, task_id: str) -> None:
        """A task is done: dependents waiting for nothing else start their first round."""
        for child in self.graph.children[task_id]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0 and self.tasks[child].state is TaskState.PENDING:
                self.new_round(tx, child)

    def count_waiting(self, done: Callable[[str], bool]) -> None:
        """Count again what each task waits for (after a restart or a rewind)."""
        for task_id in self.graph.ids:
            self.waiting[task_id] = sum(not done(d) for d in self.graph.deps[task_id])

    def restore(self, tx: Writes, winners: Mapping[str, AttemptRecord]) -> None:
        """A run starting or resuming: what waits stays pending, a winner not merged yet queues
        again (from its saved patch), the rest starts a round; tasks that ended stay so."""
        for task_id in self.graph.order:
            record = self.tasks[task_id]
            if record.state.terminal and record.state is not TaskState.CANCELLED:
                continue
            if self.waiting[task_id] != 0:
                if record.state is not TaskState.PENDING:
                    tx.state(task_id, TaskState.PENDING)
            elif record.state is TaskState.MERGING and task_id in winners:
                self.train.enqueue(self.briefs.rebuilt(winners[task_id]))
            elif record.state is TaskState.AWAITING_REVIEW and task_id in winners:
                self.gate.hold(task_id, self.briefs.rebuilt(winners[task_id]))
            else:
                self.new_round(tx, task_id)

    def replay(self, tx: Writes, plan: Rewind) -> None:
        """After a rewind: the culprit runs again, its dependents wait for it (what of theirs
        runs is cancelled), the other merges queue again."""
        for commit, task_id in plan.replay:
            tx.uncommit(task_id)
            if task_id == plan.task_id:
                self._culprit(tx, task_id, commit, plan.culprit.output)
            elif task_id in plan.affected:
                tx.state(task_id, TaskState.PENDING, reason="waits for a re-run")
            else:
                tx.state(task_id, TaskState.MERGING, reason="replayed after rewind")
                self.train.enqueue(self.train.parked.pop(task_id))
        for task_id in plan.affected:
            if self.tasks[task_id].state in _IN_FLIGHT:  # it waits for the dependency again
                self.rounds.drop(task_id)
                self.cancel(task_id, "a dependency was taken off the run branch")
                self.train.drop(task_id)
                self.gate.awaiting.pop(task_id, None)  # its patch was made on what went
                tx.state(task_id, TaskState.PENDING, reason="waits for a re-run dependency")
        self.count_waiting(lambda d: self.tasks[d].state is TaskState.DONE)

    def _culprit(self, tx: Writes, task_id: str, commit: str, output: str) -> None:
        why = "the regression check failed after this task was merged"
        self.briefs.failed(task_id, why, output)
        undone = self.train.parked.pop(task_id, None)
        if undone is not None:
            selection = "taken off the run branch: regression culprit"
            tx.attempt(
                task_id,
                undone.job.attempt,
                state=AttemptState.FAILED,
                failure=Failure.VERIFY_FAILED,
                selection=selection,
                won=False,
            )
        self.rerun(tx, task_id, f"regression culprit (commit {commit[:12]})")
