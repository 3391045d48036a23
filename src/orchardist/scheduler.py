"""The loop: take ready tasks → start attempts → on a result, verify → merge → release dependents.

One thread owns all scheduling state. Executors report through a queue, so the loop sleeps until
something happens (an attempt ends, enters verification, or a stop is requested): there is no
timer and no polling. Every state change is one store transaction, and hooks hear about it
after it committed.
"""

from __future__ import annotations

import queue
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from .executors import Executor, Job, Outcome, Phase
from .gitrepo import commit_message
from .graph import Graph, ReadySet
from .hooks import Hooks
from .merge import Integrator, Prepared
from .plan import Plan, TaskSpec
from .procs import new_marker
from .records import (
    AttemptRecord,
    AttemptState,
    Event,
    Failure,
    Run,
    RunState,
    TaskRecord,
    TaskState,
)
from .store import Store, Transaction

MAX_RERUNS = 3  # conflict re-runs per task, not counted against ``retries``
FEEDBACK_CHARS = 4000


@dataclass(frozen=True)
class Stop:
    """Ask the loop to stop launching and end what runs (Ctrl-C, SIGTERM)."""

    reason: str


@dataclass(frozen=True)
class _Merge:
    """A merged tree being verified before it may become the branch tip."""

    outcome: Outcome  # the attempt whose patch it carries
    prepared: Prepared
    job: Job


class Scheduler:
    """Drives one run to its end."""

    def __init__(
        self,
        plan: Plan,
        run: Run,
        store: Store,
        executor: Executor,
        integrator: Integrator,
        hooks: Hooks | None = None,
        clock: Callable[[], float] = time.time,
        max_parallel: int | None = None,
    ) -> None:
        self.plan, self.run_id, self.store, self.executor = plan, run.id, store, executor
        self.integrator = integrator
        self.hooks = hooks or Hooks()
        self.clock = clock
        self.max_parallel = max_parallel or plan.run.max_parallel
        self.specs = {t.id: t for t in plan.tasks}
        self.graph = Graph(
            [t.id for t in plan.tasks],
            {t.id: t.depends_on for t in plan.tasks},
            {t.id: t.estimate for t in plan.tasks},
            {t.id: t.priority for t in plan.tasks},
        )
        self.inbox: queue.SimpleQueue[Phase | Outcome | Stop] = queue.SimpleQueue()
        self.tasks: dict[str, TaskRecord] = {}
        self.attempts: Counter[str] = Counter()
        self.waiting: dict[str, int] = {}
        self.ready = ReadySet(self.graph.ranks, lambda t: self.specs[t].agent)
        self.active: dict[str, Job] = {}
        self.pool_load: Counter[str] = Counter()
        self.merge_queue: deque[Outcome] = deque()
        self.merging: _Merge | None = None
        self.feedback: dict[str, str] = {}
        self.stopping: str | None = None
        self.tip = ""

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> RunState:
        """Run until every task is settled or a stop was requested; return the run's state."""
        self._restore()
        while not self._settled():
            self._launch()
            if self._settled():
                break
            self._handle(self.inbox.get())
        return self._finish()

    def stop(self, reason: str = "interrupted") -> None:
        """Request a stop; safe from signal handlers and other threads."""
        self.inbox.put(Stop(reason))

    def _settled(self) -> bool:
        if self.active or self.merging is not None:
            return False
        if self.stopping is not None:
            return True
        return not self.ready and not self.merge_queue

    def _handle(self, message: Phase | Outcome | Stop) -> None:
        if isinstance(message, Stop):
            self._stop(message.reason)
        elif isinstance(message, Phase):
            self._phase(message)
        elif self.merging is not None and message.job.id == self.merging.job.id:
            self._merge_verified(message)
        else:
            self._attempt_ended(message)

    # -- starting attempts ---------------------------------------------------------------

    def _launch(self) -> None:
        while self.stopping is None and len(self.active) < self.max_parallel:
            task_id = self.ready.pop(self._has_room)
            if task_id is None:
                return
            self._start_attempt(self.specs[task_id])

    def _has_room(self, pool: str) -> bool:
        cap = self.plan.agents[pool].max_parallel
        return cap is None or self.pool_load[pool] < cap

    def _start_attempt(self, spec: TaskSpec) -> None:
        self.attempts[spec.id] += 1
        n = self.attempts[spec.id]
        job = Job(
            id=f"{spec.id}.{n}",
            run_id=self.run_id,
            task_id=spec.id,
            attempt=n,
            candidate=0,
            base_commit=self.tip,
            title=spec.title,
            prompt=self._prompt(spec),
            profile=self.plan.agents[spec.agent],
            verify=spec.verify,
            workdir=spec.workdir,
            timeout_s=spec.timeout_s,
            message=self._message(spec, n, spec.agent),
            marker=new_marker(),
        )
        record = AttemptRecord(
            run_id=self.run_id,
            task_id=spec.id,
            n=n,
            candidate=0,
            agent=spec.agent,
            state=AttemptState.RUNNING,
            base_commit=self.tip,
            started_at=self.clock(),
            marker=job.marker,
        )
        with self._tx() as tx:
            tx.add_attempt(record)
            self._event(
                tx, "attempt", spec.id, n, state="running", agent=spec.agent, base=self.tip[:12]
            )
            self._set_state(tx, spec.id, TaskState.RUNNING)
        self.active[job.id] = job
        self.pool_load[spec.agent] += 1
        self.executor.submit(job, self.inbox.put)

    def _prompt(self, spec: TaskSpec) -> str:
        feedback = self.feedback.get(spec.id)
        if not feedback:
            return spec.prompt
        return f"{spec.prompt}\n\n## An earlier attempt failed\n\n{feedback}\n"

    def _message(self, spec: TaskSpec, n: int, agent: str) -> str:
        trailers: dict[str, str | int] = {
            "Task": spec.id,
            "Attempt": n,
            "Agent": agent,
            "Run": self.run_id,
        }
        return commit_message(spec.title, trailers)

    # -- results -------------------------------------------------------------------------

    def _phase(self, phase: Phase) -> None:
        if phase.job.id in self.active and phase.phase == "verifying":
            with self._tx() as tx:
                self._event(tx, "attempt", phase.job.task_id, phase.job.attempt, state="verifying")
                self._set_state(tx, phase.job.task_id, TaskState.VERIFYING)

    def _attempt_ended(self, outcome: Outcome) -> None:
        job = outcome.job
        if self.active.pop(job.id, None) is None:
            return
        self.pool_load[self.specs[job.task_id].agent] -= 1
        state = outcome.state
        if state is AttemptState.CANCELLED and self.stopping is not None:
            state = AttemptState.INTERRUPTED
        with self._tx() as tx:
            tx.set_attempt(
                self.run_id,
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
            )
            self._event(
                tx,
                "attempt",
                job.task_id,
                job.attempt,
                state=state.value,
                failure=outcome.failure,
                detail=outcome.detail,
                duration_s=round(outcome.ended_at - outcome.started_at, 3),
                changed_lines=outcome.changed_lines,
            )
            if state is AttemptState.PASSED:
                self._set_state(tx, job.task_id, TaskState.MERGING)
            elif state is AttemptState.FAILED:
                self._failed(tx, job.task_id, outcome.failure, outcome.detail, outcome.feedback)
            else:
                self._requeue(tx, job.task_id, f"attempt {state.value}")
        if state is AttemptState.PASSED:
            self.merge_queue.append(outcome)
            self._pump_merges()

    def _failed(
        self, tx: Transaction, task_id: str, failure: Failure | None, detail: str, feedback: str
    ) -> None:
        failures = self.tasks[task_id].failures + 1
        spec = self.specs[task_id]
        self.feedback[task_id] = _feedback(detail, feedback)
        if failures <= spec.retries:
            self._set_state(
                tx, task_id, TaskState.READY, reason=detail, failures=failures, retry=failures
            )
            self.ready.push(task_id)
            return
        reason = f"{failure.value if failure else 'failed'}: {detail}"
        self._set_state(tx, task_id, TaskState.FAILED, reason=reason, failures=failures)
        for child in self.graph.descendants(task_id):
            if not self.tasks[child].state.terminal:
                self.ready.discard(child)
                self._set_state(tx, child, TaskState.BLOCKED, reason=f"dependency {task_id} failed")

    def _requeue(self, tx: Transaction, task_id: str, reason: str) -> None:
        """Back to ready without counting a failure (interrupted, cancelled)."""
        self._set_state(tx, task_id, TaskState.READY, reason=reason)
        if self.stopping is None:
            self.ready.push(task_id)

    def _rerun(self, tx: Transaction, task_id: str, reason: str) -> None:
        """Run again from the new tip: a conflict is not the agent's failure, but is bounded."""
        reruns = self.tasks[task_id].reruns + 1
        if reruns > MAX_RERUNS:
            self._set_state(
                tx,
                task_id,
                TaskState.FAILED,
                reruns=reruns,
                reason=f"conflict: {reason} (after {MAX_RERUNS} re-runs)",
            )
            for child in self.graph.descendants(task_id):
                if not self.tasks[child].state.terminal:
                    self._set_state(
                        tx, child, TaskState.BLOCKED, reason=f"dependency {task_id} failed"
                    )
            return
        self._set_state(tx, task_id, TaskState.READY, reason=reason, reruns=reruns, rerun=reruns)
        self.ready.push(task_id)

    # -- merging -------------------------------------------------------------------------

    def _pump_merges(self) -> None:
        """Merge queued patches one at a time, in the order they passed."""
        while self.merge_queue and self.merging is None and self.stopping is None:
            outcome = self.merge_queue.popleft()
            job = outcome.job
            assert outcome.patch_commit is not None
            prepared = self.integrator.prepare(job.base_commit, outcome.patch_commit, job.message)
            if prepared.commit is None:
                with self._tx() as tx:
                    self._event(
                        tx,
                        "merge",
                        job.task_id,
                        job.attempt,
                        state="conflict",
                        paths=list(prepared.conflicts),
                    )
                    self._rerun(tx, job.task_id, "conflict in " + ", ".join(prepared.conflicts))
            elif prepared.needs_verify and job.verify:
                self._start_merge_verify(outcome, prepared)
            else:
                self._advance(outcome, prepared)

    def _start_merge_verify(self, outcome: Outcome, prepared: Prepared) -> None:
        assert prepared.commit is not None
        job = replace(
            outcome.job,
            id=f"{outcome.job.id}.merge",
            base_commit=prepared.commit,
            profile=None,
            marker=new_marker(),
        )
        self.merging = _Merge(outcome, prepared, job)
        with self._tx() as tx:
            self._event(
                tx, "merge", job.task_id, job.attempt, state="verifying", tip=prepared.tip[:12]
            )
        self.executor.submit(job, self.inbox.put)

    def _merge_verified(self, result: Outcome) -> None:
        merge, self.merging = self.merging, None
        assert merge is not None
        task_id = merge.outcome.job.task_id
        if result.state is AttemptState.PASSED:
            self._advance(merge.outcome, merge.prepared)
        else:
            with self._tx() as tx:
                self._event(
                    tx,
                    "merge",
                    task_id,
                    merge.outcome.job.attempt,
                    state=result.state.value,
                    detail=result.detail,
                )
                if self.stopping is not None:
                    self._requeue(tx, task_id, "interrupted while merging")
                else:
                    self.feedback[task_id] = _feedback(
                        f"after merging with the moved run branch: {result.detail}", result.feedback
                    )
                    self._rerun(tx, task_id, f"merged tree failed verify: {result.detail}")
        self._pump_merges()

    def _advance(self, outcome: Outcome, prepared: Prepared) -> None:
        job = outcome.job
        if not self.integrator.advance(prepared):
            # Someone else moved the branch: prepare again against the new tip.
            self.merge_queue.appendleft(outcome)
            return
        assert prepared.commit is not None
        self.tip = prepared.commit
        with self._tx() as tx:
            tx.set_attempt(self.run_id, job.task_id, job.attempt, state=AttemptState.MERGED)
            self._event(
                tx, "merge", job.task_id, job.attempt, state="merged", commit=prepared.commit
            )
            self._set_state(tx, job.task_id, TaskState.DONE, commit=prepared.commit, reason="")
            self._release(tx, job.task_id)

    def _release(self, tx: Transaction, task_id: str) -> None:
        for child in self.graph.children[task_id]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0 and self.tasks[child].state is TaskState.PENDING:
                self._set_state(tx, child, TaskState.READY)
                self.ready.push(child)

    # -- stopping and finishing ----------------------------------------------------------

    def _stop(self, reason: str) -> None:
        if self.stopping is not None:
            return
        self.stopping = reason
        with self._tx() as tx:
            self._event(tx, "run", None, None, state="stopping", reason=reason)
            while self.merge_queue:
                self._requeue(tx, self.merge_queue.popleft().job.task_id, "interrupted")
        for job_id in list(self.active):
            self.executor.cancel(job_id, reason)
        if self.merging is not None:
            self.executor.cancel(self.merging.job.id, reason)

    def _finish(self) -> RunState:
        with self._tx() as tx:
            if self.stopping is not None:
                state, reason = RunState.INTERRUPTED, self.stopping
            else:
                for task_id, record in self.tasks.items():
                    if not record.state.terminal:  # unreachable unless the graph logic is wrong
                        self._set_state(tx, task_id, TaskState.BLOCKED, reason="never became ready")
                done = all(r.state is TaskState.DONE for r in self.tasks.values())
                state = RunState.DONE if done else RunState.FAILED
                reason = "" if done else self._summary()
            tx.set_run(self.run_id, state=state, finished_at=self.clock(), reason=reason)
            self._event(tx, "run", None, None, state=state.value, reason=reason, tip=self.tip)
        return state

    def _summary(self) -> str:
        counts = Counter(r.state.value for r in self.tasks.values())
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    # -- state ---------------------------------------------------------------------------

    def _restore(self) -> None:
        """Build the in-memory view from the store: a fresh run, or one being resumed."""
        self.tip = self.integrator.tip()
        self.tasks = {r.task_id: r for r in self.store.tasks(self.run_id)}
        for attempt in self.store.attempts(self.run_id):
            self.attempts[attempt.task_id] = max(self.attempts[attempt.task_id], attempt.n)
        done = {t for t, r in self.tasks.items() if r.state is TaskState.DONE}
        with self._tx() as tx:
            tx.set_run(self.run_id, state=RunState.RUNNING, finished_at=None, reason="")
            for task_id in self.graph.order:
                record = self.tasks[task_id]
                self.waiting[task_id] = sum(d not in done for d in self.graph.deps[task_id])
                if record.state.terminal and record.state is not TaskState.CANCELLED:
                    continue
                if self.waiting[task_id] == 0:
                    if record.state is not TaskState.READY:
                        self._set_state(tx, task_id, TaskState.READY)
                    self.ready.push(task_id)
                elif record.state is not TaskState.PENDING:
                    self._set_state(tx, task_id, TaskState.PENDING)

    @contextmanager
    def _tx(self) -> Iterator[Transaction]:
        with self.store.transaction() as tx:
            yield tx
        self.hooks.emit(tx.events)

    def _set_state(
        self,
        tx: Transaction,
        task_id: str,
        state: TaskState,
        reason: str | None = None,
        **extra: object,
    ) -> None:
        changes: dict[str, object] = {"state": state}
        if reason is not None:
            changes["reason"] = reason
        for key in ("failures", "reruns", "commit"):
            if key in extra:
                changes[key] = extra.pop(key)
        tx.set_task(self.run_id, task_id, **changes)
        self.tasks[task_id] = replace(self.tasks[task_id], **changes)  # type: ignore[arg-type]
        data = {"state": state.value, **extra}
        if reason:
            data["reason"] = reason
        if "commit" in changes:
            data["commit"] = changes["commit"]
        self._event(tx, "task", task_id, None, **data)

    def _event(
        self, tx: Transaction, kind: str, task_id: str | None, attempt: int | None, **data: object
    ) -> None:
        clean = {
            k: (v.value if hasattr(v, "value") else v) for k, v in data.items() if v is not None
        }
        tx.emit(Event(self.run_id, kind, self.clock(), task_id, attempt, clean))


def _feedback(detail: str, output: str) -> str:
    """What the next attempt is told about the last one's failure."""
    return f"{detail}\n\n```\n{output[-FEEDBACK_CHARS:]}\n```"
