"""The loop: launch attempts → handle their outcomes → decide rounds → merge → release dependents.

One thread owns all scheduling state. Executors report through a queue, so the loop sleeps until
something happens (an attempt ends or enters verification, a stop is requested) or until the
next alarm it set itself (a retry's back-off, a breaker's cool-down, the deadline): there is no
polling. Every state change is one store transaction, and hooks hear of it after it committed.

The loop only sequences; each concern has an owner with its own state: candidate rounds and the
ready set (``rounds.Rounds``), pools, budgets and free requeues (``policy.Pools``,
``policy.Budgets``, ``policy.FreeRetries``), the merge queue (``merge.MergeTrain``), the
regression guard (``regression.RegressionGuard``), review gates (``review.Gate``: a decision
recorded from another process arrives as a ``ReviewWake``), task state transitions
(``lifecycle.Lifecycle``), the records (``ledger.Ledger``) and what an attempt is told
(``jobs.Briefs``). They answer with typed results; the loop acts on them.
"""

from __future__ import annotations

import queue
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..clocks import Alarms
from ..executors import AttemptJob, Executor, Outcome, Phase
from ..pipelines.expand import Pipelines
from ..plan.graph import Graph
from ..seams import Integrator, Store
from ..specs import Plan, Review, TaskSpec
from ..state.agentrecords import Failure
from ..state.events import AttemptEvent, BreakerEvent, Kind, MergeEvent, RegressionEvent, RunEvent
from ..state.records import AttemptState, Run, RunState, TaskState
from ..state.usage import checked_usage
from .hooks import Hooks
from .jobs import Briefs, log_path, started
from .ledger import Ledger, Writes
from .lifecycle import Lifecycle
from .merge import BranchMoved, Merged, MergeStep, MergeTrain, NeedsVerify
from .policy import Backoff, Budgets, FreeRetries, Pools
from .regression import Culprit, RegressionGuard, plan_rewind
from .review import Gate, ReviewWake
from .rounds import Rounds


@dataclass(frozen=True)
class Stop:
    """Ask the loop to stop launching and end what runs (Ctrl-C, SIGTERM, deadline)."""

    reason: str
    state: RunState = RunState.INTERRUPTED


Message = Phase | Outcome | Stop | ReviewWake  # what the loop's queue carries


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
        before_finish: Callable[[], None] | None = None,  # the last thing before the run ends
    ) -> None:
        self.plan, self.run_record, self.store, self.executor = plan, run, store, executor
        self.run_id, self.integrator, self.hooks = run.id, integrator, hooks or Hooks()
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
        self.inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.ledger = Ledger(store, self.hooks, run.id, clock, fail_fast)
        self.tasks = self.ledger.tasks  # the same dict: the ledger keeps it in step
        self.active: dict[str, AttemptJob] = {}
        self.train = self._merge_train(plan, run.branch)
        timeout_s = max((t.timeout_s for t in plan.tasks), default=3600.0)
        self.guard = RegressionGuard(plan.run, run.id, run.base_commit, timeout_s, integrator)
        self.briefs = Briefs(plan, run.id)
        self.free_retries = FreeRetries()  # rate limits and the first infra errors
        self.pools = Pools(plan.agents, clock, self.rng)
        self.budgets = Budgets(plan.run.max_cost_usd, {t.id: t.max_cost_usd for t in plan.tasks})
        self.alarms = Alarms(monotonic)  # retries after their back-off, the deadline
        self.stopping: Stop | None = None  # hard stop: cancel what runs
        self.soft_stop: str | None = None  # budget: launch nothing new, finish what runs
        self.before_finish = before_finish or (lambda: None)
        self.pipelines = Pipelines(self.specs, store, run.id, self.train.start_on)
        self.gate = Gate(self.specs, self.pipelines.lands, self.train.start_on)
        self.life = Lifecycle(
            specs=self.specs,
            graph=self.graph,
            ledger=self.ledger,
            rounds=self.rounds,
            train=self.train,
            briefs=self.briefs,
            pipelines=self.pipelines,
            gate=self.gate,
            backoff=Backoff(base_s=plan.run.retry_backoff_s),
            rng=self.rng,
            retry_in=lambda delay_s, task_id: self.alarms.set(delay_s, "retry", task_id),
            cancel=self._cancel,
        )

    def _merge_train(self, plan: Plan, branch: str) -> MergeTrain:
        """The run's merge queue: it cancels the verifications of trees that will not land."""
        return MergeTrain(
            self.integrator,
            branch,
            self.ledger.intend,
            self.ledger.deleted,
            cancel=lambda job_id: self.executor.cancel(job_id, "a merge ahead of it failed"),
            reverify=plan.run.reverify,
            ways=self.max_parallel,
            stacks={t.id for t in plan.tasks if t.candidates == 1 and t.review is Review.AUTO},
        )

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> RunState:
        """Run until every task is settled or a stop was requested; return the run's state."""
        self._restore()
        while True:
            self._launch()
            self._pump_merges()
            if self._all_done():  # the last merges are checked too, even < regression_every
                self._maybe_check_regression(final=True)
            if self._settled() and not self._apply_reviews():  # (one decided as it ended)
                break
            message = self._next_message()
            self._fire_timers()
            if message is not None:
                self._handle(message)
        self.before_finish()
        return self._finish()

    def abandon(self) -> None:
        """Cancel every job still out (the loop itself failed): nothing may run on unseen."""
        jobs = [*self.active, *(j.id for j in self.train.jobs())]
        jobs += [self.guard.in_flight.job.id] if self.guard.in_flight is not None else []
        for job_id in jobs:
            self.executor.cancel(job_id, "the orchestrator failed")

    def stop(self, reason: str = "interrupted", state: RunState = RunState.INTERRUPTED) -> None:
        """Request a stop; safe from signal handlers and other threads."""
        self.inbox.put(Stop(reason, state))

    def review_decided(self) -> None:
        """A review decision was recorded from another process; safe from signal handlers."""
        self.inbox.put(ReviewWake())

    def _next_message(self) -> Message | None:
        """Block until a message arrives or the next timer is due."""
        due = [w for w in (self.alarms.next_at(), self._wake_at()) if w is not None]
        timeout = None if not due else max(0.0, min(due) - self.monotonic())
        try:
            return self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def _settled(self) -> bool:
        if self.active or self.train.verifying or self.guard.in_flight is not None:
            return False
        if self.stopping is not None:
            return True
        if self.train.queue:
            return False
        if self.soft_stop is not None:
            return True
        return self._idle()

    def _all_done(self) -> bool:
        """Nothing runs, waits, or is left to merge, and no stop was asked for."""
        busy = self.active or self.train.busy or self.guard.in_flight
        stopped = self.stopping is not None or self.soft_stop is not None
        return not busy and not stopped and self._idle() and not self.gate.awaiting

    def _idle(self) -> bool:
        """Nothing is ready and no retry is waiting for its back-off."""
        return not self.ready and not self.alarms.pending("retry")

    def _handle(self, message: Message) -> None:
        if isinstance(message, Stop):
            self._stop(message)
        elif isinstance(message, ReviewWake):
            self._apply_reviews()
        elif isinstance(message, Phase):
            self._phase(message)
        elif self.train.owns(message.job.id):
            self.train.verified(message)
            self._pump_merges()
        elif self.guard.in_flight is not None and message.job.id == self.guard.in_flight.job.id:
            self._regression_ended(message)
        else:
            self._attempt_ended(message)
            self.train.unless_queued(message.job.id)  # nothing on the head waits for it then

    # -- timers --------------------------------------------------------------------------

    def _fire_timers(self) -> None:
        for kind, task_id in self.alarms.due():
            if kind == "retry" and self.stopping is None:
                with self.ledger.tx() as tx:
                    self.life.retry_due(tx, task_id)
            elif kind == "deadline":
                self._stop(Stop("deadline reached", RunState.STOPPED))

    def _wake_at(self) -> float | None:
        """When a pool that ready work waits for opens again (breaker cool-down, rate limit)."""
        if not self.ready or self.stopping is not None or self.soft_stop is not None:
            return None
        if self._free_slots() < 1:
            return None  # every slot is taken: an attempt that ends wakes the loop
        wait_s = self.pools.wake_in(self.ready.pools())
        return None if wait_s is None else self.monotonic() + wait_s

    # -- starting attempts ---------------------------------------------------------------

    def _launch(self) -> None:
        if self.ledger.failed_fast is not None and self.stopping is None:
            self._stop(Stop(f"fail-fast: task {self.ledger.failed_fast} failed", RunState.FAILED))
        while self.stopping is None and self._free_slots() > 0:
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

    def _free_slots(self) -> int:
        """Slots neither an attempt nor a merge verification holds."""
        return self.max_parallel - len(self.active) - self.train.verifying

    def _run_budget_spent(self) -> bool:
        if self.soft_stop is None and (spent := self.budgets.run_spent()) is not None:
            self.soft_stop = spent
            with self.ledger.tx() as tx:
                tx.event(Kind.RUN, None, None, state=RunEvent.STOPPING, reason=self.soft_stop)
        return self.soft_stop is not None

    def _hold(self, task_id: str, reason: str) -> None:
        self.budgets.held.add(task_id)
        running = [j.candidate for j in self.active.values() if j.task_id == task_id]
        decision = self.rounds.hold(task_id, running)
        with self.ledger.tx() as tx:
            tx.state(task_id, TaskState.READY, reason=reason, said={"held": True})
            if decision is not None:
                self.life.decided(tx, decision)  # the loop merges the winner

    def _start_attempt(self, spec: TaskSpec, candidate: int) -> None:
        n = self.rounds.next_attempt(spec.id)
        agent = self.pools.profile_for(spec.id, self.gate.agent(spec.id, spec.agent_for(candidate)))
        now = self.clock()
        self.pools.started(agent)
        tip, budget = self.train.tip, self.budgets.task_left(spec.id)
        job = self.briefs.attempt(spec, n, candidate, agent, tip, budget)
        job = self.pipelines.shape(job, spec)  # a pipeline's stage: handoffs, where it starts
        job = self.gate.shape(job)  # after a change request: its text, the reviewed patch
        with self.ledger.tx() as tx:
            tx.add_attempt(started(job, agent, now, log_path(self.executor, job)))
            running = {"agent": agent, "candidate": candidate, "base": tip[:12]}
            tx.event(Kind.ATTEMPT, spec.id, n, state=AttemptState.RUNNING, **running)
            if self.tasks[spec.id].state is not TaskState.RUNNING:
                tx.state(spec.id, TaskState.RUNNING)
        self.active[job.id] = job
        self.executor.submit(job, self.inbox.put)

    # -- results -------------------------------------------------------------------------

    def _phase(self, phase: Phase) -> None:
        job = phase.job
        if job.id in self.active and phase.phase == "verifying":
            with self.ledger.tx() as tx:
                tx.event(Kind.ATTEMPT, job.task_id, job.attempt, state=AttemptEvent.VERIFYING)
                if self.tasks[job.task_id].state is TaskState.RUNNING:
                    tx.state(job.task_id, TaskState.VERIFYING)

    def _attempt_ended(self, outcome: Outcome) -> None:
        job = outcome.job
        if self.active.pop(job.id, None) is None or not isinstance(job, AttemptJob):
            return
        if job.profile is None:  # (never: an attempt submitted has its agent's profile)
            return
        outcome, dropped = outcome.bounded()  # nothing the agent said is kept unchecked
        self.budgets.spend(job.task_id, outcome.usage)
        if self.pools.ended(job.profile.name, job.task_id, outcome):
            with self.ledger.tx() as tx:
                tx.event(
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
        with self.ledger.tx() as tx:
            if dropped:  # ignored, and said so: an agent must not switch a budget off
                tx.event(Kind.USAGE_IGNORED, job.task_id, job.attempt, fields=list(dropped))
            tx.ended(outcome, state)
            if round_ is None:  # a loser still running when the winner was picked, or dropped
                tx.attempt(job.task_id, job.attempt, selection="cancelled")
                return
            if state is AttemptState.INTERRUPTED:
                tx.state(job.task_id, TaskState.READY, reason="interrupted")
                return
            if self._retry_unit(tx, outcome):
                return
            decision = self.rounds.record(outcome)
            if decision is not None:
                self.life.decided(tx, decision)
        self._pump_merges()

    def _retry_unit(self, tx: Writes, outcome: Outcome) -> bool:
        """Re-queue one candidate without a counted failure (rate limit, infra, within budget)."""
        job, failure = outcome.job, outcome.failure
        if failure is None or not self.free_retries.take(job.task_id, failure):
            return False
        self.rounds.requeue(job)
        # a rate limit's reset time, as the agent reported it (None: the profile backs off)
        reset = outcome.retry_after_s if failure is Failure.RATE_LIMITED else None
        requeued = {"failure": failure.value, "retry_after_s": reset}
        tx.event(Kind.ATTEMPT, job.task_id, job.attempt, state=AttemptEvent.REQUEUED, **requeued)
        return True

    # -- merging -------------------------------------------------------------------------

    def _pump_merges(self) -> None:
        """Land what passed, in the order it won; verify merged trees in the slots attempts
        leave free (or first, when a task waits for one of them to land)."""
        if not self.life.merge_awaited():
            self._launch()  # what waits in the queue is verified later, in larger batches
        while self.guard.in_flight is None and self.stopping is None:
            step = self.train.next(self.pipelines.lands, self._free_slots())
            if step is None:
                break
            self._merge_step(step)
        self._launch()

    def _merge_step(self, step: MergeStep) -> None:
        """Record what happened to a winner on its way to the branch, and act on it."""
        if isinstance(step, Merged) and step.commit is not None:
            self.guard.merged()
        with self.ledger.tx() as tx:
            self.life.merge_step(tx, step, stopping=self.stopping is not None)
        if isinstance(step, Merged):
            self._maybe_check_regression()
        elif isinstance(step, NeedsVerify):
            self.executor.submit(step.job, self.inbox.put)
        elif isinstance(step, BranchMoved) and not step.restored:
            self.train.follow()

    # -- keeping the run branch green ----------------------------------------------------

    def _maybe_check_regression(self, final: bool = False) -> None:
        job = None if self.stopping is not None else self.guard.check(self.train.tip, final)
        if job is None:
            return
        with self.ledger.tx() as tx:
            tx.event(Kind.REGRESSION, state=RegressionEvent.CHECKING, commit=job.base_commit)
        self.executor.submit(job, self.inbox.put)

    def _regression_ended(self, result: Outcome) -> None:
        step = self.guard.ended(result, stopping=self.stopping is not None)
        if step is None:
            return
        self.ledger.guarded(step)
        if step.probe is not None:
            self.executor.submit(step.probe, self.inbox.put)
        elif step.culprit is not None:
            self._rewind(step.culprit)
        else:
            self._pump_merges()

    def _rewind(self, culprit: Culprit) -> None:
        """Take the culprit's merge off the run branch, replay the merges after it, re-run it."""
        later = self.integrator.first_parent_commits(culprit.commit, self.train.tip)
        commits = {t: r.commit for t, r in self.tasks.items()}
        plan = plan_rewind(culprit, later, commits, self.graph.descendants)
        for _, task_id in plan.replay:
            if task_id not in self.train.parked:  # merged before a resume: rebuild from the store
                attempts = self.store.attempts(self.run_id, task_id)
                self.train.park(task_id, self.briefs.merged(attempts))
        parent = self.integrator.parent(culprit.commit)
        if plan.task_id is None or not self.train.rewind(parent):
            with self.ledger.tx() as tx:
                tx.event(Kind.REGRESSION, state=RegressionEvent.UNRESOLVED, commit=culprit.commit)
            self.guard.unresolved(self.train.tip)
            self._pump_merges()
            return
        with self.ledger.tx() as tx:
            why = f"first failing merge: {culprit.commit[:12]}"
            found = {"commit": culprit.commit, "probes": culprit.probes, "reason": why}
            tx.event(Kind.REGRESSION, plan.task_id, None, state=RegressionEvent.CULPRIT, **found)
            self.life.replay(tx, plan)
        self.guard.rewound()  # check the new tip too
        self._pump_merges()

    # -- review gates --------------------------------------------------------------------

    def _apply_reviews(self) -> bool:
        """Act on the decisions recorded for winners that await review; whether there were."""
        if self.stopping is not None or not self.gate.awaiting:
            return False
        states = {t: r.state for t, r in self.tasks.items()}
        found = self.gate.applicable(self.store.decisions(self.run_id), states)
        for stored in found:
            with self.ledger.tx() as tx:
                self.life.reviewed(tx, stored, self.clock())
        if found:
            self._pump_merges()
        return bool(found)

    def _cancel(self, task_id: str, reason: str) -> None:
        """Cancel the task's running attempts."""
        for job in list(self.active.values()):
            if job.task_id == task_id and job.profile is not None:
                self.executor.cancel(job.id, reason)

    # -- stopping and finishing ----------------------------------------------------------

    def _stop(self, stop: Stop) -> None:
        if self.stopping is not None:
            return
        self.stopping = stop
        with self.ledger.tx() as tx:
            tx.event(Kind.RUN, None, None, state=RunEvent.STOPPING, reason=stop.reason)
            # Verified patches waiting to merge stay ``merging``: a resume merges them from the
            # saved patch instead of running their agents again.
            halted = self.train.halt()
        for job_id in [*self.active, *(j.id for j in halted)]:
            self.executor.cancel(job_id, stop.reason)
        if self.guard.in_flight is not None:
            self.executor.cancel(self.guard.in_flight.job.id, stop.reason)

    def _finish(self) -> RunState:
        moved = self.train.branch_tip()
        if moved != self.train.tip and self.integrator.reset(self.train.tip, moved):
            with self.ledger.tx() as tx:
                tx.event(Kind.MERGE, state=MergeEvent.BRANCH_MOVED, found=moved, restored=True)
        stop = self.stopping
        stopped = None if stop is None else (stop.state, stop.reason)
        with self.ledger.tx() as tx:
            state, reason = tx.settle(stopped, self.soft_stop, self.budgets.held)
            tx.run(state=state, finished_at=self.clock(), reason=reason)
            spent = {"tip": self.train.tip, "cost_usd": round(self.budgets.total, 6) or None}
            tx.event(Kind.RUN, None, None, state=state.value, reason=reason, **spent)
        return state

    # -- state ---------------------------------------------------------------------------

    def _restore(self) -> None:
        """Build the in-memory view from the store: a fresh run, or one being resumed."""
        self.train.follow(self.run_record.base_commit)  # (resume put it where the store says)
        self.executor.stacker = self.train.heads  # attempts verified where they will land
        self.ledger.load()
        attempts = self.store.attempts(self.run_id)
        for a in attempts:
            self.rounds.seen(a.task_id, a.n)
            self.budgets.spend(a.task_id, checked_usage(a.usage)[0])
        won = [a for a in attempts if a.state is AttemptState.PASSED and a.won and a.patch_commit]
        passed = {a.task_id: a for a in won}  # a round's winner (never a loser) not merged yet
        done = {t for t, r in self.tasks.items() if r.state is TaskState.DONE}
        done |= self.pipelines.passed_on(self.tasks)  # escalated shots release their stages
        self.life.count_waiting(done.__contains__)
        self.gate.restore(self.store.decisions(self.run_id), attempts)
        with self.ledger.tx() as tx:
            tx.run(state=RunState.RUNNING, finished_at=None, reason="")
            self.life.restore(tx, passed)
            self.guard.resumed(sum(bool(r.commit) for r in self.tasks.values()))
            if self.plan.run.deadline_s is not None:
                left = self.run_record.created_at + self.plan.run.deadline_s - self.clock()
                self.alarms.set(max(0.0, left), "deadline")
        while not self.inbox.empty():  # a stop asked in start-up (Ctrl-C): before any launch
            self._handle(self.inbox.get())
        self._apply_reviews()  # decided while no orchestrator ran
        self._pump_merges()
