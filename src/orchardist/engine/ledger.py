"""The run's records as the loop changes them: each change is one store transaction, and hooks
hear of its events only after it committed.

:class:`Ledger` keeps the in-memory view of the run's tasks in step with the store;
:class:`Writes` is one transaction of it, with the run's id bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Unpack

from ..executors import Job, Outcome
from ..seams import Store, Transaction
from ..state.eventlog import Event
from ..state.events import Kind, MergeEvent, RegressionEvent
from ..state.records import (
    AttemptChanges,
    AttemptRecord,
    AttemptState,
    RunChanges,
    RunState,
    TaskChanges,
    TaskRecord,
    TaskState,
)
from .hooks import Hooks
from .regression import GuardStep

_OK = {TaskState.DONE, TaskState.SKIPPED}  # a run whose tasks all end so is done


class Ledger:
    """The tasks of one run as the store has them, and the way to change them."""

    def __init__(
        self,
        store: Store,
        hooks: Hooks,
        run_id: str,
        clock: Callable[[], float],
        fail_fast: bool = False,
    ) -> None:
        self.store, self.hooks, self.run_id, self.clock = store, hooks, run_id, clock
        self.tasks: dict[str, TaskRecord] = {}
        self.fail_fast = fail_fast  # stop the run when a task fails for good
        self.failed_fast: str | None = None  # the first task that did

    def load(self) -> None:
        """Read the run's tasks from the store (a fresh run, or one being resumed)."""
        self.tasks.clear()
        self.tasks.update((r.task_id, r) for r in self.store.tasks(self.run_id))

    @contextmanager
    def tx(self) -> Iterator[Writes]:
        """One transaction; its events go to the hooks once it committed."""
        with self.store.transaction() as tx:
            yield Writes(self, tx)
        self.hooks.emit(tx.events)

    def intend(self, commit: str, job: Job) -> None:
        """Before the branch moves onto ``commit``: resume trusts only recorded commits."""
        with self.tx() as tx:
            tx.intend(commit, job.task_id, job.attempt)

    def deleted(self, restored: bool, tip: str) -> None:
        """The run branch was deleted under the run (and made again at ``tip``, if restored)."""
        with self.tx() as tx:
            tx.event(Kind.MERGE, state=MergeEvent.BRANCH_DELETED, restored=restored, tip=tip)

    def guarded(self, step: GuardStep) -> None:
        """Say what an ended regression check or probe found."""
        if (checked := step.checked) is not None:
            state = RegressionEvent.PASSED if checked.passed else RegressionEvent.FAILED
            with self.tx() as tx:
                tx.event(Kind.REGRESSION, state=state, commit=checked.commit, detail=checked.detail)
        if step.not_run is not None or step.off is not None:
            with self.tx() as tx:
                if step.not_run is not None:
                    tx.event(Kind.REGRESSION, state=RegressionEvent.NOT_RUN, detail=step.not_run)
                if step.off is not None:
                    tx.event(Kind.REGRESSION, state=RegressionEvent.OFF, reason=step.off)

    def set_state(
        self,
        tx: Transaction,
        task_id: str,
        state: TaskState,
        reason: str | None = None,
        *,
        failures: int | None = None,
        reruns: int | None = None,
        commit: str | None = None,
        said: Mapping[str, object] | None = None,
    ) -> None:
        """Move a task to ``state``; ``failures``, ``reruns`` and ``commit`` (None: unchanged)
        are stored with it, ``said`` only goes into its event."""
        changes = TaskChanges(state=state)
        if reason is not None:
            changes["reason"] = reason
        if failures is not None:
            changes["failures"] = failures
        if reruns is not None:
            changes["reruns"] = reruns
        if commit is not None:
            changes["commit"] = commit
        tx.set_task(self.run_id, task_id, **changes)
        self.tasks[task_id] = replace(self.tasks[task_id], **changes)
        if state is TaskState.FAILED and self.fail_fast and self.failed_fast is None:
            self.failed_fast = task_id  # the loop stops before it launches anything else
        data: dict[str, object] = {"state": state.value, **(said or {})}
        if reason:
            data["reason"] = reason
        if "commit" in changes:
            data["commit"] = changes["commit"]
        self.event(tx, Kind.TASK, task_id, None, **data)

    def event(
        self, tx: Transaction, kind: Kind, task_id: str | None, attempt: int | None, **data: object
    ) -> None:
        """Append an event; None values are left out, enums stored as their values."""
        clean = {k: getattr(v, "value", v) for k, v in data.items() if v is not None}
        tx.emit(Event(self.run_id, kind, self.clock(), task_id, attempt, clean))


class Writes:
    """One transaction of a run's changes."""

    def __init__(self, ledger: Ledger, tx: Transaction) -> None:
        self.ledger, self.tx, self.run_id = ledger, tx, ledger.run_id

    def state(
        self,
        task_id: str,
        state: TaskState,
        reason: str | None = None,
        *,
        failures: int | None = None,
        reruns: int | None = None,
        commit: str | None = None,
        said: Mapping[str, object] | None = None,
    ) -> None:
        """Move a task to ``state`` (see :meth:`Ledger.set_state`)."""
        self.ledger.set_state(
            self.tx,
            task_id,
            state,
            reason,
            failures=failures,
            reruns=reruns,
            commit=commit,
            said=said,
        )

    def event(
        self, kind: Kind, task_id: str | None = None, attempt: int | None = None, **data: object
    ) -> None:
        """Append an event to the run's log."""
        self.ledger.event(self.tx, kind, task_id, attempt, **data)

    def attempt(self, task_id: str, n: int, **changes: Unpack[AttemptChanges]) -> None:
        """Change an attempt's columns."""
        self.tx.set_attempt(self.run_id, task_id, n, **changes)

    def add_attempt(self, record: AttemptRecord) -> None:
        """Record an attempt as it starts."""
        self.tx.add_attempt(record)

    def run(self, **changes: Unpack[RunChanges]) -> None:
        """Change the run's columns."""
        self.tx.set_run(self.run_id, **changes)

    def intend(self, commit: str, task_id: str, attempt: int) -> None:
        """Say, before the branch moves, that ``commit`` is orchardist's."""
        self.tx.intend_commit(self.run_id, commit, task_id, attempt)

    def settle(
        self, stopped: tuple[RunState, str] | None, soft_stop: str | None, held: Collection[str]
    ) -> tuple[RunState, str]:
        """How the run ends, and why; a run that cannot be resumed settles its open tasks."""
        tasks = self.ledger.tasks
        open_tasks = [t for t, r in tasks.items() if not r.state.terminal]
        if stopped is not None:
            state, reason = stopped
            if state in (RunState.CANCELLED, RunState.FAILED):  # not resumable: settle all
                for task_id in open_tasks:
                    self.state(task_id, TaskState.CANCELLED, reason=reason)
            return state, reason
        if soft_stop is not None or held:
            return (
                RunState.STOPPED,
                soft_stop or f"cost budget spent for: {', '.join(sorted(held))}",
            )
        awaiting = [t for t in open_tasks if tasks[t].state is TaskState.AWAITING_REVIEW]
        if awaiting:  # only reviews (and what waits for them) are left: resumed once decided
            return RunState.AWAITING_REVIEW, f"awaiting review: {', '.join(awaiting)}"
        for task_id in open_tasks:  # unreachable unless the graph logic is wrong
            self.state(task_id, TaskState.BLOCKED, reason="never became ready")
        if all(r.state in _OK for r in tasks.values()):
            return RunState.DONE, ""
        counts = Counter(r.state.value for r in tasks.values())
        return RunState.FAILED, ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    def uncommit(self, task_id: str) -> None:
        """A merged task was taken off the branch."""
        self.tx.set_task(self.run_id, task_id, commit=None)
        self.ledger.tasks[task_id] = replace(self.ledger.tasks[task_id], commit=None)

    def ended(self, outcome: Outcome, state: AttemptState) -> None:
        """Record how an attempt ended, and say so in the log."""
        job = outcome.job
        duration = round(outcome.ended_at - outcome.started_at, 3)
        self.attempt(
            job.task_id,
            job.attempt,
            state=state,
            ended_at=outcome.ended_at,
            exit_code=outcome.exit_code,
            failure=outcome.failure,
            detail=outcome.detail,
            patch_commit=outcome.patch_commit,
            changed_lines=outcome.changed_lines,
            log_path=outcome.log_path,
            usage=outcome.usage,
            verdict=outcome.verdict,
            handoff=outcome.handoff,
        )
        self.event(
            Kind.ATTEMPT,
            job.task_id,
            job.attempt,
            state=state.value,
            candidate=job.candidate,
            failure=outcome.failure,
            detail=outcome.detail,
            duration_s=duration,
            changed_lines=outcome.changed_lines,
            verdict=outcome.verdict or None,
            flag=outcome.flag or None,
            cost_usd=outcome.usage.cost_usd,
            session=outcome.session or None,
        )
