"""The loop: take ready work → start attempts → on results arbitrate → merge → release dependents.

One thread owns all scheduling state. Executors report through a queue, so the loop sleeps until
something happens (an attempt ends or enters verification, a stop is requested) or until the
next timer it set itself (a retry's back-off, a breaker's cool-down, the deadline): there is no
polling. Every state change is one store transaction, and hooks hear of it after it committed.

A task is attempted in *rounds*: a round starts ``candidates`` attempts (each a unit in the
ready set, so each waits for its own slot), and ends when the rule picks a winner or every
candidate failed. Winners are merged one at a time, in the order they won.
"""

from __future__ import annotations

import heapq
import queue
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from .errors import GitError
from .events import (
    AttemptEvent,
    BreakerEvent,
    Kind,
    MergeEvent,
    RegressionEvent,
    RoundEvent,
    RunEvent,
)
from .executors import Executor, Job, Outcome, Phase
from .gitrepo import commit_message
from .graph import Graph
from .hooks import Hooks
from .merge import Prepared
from .pipeline import Pipelines
from .plan import Plan, TaskSpec
from .policy import COUNTED, INFRA_RETRIES, Backoff, Budgets, Pools
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
    checked_usage,
)
from .regression import Bisect
from .rounds import Decision, Rounds
from .seams import Integrator, Store, Transaction

_OK = {TaskState.DONE, TaskState.SKIPPED}  # a run whose tasks all end so is done
_IN_FLIGHT = {TaskState.READY, TaskState.RUNNING, TaskState.VERIFYING, TaskState.MERGING}
MAX_RERUNS = 3  # re-runs per task not counted against ``retries`` (see ``_rerun``)
FEEDBACK_CHARS = 4000


@dataclass(frozen=True)
class Stop:
    """Ask the loop to stop launching and end what runs (Ctrl-C, SIGTERM, deadline)."""

    reason: str
    state: RunState = RunState.INTERRUPTED


@dataclass(frozen=True)
class _Merge:
    """A merged tree being verified before it may become the branch tip."""

    outcome: Outcome  # the attempt whose patch it carries
    prepared: Prepared
    job: Job


@dataclass
class _Regression:
    """The run branch's regression check, and the bisect it may start."""

    job: Job
    tip: str  # the commit being checked
    bisect: Bisect | None = None
    output: str = ""


class Scheduler:
    """Drives one run to its end (or to a stop)."""

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
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        fail_fast: bool = False,
    ) -> None:
        self.plan, self.run_record, self.store, self.executor = plan, run, store, executor
        self.run_id = run.id
        self.integrator = integrator
        self.hooks = hooks or Hooks()
        self.clock, self.monotonic = clock, monotonic
        self.rng = rng or random.Random()
        self.max_parallel = max_parallel or plan.run.max_parallel
        self.specs = {t.id: t for t in plan.tasks}
        self.graph = Graph(
            [t.id for t in plan.tasks],
            {t.id: t.depends_on for t in plan.tasks},
            {t.id: t.estimate for t in plan.tasks},
            {t.id: t.priority for t in plan.tasks},
        )
        self.rounds = Rounds(self.specs, self.graph.ranks)
        self.ready = self.rounds.ready
        self.inbox: queue.SimpleQueue[Phase | Outcome | Stop] = queue.SimpleQueue()
        self.tasks: dict[str, TaskRecord] = {}
        self.waiting: dict[str, int] = {}
        self.active: dict[str, Job] = {}
        self.merge_queue: deque[Outcome] = deque()
        self.merging: _Merge | None = None
        self.parked: dict[str, Outcome] = {}  # verified patches waiting for a dependency
        self.regression: _Regression | None = None
        self.last_green = run.base_commit
        self.merges_unchecked = 0
        self.regression_off = False
        self.regression_infra = 0
        self.feedback: dict[str, str] = {}
        self.summaries: dict[str, str] = {}
        self.infra_failures: Counter[str] = Counter()
        self.backoff = Backoff(base_s=plan.run.retry_backoff_s)
        self.pools = Pools(plan.agents, clock, self.rng)
        self.budgets = Budgets(plan.run.max_cost_usd, {t.id: t.max_cost_usd for t in plan.tasks})
        self.timers: list[tuple[float, str, str]] = []  # (due, kind, task) on self.monotonic
        self.stopping: Stop | None = None  # hard stop: cancel what runs
        self.soft_stop: str | None = None  # budget: launch nothing new, finish what runs
        self.tip = ""
        self.fail_fast = fail_fast  # stop the run when a task fails for good
        self.pipelines = Pipelines(self.specs, store, run.id, self._repro_start)
        self.failed_fast: str | None = None  # the task that did, until the loop stops

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> RunState:
        """Run until every task is settled or a stop was requested; return the run's state."""
        self._restore()
        while True:
            self._launch()
            self._pump_merges()
            if self._all_done():  # the last merges are checked too, even < regression_every
                self._maybe_check_regression(final=True)
            if self._settled():
                break
            message = self._next_message()
            self._fire_timers()
            if message is not None:
                self._handle(message)
        return self._finish()

    def abandon(self) -> None:
        """Cancel every job still out (the loop itself failed): nothing may run on unseen."""
        jobs = [*self.active]
        jobs += [p.job.id for p in (self.merging, self.regression) if p is not None]
        for job_id in jobs:
            self.executor.cancel(job_id, "the orchestrator failed")

    def stop(self, reason: str = "interrupted", state: RunState = RunState.INTERRUPTED) -> None:
        """Request a stop; safe from signal handlers and other threads."""
        self.inbox.put(Stop(reason, state))

    def _next_message(self) -> Phase | Outcome | Stop | None:
        """Block until a message arrives or the next timer is due."""
        due = [t[0] for t in self.timers[:1]]
        due += [w for w in (self._wake_at(),) if w is not None]
        timeout = None if not due else max(0.0, min(due) - self.monotonic())
        try:
            return self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def _settled(self) -> bool:
        if self.active or self.merging is not None or self.regression is not None:
            return False
        if self.stopping is not None:
            return True
        if self.merge_queue:
            return False
        if self.soft_stop is not None:
            return True
        return self._idle()

    def _all_done(self) -> bool:
        """Nothing runs, waits, or is left to merge, and no stop was asked for."""
        busy = self.active or self.merging or self.regression or self.merge_queue
        stopped = self.stopping is not None or self.soft_stop is not None
        return not busy and not stopped and self._idle()

    def _idle(self) -> bool:
        """Nothing is ready and no retry is waiting for its back-off."""
        return not self.ready and not any(kind == "retry" for _, kind, _ in self.timers)

    def _handle(self, message: Phase | Outcome | Stop) -> None:
        if isinstance(message, Stop):
            self._stop(message)
        elif isinstance(message, Phase):
            self._phase(message)
        elif self.merging is not None and message.job.id == self.merging.job.id:
            self._merge_verified(message)
        elif self.regression is not None and message.job.id == self.regression.job.id:
            self._regression_ended(message)
        else:
            self._attempt_ended(message)

    # -- timers --------------------------------------------------------------------------

    def _timer(self, delay_s: float, kind: str, task_id: str = "") -> None:
        heapq.heappush(self.timers, (self.monotonic() + delay_s, kind, task_id))

    def _fire_timers(self) -> None:
        now = self.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, kind, task_id = heapq.heappop(self.timers)
            if kind == "retry" and self.stopping is None:
                with self._tx() as tx:
                    self._new_round(tx, task_id)
            elif kind == "deadline":
                self._stop(Stop("deadline reached", RunState.STOPPED))

    def _wake_at(self) -> float | None:
        """When a pool that ready work waits for opens again (breaker cool-down, rate limit)."""
        if not self.ready or self.stopping is not None or self.soft_stop is not None:
            return None
        wait_s = self.pools.wake_in(self.ready.pools())
        return None if wait_s is None else self.monotonic() + wait_s

    # -- starting attempts ---------------------------------------------------------------

    def _launch(self) -> None:
        if self.failed_fast is not None and self.stopping is None:
            self._stop(Stop(f"fail-fast: task {self.failed_fast} failed", RunState.FAILED))
        while self.stopping is None and len(self.active) < self.max_parallel:
            if self._run_budget_spent():
                return
            unit = self.ready.pop(self.pools.has_room)
            if unit is None:
                return
            task_id = unit.task_id
            if self.budgets.task_spent(task_id):
                self._hold(task_id, f"cost budget spent (${self.budgets.cost[task_id]:.2f})")
                continue
            self._start_attempt(self.specs[task_id], unit.candidate)

    def _run_budget_spent(self) -> bool:
        if self.soft_stop is None and (spent := self.budgets.run_spent()) is not None:
            self.soft_stop = spent
            with self._tx() as tx:
                self._event(
                    tx, Kind.RUN, None, None, state=RunEvent.STOPPING, reason=self.soft_stop
                )
        return self.soft_stop is not None

    def _hold(self, task_id: str, reason: str) -> None:
        self.budgets.held.add(task_id)
        running = [j.candidate for j in self.active.values() if j.task_id == task_id]
        decision = self.rounds.hold(task_id, running)
        with self._tx() as tx:
            self._set_state(tx, task_id, TaskState.READY, reason=reason, held=True)
            if decision is not None:
                self._decided(tx, decision)  # the loop merges the winner

    def _log_path(self, job: Job) -> str:
        """Where the executor will write the job's output, if it says in advance (so that a
        running attempt's log can be followed)."""
        where = getattr(self.executor, "log_path", None)
        return str(where(job.run_id, job.id)) if callable(where) else ""

    def _start_attempt(self, spec: TaskSpec, candidate: int) -> None:
        n = self.rounds.next_attempt(spec.id)
        agent = self.pools.profile_for(spec.id, spec.agent_for(candidate))
        now = self.clock()
        self.pools.started(agent)
        job = Job(
            id=f"{spec.id}.{n}",
            run_id=self.run_id,
            task_id=spec.id,
            attempt=n,
            candidate=candidate,
            base_commit=self.tip,
            title=spec.title,
            prompt=self._prompt(spec),
            profile=self.plan.agents[agent],
            verify=spec.verify,
            workdir=spec.workdir,
            timeout_s=spec.timeout_s,
            message=self._message(spec, n, agent),
            marker=new_marker(),
            baseline=self.tip,
            check=spec.check,
            auto_verify=spec.auto_verify,
            max_patch_bytes=int(self.plan.run.max_patch_mb * 1024 * 1024),
            network=spec.network,
            allow_empty=spec.allow_empty,
            max_cost_usd=self.budgets.task_left(spec.id),
        )
        job = self.pipelines.shape(job, spec)  # a pipeline's stage: handoffs, where it starts
        record = AttemptRecord(
            run_id=self.run_id,
            task_id=spec.id,
            n=n,
            candidate=candidate,
            agent=agent,
            state=AttemptState.RUNNING,
            base_commit=job.base_commit,
            started_at=now,
            marker=job.marker,
            log_path=self._log_path(job),
        )
        with self._tx() as tx:
            tx.add_attempt(record)
            self._event(
                tx,
                Kind.ATTEMPT,
                spec.id,
                n,
                state=AttemptState.RUNNING,
                agent=agent,
                candidate=candidate,
                base=self.tip[:12],
            )
            if self.tasks[spec.id].state is not TaskState.RUNNING:
                self._set_state(tx, spec.id, TaskState.RUNNING)
        self.active[job.id] = job
        self.executor.submit(job, self.inbox.put)

    def _prompt(self, spec: TaskSpec) -> str:
        parts = [spec.prompt]
        done = [(d, self.summaries[d]) for d in spec.depends_on if self.summaries.get(d)]
        if done:
            parts.append("## What the tasks this one depends on did\n")
            parts += [f"- {dep}: {summary}" for dep, summary in done]
        if self.feedback.get(spec.id):
            parts.append(f"## An earlier attempt failed\n\n{self.feedback[spec.id]}")
        return "\n\n".join(parts) + "\n"

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
        job = phase.job
        if job.id in self.active and phase.phase == "verifying":
            with self._tx() as tx:
                self._event(
                    tx, Kind.ATTEMPT, job.task_id, job.attempt, state=AttemptEvent.VERIFYING
                )
                if self.tasks[job.task_id].state is TaskState.RUNNING:
                    self._set_state(tx, job.task_id, TaskState.VERIFYING)

    def _attempt_ended(self, outcome: Outcome) -> None:
        job = outcome.job
        if self.active.pop(job.id, None) is None or job.profile is None:
            return
        usage, dropped = checked_usage(outcome.usage)
        outcome = replace(outcome, usage=usage)
        self.budgets.spend(job.task_id, usage)
        if self.pools.ended(job.profile.name, job.task_id, outcome):
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.BREAKER,
                    job.task_id,
                    None,
                    state=BreakerEvent.OPEN,
                    agent=job.profile.name,
                    until=self.pools.breakers[job.profile.name].reopens_at(),
                )
        state = outcome.state
        if state is AttemptState.CANCELLED and self.stopping is not None:
            state = AttemptState.INTERRUPTED
        round_ = self.rounds.current(job)
        with self._tx() as tx:
            if dropped:  # ignored, and said so: an agent must not switch a budget off
                self._event(tx, Kind.USAGE_IGNORED, job.task_id, job.attempt, fields=list(dropped))
            self._record_attempt(tx, outcome, state)
            if round_ is None:  # a loser still running when the winner was picked, or dropped
                tx.set_attempt(self.run_id, job.task_id, job.attempt, selection="cancelled")
                return
            if state is AttemptState.INTERRUPTED:
                self._set_state(tx, job.task_id, TaskState.READY, reason="interrupted")
                return
            if self._retry_unit(tx, outcome):
                return
            decision = self.rounds.record(outcome)
            if decision is not None:
                self._decided(tx, decision)
        self._pump_merges()

    def _record_attempt(self, tx: Transaction, outcome: Outcome, state: AttemptState) -> None:
        job = outcome.job
        duration = round(outcome.ended_at - outcome.started_at, 3)
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
            verdict=outcome.verdict,
            handoff=outcome.handoff,
        )
        self._event(
            tx,
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
        )

    def _retry_unit(self, tx: Transaction, outcome: Outcome) -> bool:
        """Re-queue one candidate without a counted failure (rate limit, infra, within budget)."""
        job, failure = outcome.job, outcome.failure
        if failure is Failure.INFRA_ERROR and self.infra_failures[job.task_id] < INFRA_RETRIES:
            self.infra_failures[job.task_id] += 1
        elif failure is not Failure.RATE_LIMITED:
            return False
        self.rounds.requeue(job)
        # a rate limit's reset time, as the agent reported it (None: the profile backs off)
        reset = outcome.retry_after_s if failure is Failure.RATE_LIMITED else None
        self._event(
            tx,
            Kind.ATTEMPT,
            job.task_id,
            job.attempt,
            state=AttemptEvent.REQUEUED,
            failure=failure.value,
            retry_after_s=reset,
        )
        return True

    def _decided(self, tx: Transaction, decision: Decision) -> None:
        """Record why each candidate won or lost; merge the winner, or count the failure."""
        task_id, winner = decision.task_id, decision.winner
        for outcome, selection in decision.selections:
            tx.set_attempt(
                self.run_id,
                task_id,
                outcome.job.attempt,
                selection=selection,
                won=outcome is winner,
            )
        for job in list(self.active.values()):
            if job.task_id == task_id and job.profile is not None:
                self.executor.cancel(job.id, "another candidate was chosen")
        if winner is None:
            why, output = decision.detail, decision.feedback
            self._failed(tx, task_id, decision.failure, why, output, decision.final)
            return
        self._event(
            tx,
            Kind.ROUND,
            task_id,
            winner.job.attempt,
            state=RoundEvent.WON,
            candidate=winner.job.candidate,
            reason=decision.why,
        )
        self._set_state(tx, task_id, TaskState.MERGING)
        self.summaries[task_id] = winner.summary
        self.merge_queue.append(winner)

    def _failed(
        self,
        tx: Transaction,
        task_id: str,
        failure: Failure | None,
        detail: str,
        feedback: str,
        final: bool = False,
    ) -> None:
        counted = failure in COUNTED or failure is None or failure is Failure.INFRA_ERROR
        failures = self.tasks[task_id].failures + (1 if counted else 0)
        spec = self.specs[task_id]
        self.feedback[task_id] = _feedback(detail, feedback)
        if failures <= spec.retries and not final:
            delay = self.backoff.delay(failures, self.rng)
            self._set_state(
                tx,
                task_id,
                TaskState.READY,
                reason=detail,
                failures=failures,
                retry=failures,
                retry_in_s=round(delay, 2),
            )
            self._timer(delay, "retry", task_id)
            return
        reason = f"{failure.value if failure else 'failed'}: {detail}"
        if self.pipelines.escalates(task_id, failure):
            self._escalate(tx, task_id, reason, feedback, failures)
            return
        self._set_state(tx, task_id, TaskState.FAILED, reason=reason, failures=failures)
        self._block_dependents(tx, task_id)

    def _escalate(
        self, tx: Transaction, task_id: str, reason: str, output: str, failures: int
    ) -> None:
        """A fix pipeline's failed shot hands the bug to the debug stages."""
        owner, data = self.pipelines.escalation(task_id, reason, output)
        why = f"escalated to the debug pipeline: {reason}"
        self._set_state(tx, task_id, TaskState.SKIPPED, reason=why, failures=failures)
        self._event(tx, Kind.ESCALATION, owner, None, **data)
        self._release(tx, task_id)

    def _block_dependents(self, tx: Transaction, task_id: str) -> None:
        for child in self.graph.descendants(task_id):
            if not self.tasks[child].state.terminal:
                self.rounds.unready(child)
                self.parked.pop(child, None)
                self._set_state(tx, child, TaskState.BLOCKED, reason=f"dependency {task_id} failed")

    def _new_round(self, tx: Transaction, task_id: str) -> None:
        """Queue a fresh round of candidates (or a parked patch) for a task."""
        if task_id in self.parked:
            self._set_state(tx, task_id, TaskState.MERGING, reason="re-verifying its patch")
            self.merge_queue.append(self.parked.pop(task_id))
            return
        self.rounds.start(task_id)
        if self.tasks[task_id].state is not TaskState.READY:
            self._set_state(tx, task_id, TaskState.READY)

    def _rerun(self, tx: Transaction, task_id: str, reason: str) -> None:
        """Run again from the new tip: not the agent's failure, but bounded."""
        reruns = self.tasks[task_id].reruns + 1
        if reruns > MAX_RERUNS:
            self._set_state(
                tx,
                task_id,
                TaskState.FAILED,
                reruns=reruns,
                reason=f"{reason} (gave up after {MAX_RERUNS} re-runs)",
            )
            self._block_dependents(tx, task_id)
            return
        self._set_state(tx, task_id, TaskState.READY, reason=reason, reruns=reruns, rerun=reruns)
        self._new_round(tx, task_id)

    # -- merging -------------------------------------------------------------------------

    def _pump_merges(self) -> None:
        """Merge queued winners one at a time, in the order they won."""
        while (
            self.merge_queue
            and self.merging is None
            and self.regression is None
            and self.stopping is None
        ):
            outcome = self.merge_queue.popleft()
            job = outcome.job
            if outcome.patch_commit is None or not self.pipelines.lands(job.task_id):
                # A task that changes nothing (a scanner), or a stage that hands over instead.
                self._done(job.task_id, job.attempt, None)
                continue
            prepared = self.integrator.prepare(
                job.base_commit, outcome.patch_commit, job.message, self.tip
            )
            if prepared.commit is None:
                with self._tx() as tx:
                    self._event(
                        tx,
                        Kind.MERGE,
                        job.task_id,
                        job.attempt,
                        state=MergeEvent.CONFLICT,
                        paths=list(prepared.conflicts),
                    )
                    where = "conflict in " + ", ".join(prepared.conflicts)
                    tx.set_attempt(
                        self.run_id,
                        job.task_id,
                        job.attempt,
                        state=AttemptState.FAILED,
                        failure=Failure.CONFLICT,
                        detail=where,
                    )
                    self._rerun(tx, job.task_id, where)
            elif prepared.needs_verify and (outcome.verify_commands or job.verify):
                self._start_merge_verify(outcome, prepared)
            else:
                self._advance(outcome, prepared)
        self._launch()

    def _start_merge_verify(self, outcome: Outcome, prepared: Prepared) -> None:
        assert prepared.commit is not None
        job = replace(
            outcome.job,
            id=f"{outcome.job.id}.merge",
            base_commit=prepared.commit,
            profile=None,
            marker=new_marker(),
            baseline=prepared.tip,
            check=None,
            purpose="merge",
            verify=outcome.verify_commands or outcome.job.verify,
            auto_verify=False,
            stage="",
            start_commit=None,
        )
        self.merging = _Merge(outcome, prepared, job)
        with self._tx() as tx:
            self._event(
                tx,
                Kind.MERGE,
                job.task_id,
                job.attempt,
                state=MergeEvent.VERIFYING,
                tip=prepared.tip[:12],
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
                    Kind.MERGE,
                    task_id,
                    merge.outcome.job.attempt,
                    state=result.state.value,
                    detail=result.detail,
                )
                # When stopping, the task stays merging: a resume merges the saved patch again.
                if self.stopping is None:
                    self.feedback[task_id] = _feedback(
                        f"after merging with the moved run branch: {result.detail}",
                        result.feedback,
                    )
                    self._rerun(tx, task_id, f"merged tree failed verify: {result.detail}")
        self._pump_merges()

    def _advance(self, outcome: Outcome, prepared: Prepared) -> None:
        job = outcome.job
        assert prepared.commit is not None
        with self._tx() as tx:  # before the ref moves: resume trusts only recorded commits
            tx.intend_commit(self.run_id, prepared.commit, job.task_id, job.attempt)
        if not self.integrator.advance(prepared):
            if self.integrator.current() is None:  # deleted under the run: made again, retried
                self._branch_tip()
                self.merge_queue.appendleft(outcome)
                return
            moved = self._branch_tip()
            if moved == prepared.tip:  # git could not move it (a stale lock, a full disk)
                with self._tx() as tx:
                    self._event(
                        tx,
                        Kind.MERGE,
                        job.task_id,
                        job.attempt,
                        state=MergeEvent.FAILED,
                        reason="could not move the run branch",
                    )
                    self._rerun(tx, job.task_id, "could not move the run branch")
                return
            # Only orchardist may move the run branch: put it back where we left it (what an
            # agent committed there is not kept) and merge again.
            restored = self.integrator.reset(self.tip, moved)
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.MERGE,
                    job.task_id,
                    job.attempt,
                    state=MergeEvent.BRANCH_MOVED,
                    found=moved,
                    restored=restored,
                )
            if not restored:
                self.tip = self._branch_tip()
            self.merge_queue.appendleft(outcome)
            return
        self._done(job.task_id, job.attempt, prepared.commit, outcome)

    def _done(
        self, task_id: str, attempt: int, commit: str | None, won: Outcome | None = None
    ) -> None:
        if commit is not None:
            self.tip = commit
            self.merges_unchecked += 1
        if won is not None:
            self.parked[task_id] = won  # kept in case a regression rewinds the branch past it
        else:
            self.parked.pop(task_id, None)
        with self._tx() as tx:
            tx.set_attempt(self.run_id, task_id, attempt, state=AttemptState.MERGED)
            self._event(tx, Kind.MERGE, task_id, attempt, state=MergeEvent.MERGED, commit=commit)
            self._set_state(tx, task_id, TaskState.DONE, commit=commit, reason="")
            owner = self.pipelines.landed(tx, task_id, commit, self._set_state)
            self._release(tx, task_id)
            if owner:  # a fix pipeline's shot landed: the task is done with its commit
                self._release(tx, owner)
        self._maybe_check_regression()

    def _release(self, tx: Transaction, task_id: str) -> None:
        for child in self.graph.children[task_id]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0 and self.tasks[child].state is TaskState.PENDING:
                self._new_round(tx, child)

    # -- keeping the run branch green ----------------------------------------------------

    def _maybe_check_regression(self, final: bool = False) -> None:
        commands = self.plan.run.regression
        if not commands or self.regression_off or self.regression is not None:
            return
        if self.stopping is not None or self.merges_unchecked == 0:
            return
        if self.merges_unchecked < self.plan.run.regression_every and not final:
            return
        self.regression = _Regression(self._regression_job(self.tip, "check"), self.tip)
        with self._tx() as tx:
            self._event(
                tx, Kind.REGRESSION, None, None, state=RegressionEvent.CHECKING, commit=self.tip
            )
        self.executor.submit(self.regression.job, self.inbox.put)

    def _regression_job(self, commit: str, label: str) -> Job:
        return Job(
            id=f"regression.{commit[:12]}.{label}.{new_marker()[:6]}",
            run_id=self.run_id,
            task_id="",
            attempt=0,
            candidate=0,
            base_commit=commit,
            title="regression check",
            prompt="",
            profile=None,
            verify=self.plan.run.regression,
            workdir=self.plan.run.workdir,
            timeout_s=max((t.timeout_s for t in self.plan.tasks), default=3600.0),
            message="",
            marker=new_marker(),
            baseline=self.run_record.base_commit,
            purpose="regression",
            network=self.plan.run.network,
        )

    def _regression_ended(self, result: Outcome) -> None:
        reg = self.regression
        assert reg is not None
        passed = result.state is AttemptState.PASSED
        if result.state is AttemptState.CANCELLED or self.stopping is not None:
            self.regression = None
            return
        if result.failure is Failure.INFRA_ERROR:  # it could not run: that says nothing
            self.regression, self.regression_infra = None, self.regression_infra + 1
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.REGRESSION,
                    None,
                    None,
                    state=RegressionEvent.NOT_RUN,
                    detail=result.detail,
                )
                if self.regression_infra >= INFRA_RETRIES:
                    self.regression_off = True
                    self._event(
                        tx,
                        Kind.REGRESSION,
                        None,
                        None,
                        state=RegressionEvent.OFF,
                        reason="the regression check could not run",
                    )
            self._pump_merges()
            return
        if reg.bisect is None:
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.REGRESSION,
                    None,
                    None,
                    state=RegressionEvent.PASSED if passed else RegressionEvent.FAILED,
                    commit=reg.tip,
                    detail=result.detail,
                )
            if passed:
                self.last_green, self.merges_unchecked, self.regression = reg.tip, 0, None
                self._pump_merges()
                return
            commits = self.integrator.first_parent_commits(self.last_green, reg.tip)
            if self.last_green == self.run_record.base_commit:
                commits.insert(0, self.last_green)  # never seen green: the base may be red too
            reg.bisect, reg.output = Bisect(commits), result.feedback
        else:
            reg.bisect.record(result.job.base_commit, passed)
            if not passed:
                reg.output = result.feedback
        probe = reg.bisect.next_probe()
        if probe is not None:
            reg.job = self._regression_job(probe, "bisect")
            self.executor.submit(reg.job, self.inbox.put)
            return
        if reg.bisect.culprit == self.run_record.base_commit:
            self.regression, self.regression_off = None, True
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.REGRESSION,
                    None,
                    None,
                    state=RegressionEvent.OFF,
                    reason="the regression command already fails on the run's base",
                )
            self._pump_merges()
            return
        self._rewind(reg.bisect.culprit, reg)

    def _rewind(self, culprit: str, reg: _Regression) -> None:
        """Take the culprit's merge off the run branch, replay the merges after it, re-run it."""
        self.regression = None
        later = self.integrator.first_parent_commits(culprit, self.tip)
        order = {c: i for i, c in enumerate([culprit, *later])}
        by_commit = {r.commit: t for t, r in self.tasks.items() if r.commit in order}
        for task_id in by_commit.values():
            if task_id not in self.parked:  # merged before a resume: rebuild from the store
                self.parked[task_id] = self._merged_outcome(task_id)
        culprit_task = by_commit.get(culprit)
        parent = self.integrator.parent(culprit)
        if culprit_task is None or not self.integrator.reset(parent, self.tip):
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.REGRESSION,
                    None,
                    None,
                    state=RegressionEvent.UNRESOLVED,
                    commit=culprit,
                )
            self.last_green, self.merges_unchecked = self.tip, 0
            self._pump_merges()
            return
        self.tip = parent
        affected = set(self.graph.descendants(culprit_task))
        with self._tx() as tx:
            self._event(
                tx,
                Kind.REGRESSION,
                culprit_task,
                None,
                state=RegressionEvent.CULPRIT,
                commit=culprit,
                probes=len(reg.bisect.probes) if reg.bisect else 0,
                reason=f"first failing merge: {culprit[:12]}",
            )
            replay = sorted(by_commit.items(), key=lambda item: order[item[0]])
            for commit, task_id in replay:
                self._undo_done(tx, task_id)
                if task_id == culprit_task:
                    self.feedback[task_id] = _feedback(
                        "the regression check failed after this task was merged", reg.output
                    )
                    undone = self.parked.pop(task_id, None)
                    if undone is not None:
                        tx.set_attempt(
                            self.run_id,
                            task_id,
                            undone.job.attempt,
                            state=AttemptState.FAILED,
                            failure=Failure.VERIFY_FAILED,
                            selection="taken off the run branch: regression culprit",
                            won=False,
                        )
                    self._rerun(tx, task_id, f"regression culprit (commit {commit[:12]})")
                elif task_id in affected:
                    self._set_state(tx, task_id, TaskState.PENDING, reason="waits for a re-run")
                else:
                    self._set_state(tx, task_id, TaskState.MERGING, reason="replayed after rewind")
                    self.merge_queue.append(self.parked.pop(task_id))
            for task_id in affected:
                if self.tasks[task_id].state in _IN_FLIGHT:
                    self._reset_in_flight(tx, task_id)
            for task_id in self.graph.ids:
                self.waiting[task_id] = sum(
                    self.tasks[d].state is not TaskState.DONE for d in self.graph.deps[task_id]
                )
        self.merges_unchecked = self.plan.run.regression_every  # check the new tip too
        self._pump_merges()

    def _undo_done(self, tx: Transaction, task_id: str) -> None:
        """A merged task is taken off the branch."""
        tx.set_task(self.run_id, task_id, commit=None)
        self.tasks[task_id] = replace(self.tasks[task_id], commit=None)

    def _reset_in_flight(self, tx: Transaction, task_id: str) -> None:
        """A task whose dependency was taken off the branch waits for it again."""
        self.rounds.drop(task_id)
        for job in list(self.active.values()):
            if job.task_id == task_id:
                self.executor.cancel(job.id, "a dependency was taken off the run branch")
        queued = [o for o in self.merge_queue if o.job.task_id == task_id]
        for outcome in queued:
            self.merge_queue.remove(outcome)
        self._set_state(tx, task_id, TaskState.PENDING, reason="waits for a re-run dependency")

    # -- stopping and finishing ----------------------------------------------------------

    def _stop(self, stop: Stop) -> None:
        if self.stopping is not None:
            return
        self.stopping = stop
        with self._tx() as tx:
            self._event(tx, Kind.RUN, None, None, state=RunEvent.STOPPING, reason=stop.reason)
            # Verified patches waiting to merge stay ``merging``: a resume merges them from the
            # saved patch instead of running their agents again.
            self.merge_queue.clear()
        for job_id in list(self.active):
            self.executor.cancel(job_id, stop.reason)
        for pending in (self.merging, self.regression):
            if pending is not None:
                self.executor.cancel(pending.job.id, stop.reason)

    def _finish(self) -> RunState:
        moved = self._branch_tip()
        if moved != self.tip and self.integrator.reset(self.tip, moved):
            with self._tx() as tx:
                self._event(
                    tx,
                    Kind.MERGE,
                    None,
                    None,
                    state=MergeEvent.BRANCH_MOVED,
                    found=moved,
                    restored=True,
                )
        with self._tx() as tx:
            if self.stopping is not None:
                state, reason = self.stopping.state, self.stopping.reason
                if state in (RunState.CANCELLED, RunState.FAILED):  # not resumable: settle all
                    for task_id, record in self.tasks.items():
                        if not record.state.terminal:
                            self._set_state(tx, task_id, TaskState.CANCELLED, reason=reason)
            elif self.soft_stop is not None or self.budgets.held:
                state = RunState.STOPPED
                held = ", ".join(sorted(self.budgets.held))
                reason = self.soft_stop or f"cost budget spent for: {held}"
            else:
                for task_id, record in self.tasks.items():
                    if not record.state.terminal:  # unreachable unless the graph logic is wrong
                        self._set_state(tx, task_id, TaskState.BLOCKED, reason="never became ready")
                done = all(r.state in _OK for r in self.tasks.values())
                state = RunState.DONE if done else RunState.FAILED
                reason = "" if done else self._summary()
            tx.set_run(self.run_id, state=state, finished_at=self.clock(), reason=reason)
            self._event(
                tx,
                Kind.RUN,
                None,
                None,
                state=state.value,
                reason=reason,
                tip=self.tip,
                cost_usd=round(self.budgets.total, 6) or None,
            )
        return state

    def _summary(self) -> str:
        counts = Counter(r.state.value for r in self.tasks.values())
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    def _branch_tip(self) -> str:
        """The run branch's tip. A branch deleted under the run is made again where orchardist
        last put it (``self.tip``, a commit the store recorded): only orchardist moves it."""
        tip = self.integrator.current()
        if tip is not None:
            return tip
        restored = self.integrator.recreate(self.tip)
        with self._tx() as tx:
            self._event(
                tx,
                Kind.MERGE,
                None,
                None,
                state=MergeEvent.BRANCH_DELETED,
                restored=restored,
                tip=self.tip,
            )
        tip = self.integrator.current()
        if tip is None:
            raise GitError(
                f"the run branch {self.run_record.branch} is gone or names no readable commit "
                "(a damaged object store?) and cannot be made again"
            )
        return tip

    # -- state ---------------------------------------------------------------------------

    def _restore(self) -> None:
        """Build the in-memory view from the store: a fresh run, or one being resumed."""
        self.tip = self.run_record.base_commit  # (resume put the branch where the store says)
        self.tip = self._branch_tip()
        self.tasks = {r.task_id: r for r in self.store.tasks(self.run_id)}
        passed: dict[str, AttemptRecord] = {}
        for attempt in self.store.attempts(self.run_id):
            attempts = self.rounds.attempts
            attempts[attempt.task_id] = max(attempts[attempt.task_id], attempt.n)
            self.budgets.spend(attempt.task_id, checked_usage(attempt.usage)[0])
            if attempt.state is AttemptState.PASSED and attempt.patch_commit and attempt.won:
                passed[attempt.task_id] = attempt  # the round's winner, never a loser
        done = {t for t, r in self.tasks.items() if r.state is TaskState.DONE}
        done |= self.pipelines.passed_on(self.tasks)  # escalated shots release their stages
        with self._tx() as tx:
            tx.set_run(self.run_id, state=RunState.RUNNING, finished_at=None, reason="")
            for task_id in self.graph.order:
                record = self.tasks[task_id]
                self.waiting[task_id] = sum(d not in done for d in self.graph.deps[task_id])
                if record.state.terminal and record.state is not TaskState.CANCELLED:
                    continue
                if self.waiting[task_id] != 0:
                    if record.state is not TaskState.PENDING:
                        self._set_state(tx, task_id, TaskState.PENDING)
                elif record.state is TaskState.MERGING and task_id in passed:
                    self.merge_queue.append(self._outcome_of(passed[task_id]))
                else:
                    self._new_round(tx, task_id)
            # Merged before a restart and never checked since: the final check covers them.
            self.merges_unchecked = sum(bool(r.commit) for r in self.tasks.values())
            if self.plan.run.deadline_s is not None:
                left = self.run_record.created_at + self.plan.run.deadline_s - self.clock()
                self._timer(max(0.0, left), "deadline")
        self._pump_merges()

    def _merged_outcome(self, task_id: str) -> Outcome:
        """The merged attempt of a done task, rebuilt from the store."""
        merged = [
            a
            for a in self.store.attempts(self.run_id, task_id)
            if a.state is AttemptState.MERGED and a.patch_commit
        ]
        return self._outcome_of(merged[-1])

    def _outcome_of(self, attempt: AttemptRecord) -> Outcome:
        """Rebuild a passed attempt's outcome from the store, to merge it after a restart."""
        spec = self.specs[attempt.task_id]
        job = Job(
            id=f"{spec.id}.{attempt.n}",
            run_id=self.run_id,
            task_id=spec.id,
            attempt=attempt.n,
            candidate=attempt.candidate,
            base_commit=attempt.base_commit,
            title=spec.title,
            prompt=spec.prompt,
            profile=self.plan.agents.get(attempt.agent),
            verify=spec.verify,
            workdir=spec.workdir,
            timeout_s=spec.timeout_s,
            message=self._message(spec, attempt.n, attempt.agent),
            marker=new_marker(),
            network=spec.network,
        )
        return Outcome(
            job,
            AttemptState.PASSED,
            attempt.started_at,
            attempt.ended_at or attempt.started_at,
            patch_commit=attempt.patch_commit,
            changed_lines=attempt.changed_lines,
        )

    def _repro_start(self, base: str, patch: str, message: str, tip: str) -> str | None:
        """The reproduction's files as a commit on ``tip`` (a fix starts there, and is judged
        against it); None when they conflict with what landed since."""
        return self.integrator.prepare(base, patch, message, tip).commit

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
        if state is TaskState.FAILED and self.fail_fast and self.failed_fast is None:
            self.failed_fast = task_id  # the loop stops before it launches anything else
        data = {"state": state.value, **extra}
        if reason:
            data["reason"] = reason
        if "commit" in changes:
            data["commit"] = changes["commit"]
        self._event(tx, Kind.TASK, task_id, None, **data)

    def _event(
        self, tx: Transaction, kind: Kind, task_id: str | None, attempt: int | None, **data: object
    ) -> None:
        clean = {k: getattr(v, "value", v) for k, v in data.items() if v is not None}
        tx.emit(Event(self.run_id, kind, self.clock(), task_id, attempt, clean))


def _feedback(detail: str, output: str) -> str:
    """What the next attempt is told about the last one's failure."""
    return f"{detail}\n\n```\n{output[-FEEDBACK_CHARS:]}\n```"
