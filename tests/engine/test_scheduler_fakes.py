"""The scheduler built directly on the in-package fakes: the inline executor, the in-memory
integrator and an in-memory store. No git, no process, no file: what is left is the loop."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchardist.clocks import WallTimers
from orchardist.engine.hooks import Hook, Hooks
from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.scheduler import Scheduler
from orchardist.executors import Job, Notify, Outcome, Phase
from orchardist.executors.inline import InlineExecutor
from orchardist.specs import Plan, Review, RunConfig, TaskSpec
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.state.eventlog import Event
from orchardist.state.records import (
    AttemptState,
    ReviewDecision,
    Run,
    RunState,
    StoredDecision,
    TaskRecord,
    TaskState,
    Verdict,
)
from orchardist.state.store import Store

BASE = "b" * 40


def diamond() -> Plan:
    """a -> (b, c) -> d, one retry each; the profile never runs (the inline executor stands in)."""
    deps = {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}
    tasks = tuple(
        TaskSpec(id=t, title=f"task {t}", prompt=t, agent="fake", index=i, depends_on=d, retries=1)
        for i, (t, d) in enumerate(deps.items())
    )
    profile = AgentProfile("fake", "shell", options={"command": "false"})
    run = RunConfig(max_parallel=2, retry_backoff_s=0.01)
    return Plan(
        Path("/nonexistent/plan.toml"), Path("/nonexistent"), run, {"fake": profile}, tasks, ""
    )


def test_a_diamond_runs_to_done_on_the_fakes_retrying_a_failure_in_dependency_order() -> None:
    # Given: a run of the diamond in an in-memory store; b's first attempt fails
    plan = diamond()
    store = Store.in_memory()
    run = Run("r1", "plan.toml", "", "/nonexistent", BASE, "orchardist/r1", RunState.RUNNING, 0.0)
    with store.transaction() as tx:
        tx.add_run(run)
        for task in plan.tasks:
            tx.add_task(TaskRecord(run.id, task.id, TaskState.PENDING, task.index))
    timers = WallTimers()
    executor = InlineExecutor(timers, failures={"b": 1})
    integrator = MemoryIntegrator(BASE)
    # When: the scheduler drives it
    try:
        state = Scheduler(plan, run, store, executor, integrator).run()
    finally:
        executor.close()
        timers.close()
    # Then: done, every task merged once, b after its retry
    assert state is RunState.DONE
    assert {t.task_id: t.state for t in store.tasks(run.id)} == dict.fromkeys(
        "abcd", TaskState.DONE
    )
    attempts = [(a.task_id, a.n, a.state) for a in store.attempts(run.id)]
    assert ("b", 1, AttemptState.FAILED) in attempts and ("b", 2, AttemptState.MERGED) in attempts
    assert sorted(a.task_id for a in store.attempts(run.id) if a.won) == ["a", "b", "c", "d"]
    # And: the branch holds one commit per task, each after what it depends on
    landed = integrator.first_parent_commits(BASE, integrator.tip())
    order = [integrator.messages[c].splitlines()[0].removeprefix("task ") for c in landed]
    assert sorted(order) == ["a", "b", "c", "d"]
    assert order[0] == "a" and order[-1] == "d"
    # And: each task's commit is the one on the branch
    assert {t.commit for t in store.tasks(run.id)} == set(landed)
    store.close()


def one_task_run(spec: TaskSpec, run_config: RunConfig) -> tuple[Plan, Run, Store]:
    """A plan of ``spec`` alone and its run, recorded in an in-memory store."""
    profile = AgentProfile("fake", "shell", options={"command": "false"})
    plan = Plan(
        Path("/nonexistent/plan.toml"), Path("/nonexistent"), run_config, {"fake": profile},
        (spec,), "",
    )  # fmt: skip
    store = Store.in_memory()
    run = Run("r1", "plan.toml", "", "/nonexistent", BASE, "orchardist/r1", RunState.RUNNING, 0.0)
    with store.transaction() as tx:
        tx.add_run(run)
        tx.add_task(TaskRecord(run.id, spec.id, TaskState.PENDING, spec.index))
    return plan, run, store


def test_a_task_without_a_passing_candidate_is_retried_with_fresh_candidates_then_failed() -> None:
    # Given: a task of two candidates and one retry, whose every attempt fails verification
    spec = TaskSpec(
        id="feature", title="feature", prompt="p", agent="fake", index=0, candidates=2, retries=1
    )
    plan, run, store = one_task_run(spec, RunConfig(max_parallel=2, retry_backoff_s=0.01))
    timers = WallTimers()
    executor = InlineExecutor(timers, failures={"feature": 4})
    integrator = MemoryIntegrator(BASE)
    # When: the scheduler drives it
    try:
        state = Scheduler(plan, run, store, executor, integrator).run()
    finally:
        executor.close()
        timers.close()
    # Then: two rounds of two candidates, the second started after the first ended, then failed
    assert state is RunState.FAILED
    (task,) = store.tasks(run.id)
    assert task.state is TaskState.FAILED
    assert task.reason.startswith("verify_failed: no candidate passed (2 tried)"), task.reason
    assert task.failures == 2  # one per round
    attempts = store.attempts(run.id)
    assert [a.n for a in attempts] == [1, 2, 3, 4]
    assert all(a.state is AttemptState.FAILED and not a.won for a in attempts)
    assert [sorted(a.candidate for a in r) for r in (attempts[:2], attempts[2:])] == [[0, 1]] * 2
    events = store.events(run.id)
    seq = {(e.attempt, e.data.get("state")): e.seq for e in events if e.kind == "attempt"}
    assert min(seq[n, "running"] for n in (3, 4)) > max(seq[n, "failed"] for n in (1, 2))
    retries = [e.data["retry"] for e in events if e.kind == "task" and "retry" in e.data]
    assert retries == [1]
    # And: nothing reached the branch
    assert integrator.tip() == BASE
    store.close()


def test_retries_back_off_between_attempts_and_end_in_failure_when_spent() -> None:
    # Given: one task that passes on its third attempt (2 retries), one that always fails (1)
    tasks = (
        TaskSpec(id="third_time", title="t", prompt="p", agent="fake", index=0, retries=2),
        TaskSpec(id="hopeless", title="h", prompt="p", agent="fake", index=1, retries=1),
    )
    plan, run, store = one_task_run(tasks[0], RunConfig(max_parallel=2, retry_backoff_s=0.1))
    plan = Plan(plan.path, plan.repo, plan.run, plan.agents, tasks, "")
    with store.transaction() as tx:
        tx.add_task(TaskRecord(run.id, "hopeless", TaskState.PENDING, 1))
    timers = WallTimers()
    executor = InlineExecutor(timers, failures={"third_time": 2, "hopeless": 99})
    # When: the scheduler drives it
    try:
        state = Scheduler(plan, run, store, executor, MemoryIntegrator(BASE)).run()
    finally:
        executor.close()
        timers.close()
    # Then: third_time merged on its third attempt, hopeless failed after two
    assert state is RunState.FAILED
    assert {t.task_id: t.state for t in store.tasks(run.id)} == {
        "third_time": TaskState.DONE,
        "hopeless": TaskState.FAILED,
    }
    states = [a.state for a in store.attempts(run.id, "third_time")]
    assert states == [AttemptState.FAILED, AttemptState.FAILED, AttemptState.MERGED]
    assert len(store.attempts(run.id, "hopeless")) == 2
    # And: each retry waited its back-off, 0.1 s doubling per failure, jittered into [half, all]
    retries = [
        e.data
        for e in store.events(run.id)
        if e.kind == "task" and e.task_id == "third_time" and "retry" in e.data
    ]
    assert [r["retry"] for r in retries] == [1, 2]
    assert 0.05 <= retries[0]["retry_in_s"] <= 0.1
    assert 0.1 <= retries[1]["retry_in_s"] <= 0.2
    attempts = store.attempts(run.id, "third_time")
    for before, after, retry in zip(attempts, attempts[1:], retries, strict=False):
        assert before.ended_at is not None
        assert after.started_at - before.ended_at >= retry["retry_in_s"] - 0.01
    store.close()


class FullJitter(random.Random):
    """The jitter at its top: every back-off is its whole delay."""

    def random(self) -> float:
        return 1.0


class StopAtRetry(Hook):
    """Stops the run once a retry is scheduled, keeping the delay it was given."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.retry_in_s: list[float] = []

    def on_event(self, event: Event) -> None:
        if event.kind == "task" and "retry_in_s" in event.data and self.scheduler is not None:
            self.retry_in_s.append(event.data["retry_in_s"])
            self.scheduler.stop("the test saw the retry")


def test_a_retry_after_many_failures_waits_at_most_five_minutes() -> None:
    # Given: a task that failed 20 times already (a resumed run) and has retries left, with
    # a 1 s back-off: doubling per failure, uncapped that would be 2^20 s, about 12 days
    spec = TaskSpec(id="stubborn", title="s", prompt="p", agent="fake", index=0, retries=30)
    plan, run, store = one_task_run(spec, RunConfig(max_parallel=1, retry_backoff_s=1.0))
    with store.transaction() as tx:
        tx.set_task(run.id, "stubborn", failures=20)
    timers = WallTimers()
    executor = InlineExecutor(timers, failures={"stubborn": 1})
    hook = StopAtRetry()
    scheduler = Scheduler(plan, run, store, executor, MemoryIntegrator(BASE), hooks=Hooks([hook]),
                          rng=FullJitter(0))  # fmt: skip
    hook.scheduler = scheduler
    # When: its next attempt fails too
    try:
        state = scheduler.run()
    finally:
        executor.close()
        timers.close()
    # Then: the retry is due after the README's cap, 5 minutes (the jitter at its top)
    assert state is RunState.INTERRUPTED
    assert hook.retry_in_s == [300.0]
    assert store.tasks(run.id)[0].failures == 21
    store.close()


class InfraErrors(InlineExecutor):
    """The inline executor whose failing attempts fail for the infrastructure (git, disk), not
    for their patch: what a worktree that cannot be made reports."""

    def submit(self, job: Job, notify: Notify) -> None:
        def infra(message: Phase | Outcome) -> None:
            if isinstance(message, Outcome) and message.failure is Failure.VERIFY_FAILED:
                message = replace(message, failure=Failure.INFRA_ERROR, verdict="",
                                  detail="git worktree add failed")  # fmt: skip
            notify(message)

        super().submit(job, infra)


def test_a_task_s_first_two_infra_errors_are_requeued_free_and_the_third_counts() -> None:
    # Given: two tasks without retries; "two" meets two infra errors, "three" three
    tasks = (
        TaskSpec(id="two", title="two", prompt="p", agent="fake", index=0, retries=0),
        TaskSpec(id="three", title="three", prompt="p", agent="fake", index=1, retries=0),
    )
    plan, run, store = one_task_run(tasks[0], RunConfig(max_parallel=2, retry_backoff_s=0.01))
    plan = Plan(plan.path, plan.repo, plan.run, plan.agents, tasks, "")
    with store.transaction() as tx:
        tx.add_task(TaskRecord(run.id, "three", TaskState.PENDING, 1))
    timers = WallTimers()
    executor = InfraErrors(timers, failures={"two": 2, "three": 3})
    # When: the scheduler drives them
    try:
        state = Scheduler(plan, run, store, executor, MemoryIntegrator(BASE)).run()
    finally:
        executor.close()
        timers.close()
    # Then: "two" merged on its third attempt, no failure counted; "three" failed on its third
    # infra error, the first to count against its (zero) retries
    assert state is RunState.FAILED
    tasks_by_id = {t.task_id: t for t in store.tasks(run.id)}
    assert (tasks_by_id["two"].state, tasks_by_id["two"].failures) == (TaskState.DONE, 0)
    assert [a.state for a in store.attempts(run.id, "two")][-1] is AttemptState.MERGED
    assert len(store.attempts(run.id, "two")) == 3
    assert tasks_by_id["three"].state is TaskState.FAILED
    assert tasks_by_id["three"].reason == "infra_error: git worktree add failed"
    assert len(store.attempts(run.id, "three")) == 3
    requeued = [
        e.task_id
        for e in store.events(run.id)
        if e.kind == "attempt" and e.data.get("state") == "requeued"
    ]
    assert sorted(requeued) == ["three", "three", "two", "two"]
    store.close()


def run_on_fakes(
    tasks: tuple[TaskSpec, ...],
    profiles: dict[str, AgentProfile],
    run_config: RunConfig,
    failures: dict[str, int] | None = None,
    durations_s: dict[str, float] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[RunState, Store, Run]:
    """Drive ``tasks`` to their end on the inline executor (wall timers, jobs of no duration),
    the in-memory integrator and an in-memory store; ``monotonic`` is the loop's clock."""
    plan = Plan(
        Path("/nonexistent/plan.toml"), Path("/nonexistent"), run_config, profiles, tasks, ""
    )
    store = Store.in_memory()
    run = Run("r1", "plan.toml", "", "/nonexistent", BASE, "orchardist/r1", RunState.RUNNING, 0.0)
    with store.transaction() as tx:
        tx.add_run(run)
        for task in tasks:
            tx.add_task(TaskRecord(run.id, task.id, TaskState.PENDING, task.index))
    timers = WallTimers()
    executor = InlineExecutor(timers, durations_s=durations_s, failures=failures)
    try:
        integrator = MemoryIntegrator(BASE)
        state = Scheduler(plan, run, store, executor, integrator, monotonic=monotonic).run()
    finally:
        executor.close()
        timers.close()
    return state, store, run


def test_a_profile_launch_interval_spaces_its_attempts() -> None:
    # Given: three independent tasks on a profile that launches at most one every 0.3 s
    paced = AgentProfile("paced", "shell", launch_interval_s=0.3, options={"command": "true"})
    tasks = tuple(
        TaskSpec(id=t, title=t, prompt=t, agent="paced", index=i) for i, t in enumerate("abc")
    )
    # When
    state, store, run = run_on_fakes(tasks, {"paced": paced}, RunConfig(max_parallel=3))
    # Then: though three slots were free, the starts are 0.3 s apart
    assert state is RunState.DONE
    starts = sorted(a.started_at for a in store.attempts(run.id))
    assert len(starts) == 3
    assert all(later - earlier >= 0.29 for earlier, later in itertools.pairwise(starts))


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant (an end sorts before a start)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def test_a_profiles_max_parallel_is_respected_beside_others() -> None:
    # Given: three tasks on a profile limited to one at a time, two on an unlimited one, a run
    # of four slots; every attempt takes 0.2 s
    solo = AgentProfile("solo", "shell", max_parallel=1, options={"command": "true"})
    free = AgentProfile("free", "shell", options={"command": "true"})
    names = {"s1": "solo", "s2": "solo", "s3": "solo", "f1": "free", "f2": "free"}
    tasks = tuple(
        TaskSpec(id=t, title=t, prompt=t, agent=a, index=i)
        for i, (t, a) in enumerate(names.items())
    )
    # When
    state, store, run = run_on_fakes(
        tasks,
        {"solo": solo, "free": free},
        RunConfig(max_parallel=4),
        durations_s=dict.fromkeys(names, 0.2),
    )
    # Then: one solo task at a time, beside both free ones
    assert state is RunState.DONE
    spans = {a.task_id: (a.started_at, a.ended_at or 0.0) for a in store.attempts(run.id)}
    assert max_overlap([spans[t] for t in ("s1", "s2", "s3")]) == 1
    assert max_overlap([spans[t] for t in ("f1", "f2")]) == 2
    assert max_overlap(list(spans.values())) == 3
    store.close()


class CountingClock:
    """The wall clock, counting how often it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return time.monotonic()


def test_a_run_with_every_slot_taken_sleeps_until_an_attempt_ends() -> None:
    # Given: two tasks on an open pool, one slot, attempts of 0.5 s each
    fake = AgentProfile("fake", "shell", options={"command": "true"})
    tasks = tuple(
        TaskSpec(id=t, title=t, prompt=t, agent="fake", index=i) for i, t in enumerate("ab")
    )
    clock = CountingClock()
    # When: the scheduler drives them, b waiting for a's slot
    state, store, _ = run_on_fakes(
        tasks,
        {"fake": fake},
        RunConfig(max_parallel=1),
        durations_s={"a": 0.5, "b": 0.5},
        monotonic=clock,
    )
    # Then: both ran, and the loop slept while each attempt ran rather than spinning (a
    # spinning loop reads its clock hundreds of thousands of times a second)
    assert state is RunState.DONE
    assert clock.reads < 100, clock.reads
    store.close()


# -- review gates ------------------------------------------------------------------------------


def reviewed_diamond() -> Plan:
    """The diamond, with a's winner waiting for a person."""
    plan = diamond()
    tasks = tuple(replace(t, review=Review.HUMAN) if t.id == "a" else t for t in plan.tasks)
    return replace(plan, tasks=tasks)


def drive(
    plan: Plan, run: Run, store: Store, integrator: MemoryIntegrator, *hooks: Hook
) -> RunState:
    timers = WallTimers()
    executor = InlineExecutor(timers)
    scheduler = Scheduler(plan, run, store, executor, integrator, Hooks(list(hooks)))
    for hook in hooks:
        if isinstance(hook, ApproveOnRequest):
            hook.scheduler = scheduler
    try:
        return scheduler.run()
    finally:
        executor.close()
        timers.close()


def approve(store: Store, task_id: str, n: int) -> None:
    decision = ReviewDecision(Verdict.APPROVE, who="ann")
    with store.transaction() as tx:
        assert tx.add_decision(StoredDecision("r1", task_id, n, decision, 1.0))


def test_only_reviews_left_end_the_run_awaiting_review_and_the_approval_is_acted_on_after() -> None:
    # Given: the diamond whose first task is reviewed
    plan = reviewed_diamond()
    _, run, store = one_task_run(plan.tasks[0], plan.run)
    with store.transaction() as tx:
        for task in plan.tasks[1:]:
            tx.add_task(TaskRecord(run.id, task.id, TaskState.PENDING, task.index))
    integrator = MemoryIntegrator(BASE)
    # When: the scheduler drives it
    state = drive(plan, run, store, integrator)
    # Then: nothing is left but a's review: the run ends awaiting it, nothing merged
    assert state is RunState.AWAITING_REVIEW
    assert {t.task_id: t.state for t in store.tasks(run.id)} == {
        "a": TaskState.AWAITING_REVIEW,
        "b": TaskState.PENDING,
        "c": TaskState.PENDING,
        "d": TaskState.PENDING,
    }
    assert integrator.tip() == BASE
    # When: it is approved while no scheduler runs, and a new one resumes the run
    approve(store, "a", 1)
    state = drive(plan, store.run(run.id) or run, store, integrator)
    # Then: a merged first, once, and the others after it
    assert state is RunState.DONE
    landed = integrator.first_parent_commits(BASE, integrator.tip())
    order = [integrator.messages[c].splitlines()[0].removeprefix("task ") for c in landed]
    assert sorted(order) == ["a", "b", "c", "d"] and order[0] == "a"


class ApproveOnRequest(Hook):
    """Approves a task as soon as it awaits review, from "another process": the store, then a
    wake-up of the running scheduler."""

    scheduler: Scheduler

    def on_event(self, event: Event) -> None:
        if event.kind == "review" and event.data.get("state") == "review_requested":
            approve(self.scheduler.store, str(event.task_id), event.attempt or 0)
            self.scheduler.review_decided()


def test_a_decision_recorded_while_the_scheduler_runs_is_acted_on_without_a_restart() -> None:
    plan = reviewed_diamond()
    _, run, store = one_task_run(plan.tasks[0], plan.run)
    with store.transaction() as tx:
        for task in plan.tasks[1:]:
            tx.add_task(TaskRecord(run.id, task.id, TaskState.PENDING, task.index))

    state = drive(plan, run, store, MemoryIntegrator(BASE), ApproveOnRequest())

    assert state is RunState.DONE
    states = [e.data["state"] for e in store.events(run.id) if e.kind == "review"]
    assert states == ["review_requested", "applied"]


class Counting(InlineExecutor):
    """The inline executor that remembers the most jobs it held at once; merge verifications
    take ``verify_s`` (an attempt takes its task's duration)."""

    def __init__(self, durations_s: dict[str, float], verify_s: float) -> None:
        super().__init__(WallTimers(), durations_s)
        self.verify_s, self.held, self.most, self.merges = verify_s, 0, 0, 0

    def submit(self, job: Job, notify: Notify) -> None:
        with self._lock:
            self.held += 1
            self.most = max(self.most, self.held)
            self.merges += job.purpose == "merge"

        def ended(message: Phase | Outcome) -> None:
            if isinstance(message, Outcome):
                with self._lock:
                    self.held -= 1
            notify(message)

        if job.purpose != "merge":
            super().submit(job, ended)
            return
        started = self.clock.now()
        with self._lock:
            self._pending[job.id] = (job, ended, started)
        self.clock.call_at(started + self.verify_s, lambda: self._finish(job.id))


def test_merge_verifications_hold_slots_and_wait_to_be_batched_while_attempts_want_them() -> None:
    # Given: six independent tasks, two slots; merged trees take as long to verify as attempts
    tasks = tuple(
        TaskSpec(id=f"t{i}", title=f"t{i}", prompt="p", agent="fake", index=i, verify=("check",))
        for i in range(6)
    )
    profile = AgentProfile("fake", "shell", options={"command": "false"})
    plan = Plan(
        Path("/nonexistent/plan.toml"), Path("/nonexistent"), RunConfig(max_parallel=2),
        {"fake": profile}, tasks, "",
    )  # fmt: skip
    store = Store.in_memory()
    run = Run("r1", "plan.toml", "", "/nonexistent", BASE, "orchardist/r1", RunState.RUNNING, 0.0)
    with store.transaction() as tx:
        tx.add_run(run)
        for task in plan.tasks:
            tx.add_task(TaskRecord(run.id, task.id, TaskState.PENDING, task.index))
    executor = Counting({t.id: 0.05 for t in tasks}, verify_s=0.05)
    integrator = MemoryIntegrator(BASE)
    # When: the scheduler drives it
    try:
        state = Scheduler(plan, run, store, executor, integrator).run()
    finally:
        executor.close()
    # Then: all landed, never more than two jobs at once (merge verifications count)
    assert state is RunState.DONE
    assert len(integrator.first_parent_commits(BASE, integrator.tip())) == 6
    assert executor.most == 2
    # And: the merged trees were verified in batches, not one by one (the first landed as is)
    assert 1 <= executor.merges < 5
    store.close()
