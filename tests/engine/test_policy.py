"""Failure policy: back-off, circuit breakers, rate gates, fallbacks, retries and budgets.

The policy objects take the time as an argument, so hours of cool-down pass here in a line.
Through whole runs, the scheduler's wall clock is one the test moves forward; the only real
waiting is for agents that must be cut off by a deadline.
"""

from __future__ import annotations

import random
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchardist import RunState
from orchardist.engine.hooks import Hook, Hooks
from orchardist.engine.policy import Backoff, BreakerState, CircuitBreaker, FreeRetries, RateGate
from orchardist.engine.scheduler import Scheduler
from orchardist.state.agentrecords import Failure
from orchardist.state.eventlog import Event
from run_support import only_run, orchardist, status
from support import Finished, toml_str, write_plan

HOUR_S = 3600.0
RunPlan = Callable[..., Finished]


class Fixed(random.Random):
    """A Random whose ``random()`` is always the same value: the jitter at its bounds."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


# -- back-off --------------------------------------------------------------------------------


def test_backoff_doubles_per_failure_with_jitter_between_half_and_all_of_the_delay() -> None:
    backoff = Backoff(base_s=2.0, cap_s=1000.0)
    for failures, full in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0)]:
        assert backoff.delay(failures, Fixed(0.0)) == full / 2
        assert backoff.delay(failures, Fixed(0.999999)) == pytest.approx(full, rel=1e-5)
        draws = [backoff.delay(failures, random.Random(seed)) for seed in range(200)]
        assert all(full / 2 <= d <= full for d in draws)
        assert min(draws) < full * 0.6 and max(draws) > full * 0.9  # the jitter spans its range


def test_backoff_is_capped_and_jitters_below_the_cap() -> None:
    backoff = Backoff(base_s=1.0, cap_s=60.0)
    assert backoff.delay(50, Fixed(0.999999)) == pytest.approx(60.0, rel=1e-5)
    assert backoff.delay(50, Fixed(0.0)) == 30.0
    assert backoff.delay(1000, Fixed(0.0)) == 30.0


def test_backoff_stays_at_the_cap_however_many_failures() -> None:
    assert Backoff(base_s=1.0, cap_s=60.0).delay(1025, Fixed(0.0)) == 30.0


def test_backoff_is_zero_before_any_failure_or_when_disabled() -> None:
    assert Backoff(base_s=1.0).delay(0, random.Random(1)) == 0.0
    assert Backoff(base_s=0.0).delay(5, random.Random(1)) == 0.0


def test_backoff_with_a_seeded_random_is_reproducible() -> None:
    backoff = Backoff(base_s=0.5, cap_s=30.0)
    first = [backoff.delay(n, random.Random(42)) for n in range(1, 10)]
    again = [backoff.delay(n, random.Random(42)) for n in range(1, 10)]
    assert first == again


# -- circuit breaker -------------------------------------------------------------------------


def test_a_breaker_opens_after_k_consecutive_failures_and_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown_s=2 * HOUR_S)
    t = 1_000.0
    assert breaker.failed(t) is False
    assert breaker.failed(t + 1) is False
    breaker.succeeded()  # not consecutive any more
    assert breaker.failed(t + 2) is False
    assert breaker.failed(t + 3) is False
    assert breaker.state(t + 3) is BreakerState.CLOSED and breaker.allows(t + 3)

    assert breaker.failed(t + 4) is True  # the third in a row opens it
    assert breaker.state(t + 4) is BreakerState.OPEN
    assert not breaker.allows(t + 4)
    assert breaker.reopens_at() == t + 4 + 2 * HOUR_S


def test_an_open_breaker_waits_out_its_cooldown_then_lets_exactly_one_probe_through() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown_s=2 * HOUR_S)
    opened = 5_000.0
    assert breaker.failed(opened) is True
    assert not breaker.allows(opened + 2 * HOUR_S - 0.001)
    # a straggler that started before it opened fails late: the cool-down is not extended
    assert breaker.failed(opened + HOUR_S) is False
    assert breaker.reopens_at() == opened + 2 * HOUR_S

    probe_at = opened + 2 * HOUR_S
    assert breaker.state(probe_at) is BreakerState.HALF_OPEN
    assert breaker.allows(probe_at)
    breaker.started(probe_at)
    assert not breaker.allows(probe_at)  # one probe at a time
    assert not breaker.allows(probe_at + 10 * HOUR_S)


def test_a_successful_probe_closes_the_breaker() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown_s=HOUR_S)
    breaker.failed(0.0)
    breaker.failed(1.0)
    breaker.started(1.0 + HOUR_S)

    breaker.succeeded()

    assert breaker.state(1.0 + HOUR_S) is BreakerState.CLOSED
    assert breaker.allows(1.0 + HOUR_S)
    assert breaker.reopens_at() is None
    assert breaker.failed(2.0 + HOUR_S) is False  # the count starts again from zero


def test_a_failed_probe_reopens_the_breaker_for_a_full_cooldown() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown_s=HOUR_S)
    breaker.failed(0.0)
    breaker.failed(1.0)
    probe_at = 1.0 + HOUR_S
    breaker.started(probe_at)

    assert breaker.failed(probe_at + 30) is True  # one failure is enough after a probe

    assert breaker.state(probe_at + 31) is BreakerState.OPEN
    assert breaker.reopens_at() == probe_at + 30 + HOUR_S
    assert breaker.state(probe_at + 30 + HOUR_S) is BreakerState.HALF_OPEN
    assert breaker.allows(probe_at + 30 + HOUR_S)


def test_starting_an_attempt_while_closed_is_not_a_probe() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown_s=60.0)
    breaker.started(0.0)
    breaker.started(0.0)
    assert breaker.allows(0.0)
    assert breaker.failed(1.0) is False  # an ordinary failure, not a failed probe


def test_a_breaker_with_threshold_zero_never_opens() -> None:
    breaker = CircuitBreaker(threshold=0, cooldown_s=HOUR_S)
    assert not any(breaker.failed(float(t)) for t in range(100))
    assert breaker.state(100.0) is BreakerState.CLOSED and breaker.allows(100.0)


# -- rate gate -------------------------------------------------------------------------------


def test_a_rate_gate_spaces_launches_by_its_interval() -> None:
    gate = RateGate(interval_s=1.5)
    assert gate.allows(100.0)
    gate.launched(100.0)
    assert not gate.allows(101.0)
    assert gate.allows(101.5)
    gate.launched(101.5)
    assert gate.next_at == 103.0


def test_a_rate_limit_with_retry_after_pauses_launches_until_the_reset() -> None:
    gate = RateGate()
    assert gate.rate_limited(100.0, retry_after_s=30.0, rng=random.Random(1)) == 130.0
    assert not gate.allows(129.9)
    assert gate.allows(130.0)
    # a shorter reset reported later does not bring the pause forward
    assert gate.rate_limited(101.0, retry_after_s=5.0, rng=random.Random(1)) == 130.0


def test_a_retry_after_of_zero_is_not_taken_at_its_word() -> None:
    gate = RateGate(backoff=Backoff(base_s=10.0, cap_s=1000.0))
    assert gate.rate_limited(0.0, retry_after_s=0.0, rng=Fixed(0.0)) == 5.0


def test_rate_limits_without_retry_after_back_off_and_a_success_resets_the_back_off() -> None:
    gate = RateGate(backoff=Backoff(base_s=10.0, cap_s=1000.0))
    first = gate.rate_limited(0.0, None, Fixed(0.0))
    assert first == 5.0  # 10 s halved by the jitter floor
    second = gate.rate_limited(first, None, Fixed(0.0))
    assert second == first + 10.0  # 20 s, halved
    gate.succeeded()
    assert gate.rate_limited(100.0, None, Fixed(0.0)) == 105.0  # back to the first step


# -- through whole runs ----------------------------------------------------------------------


class MovableClock:
    """Wall time plus an offset the test moves forward (hours in an instant)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s

    def monotonic(self) -> float:
        """The monotonic clock, moved by the same offset."""
        return time.monotonic() + self.offset_s


class OnEvent(Hook):
    """Calls ``then`` on the first event matching ``kind`` and ``state``."""

    def __init__(self, kind: str, state: str, then: Callable[[], object]) -> None:
        self.kind, self.state, self.then, self.fired = kind, state, then, False

    def on_event(self, event: Event) -> None:
        if not self.fired and event.kind == self.kind and event.data.get("state") == self.state:
            self.fired = True
            self.then()


class OnTaskDone(Hook):
    """Calls ``then`` when task ``task_id`` is done."""

    def __init__(self, task_id: str, then: Callable[[], object]) -> None:
        self.task_id, self.then = task_id, then

    def on_event(self, event: Event) -> None:
        done = event.kind == "task" and event.data.get("state") == "done"
        if done and event.task_id == self.task_id:
            self.then()


def drive_bounded(run_plan: RunPlan, plan: Path, limit_s: float = 60.0, **kwargs: Any) -> Finished:
    """Run in a thread; stop it if it outlives ``limit_s`` (a wait the test did not expect).

    When the limit hits before the run has built its scheduler there is nothing to stop: the
    test fails with the stack of the thread where it waits (the thread is a daemon, so a stuck
    one does not hold the worker)."""
    schedulers: list[Scheduler] = []
    box: list[Finished | BaseException] = []

    def drive() -> None:
        try:
            box.append(run_plan(plan, on_scheduler=schedulers.append, **kwargs))
        except BaseException as exc:
            box.append(exc)

    runner = threading.Thread(target=drive, name="drive_bounded", daemon=True)
    runner.start()
    runner.join(limit_s)
    if runner.is_alive():
        if not schedulers:
            pytest.fail(f"no scheduler after {limit_s:.0f}s; the run waits in:\n{stacks()}")
        schedulers[0].stop("the test's time limit")
        runner.join()
    (result,) = box
    if isinstance(result, BaseException):
        raise result
    return result


def stacks() -> str:
    """Every thread's stack, the way faulthandler would print them, named."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(
        f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )


def agents_of(run: Finished, task_id: str) -> list[str]:
    return [a["agent"] for a in run.task(task_id)["attempts"]]


def test_an_open_breaker_sends_later_tasks_to_the_fallback_profile(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a profile that always fails, opening after 2 failures, with a working fallback
    plan = write_plan(
        repo,
        """
        [run]
        max_parallel = 1
        retry_backoff = "0.05s"

        [agents.flaky]
        kind = "scripted"
        circuit_breaker = 2
        cooldown = "1h"
        fallback = "steady"
        script = { "*" = { exit = 1 } }

        [agents.steady]
        kind = "scripted"
        [agents.steady.script]
        t1 = { write = { "t1.txt" = "1\\n" } }
        t2 = { write = { "t2.txt" = "2\\n" } }
        t3 = { write = { "t3.txt" = "3\\n" } }

        [[task]]
        id = "t1"
        agent = "flaky"
        retries = 1

        [[task]]
        id = "t2"
        agent = "flaky"
        retries = 1

        [[task]]
        id = "t3"
        agent = "flaky"
        retries = 1
        """,
    )

    run = drive_bounded(run_plan, plan)

    # Then: t1 fails on flaky and waits out its back-off, t2 fails on flaky meanwhile: the
    # breaker opens; t1's retry, t2's retry and all of t3 run on steady
    assert run.state is RunState.DONE, run.doc
    assert agents_of(run, "t1") == ["flaky", "steady"]
    assert agents_of(run, "t2") == ["flaky", "steady"]
    assert agents_of(run, "t3") == ["steady"]
    opened = [e for e in run.ws.store.events(run.run.id) if e.kind == "breaker"]
    assert [(e.task_id, e.data["state"], e.data["agent"]) for e in opened] == [
        ("t2", "open", "flaky")
    ]


BREAKER_PLAN = """
[run]
max_parallel = 3
{run}

[agents.flaky]
kind = "scripted"
circuit_breaker = 2
cooldown = "1h"
[agents.flaky.script]
bad1 = {{ exit = 1 }}
bad2 = {{ exit = 1 }}
probe = {{ write = {{ "probe.txt" = "p\\n" }} }}
after = {{ write = {{ "after.txt" = "a\\n" }} }}

[agents.gatekeeper]
kind = "shell"
command = {gate}

[[task]]
id = "bad1"
agent = "flaky"

[[task]]
id = "bad2"
agent = "flaky"

[[task]]
id = "gate"
agent = "gatekeeper"

[[task]]
id = "probe"
agent = "flaky"
depends_on = ["gate"]

[[task]]
id = "after"
agent = "flaky"
depends_on = ["gate"]
"""


def breaker_plan(repo: Path, opened: Path, run: str = "") -> Path:
    """bad1 and bad2 fail on "flaky" (opening it for an hour); probe and after, also on
    "flaky", become ready only once ``opened`` exists (the test makes it when it opens)."""
    gate = f"until [ -e {shlex.quote(str(opened))} ]; do sleep 0.01; done; echo g > gate.txt"
    return write_plan(repo, BREAKER_PLAN.format(run=run, gate=toml_str(gate)))


def test_with_no_fallback_tasks_wait_while_the_breaker_is_open(
    repo: Path, tmp_path: Path, run_plan: RunPlan
) -> None:
    # Given: two failures open the profile's breaker for an hour; the run has a 30 min
    # deadline, and the scheduler's clock jumps past it once the gate (which the other two
    # tasks depend on) is done, while the breaker is still open
    opened = tmp_path / "opened"
    plan = breaker_plan(repo, opened, run='deadline = "30m"')
    clock = MovableClock()

    def past_the_deadline() -> None:
        clock.offset_s += HOUR_S / 2 + 60

    hooks = Hooks([OnEvent("breaker", "open", opened.touch), OnTaskDone("gate", past_the_deadline)])
    run = drive_bounded(run_plan, plan, clock=clock, monotonic=clock.monotonic, hooks=hooks)

    # Then: the profile's other tasks never started; the run stopped at its deadline
    assert run.state is RunState.STOPPED
    assert run.doc["reason"] == "deadline reached"
    assert run.states() == {
        "bad1": "failed",
        "bad2": "failed",
        "gate": "done",
        "probe": "ready",
        "after": "ready",
    }
    assert run.task("probe")["attempts"] == [] and run.task("after")["attempts"] == []


def test_after_the_cooldown_one_probe_runs_alone_and_its_success_closes_the_breaker(
    repo: Path, tmp_path: Path, run_plan: RunPlan
) -> None:
    # Given: the same without a deadline; the scheduler's clock jumps two hours when the
    # breaker opens
    opened = tmp_path / "opened"
    plan = breaker_plan(repo, opened)
    clock = MovableClock()
    seen_open: list[float] = []

    def two_hours_later() -> None:
        seen_open.append(clock())
        clock.offset_s += 2 * HOUR_S
        opened.touch()

    run = drive_bounded(
        run_plan, plan, clock=clock, hooks=Hooks([OnEvent("breaker", "open", two_hours_later)])
    )

    # Then: one probe ran alone (though slots were free); its success closed the breaker and
    # the last task ran; none of the two hours was really waited for (drive_bounded stops a
    # run that outlives a minute, and the tasks would not be done)
    assert run.states() == {
        "bad1": "failed",
        "bad2": "failed",
        "gate": "done",
        "probe": "done",
        "after": "done",
    }
    (opened_at,) = seen_open
    attempts = {a.task_id: a for a in run.ws.store.attempts(run.run.id)}
    probe, after = attempts["probe"], attempts["after"]
    assert probe.started_at >= opened_at + HOUR_S
    assert probe.ended_at is not None and after.started_at >= probe.ended_at


def test_a_timed_out_attempt_is_retried_on_the_fallback(repo: Path, run_plan: RunPlan) -> None:
    plan = write_plan(
        repo,
        """
        [run]
        retry_backoff = "0.05s"

        [agents.slow]
        kind = "scripted"
        timeout = "0.5s"
        fallback = "quick"
        script = { "*" = { sleep = 30 } }

        [agents.quick]
        kind = "scripted"
        script = { "*" = { write = { "done.txt" = "done\\n" } } }

        [[task]]
        id = "job"
        agent = "slow"
        retries = 1
        verify = "test -f done.txt"
        """,
    )

    run = drive_bounded(run_plan, plan)

    assert run.state is RunState.DONE, run.doc
    first, second = run.task("job")["attempts"]
    assert (first["agent"], first["failure"]) == ("slow", "timeout")
    assert (second["agent"], second["state"]) == ("quick", "merged")


def test_retries_back_off_between_attempts_and_end_in_failure_when_spent(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: one task that passes on its third attempt, one that always fails (1 retry)
    plan = write_plan(
        repo,
        """
        [run]
        retry_backoff = "0.05s"

        [agents.fake]
        kind = "scripted"
        circuit_breaker = 100
        [agents.fake.script]
        third_time = [{ exit = 3 }, { exit = 3 }, { write = { "ok.txt" = "ok\\n" } }]
        hopeless = { exit = 4 }

        [[task]]
        id = "third_time"
        retries = 2

        [[task]]
        id = "hopeless"
        retries = 1
        """,
    )

    run = drive_bounded(run_plan, plan)

    assert run.states() == {"third_time": "done", "hopeless": "failed"}
    assert [a["state"] for a in run.task("third_time")["attempts"]] == [
        "failed",
        "failed",
        "merged",
    ]
    assert run.task("hopeless")["reason"] == "agent_error: agent exited with 4"
    assert len(run.task("hopeless")["attempts"]) == 2
    # (the back-off between attempts, measured: test_scheduler_fakes.py, on the inline executor)


# A profile's launch interval spacing its attempts: on the inline executor, in
# test_scheduler_fakes.py.


# -- budgets ---------------------------------------------------------------------------------


def costly_plan(repo: Path, run_table: str, tasks: int = 5) -> Path:
    task_tables = "\n".join(
        f'[[task]]\nid = "t{i}"\nallow_empty = true\n' for i in range(1, tasks + 1)
    )
    return write_plan(
        repo,
        f"""
[run]
max_parallel = 1
{run_table}

[agents.fake]
kind = "scripted"
script = {{ "*" = {{ output = {{ cost_usd = 0.4 }} }} }}

{task_tables}
""",
        commit=True,
    )


def test_a_run_out_of_cost_budget_stops_and_resumes_with_a_bigger_one(repo: Path) -> None:
    # Given: five tasks at $0.40 each, and a run budget of $1.00
    plan = costly_plan(repo, "max_cost_usd = 1.0")

    # When
    first = orchardist(repo, "run", str(plan))

    # Then: no attempt starts once $1.00 is spent; the run ends stopped, saying why
    assert first.returncode == 1, first.stdout + first.stderr
    run_id = only_run(repo)
    doc = status(repo, run_id)
    assert doc["state"] == "stopped"
    assert doc["reason"] == "run cost budget spent ($1.20 of $1.00)"
    assert doc["totals"]["cost_usd"] == pytest.approx(1.2)
    assert doc["summary"] == {"done": 3, "ready": 2}

    # When: resumed with the same budget, then with a bigger one
    same = orchardist(repo, "resume", run_id)
    assert same.returncode == 1
    assert status(repo, run_id)["summary"] == {"done": 3, "ready": 2}  # nothing new started
    bigger = orchardist(repo, "resume", run_id, "--max-cost-usd", "5")

    # Then: it finishes
    assert bigger.returncode == 0, bigger.stdout + bigger.stderr
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    assert doc["totals"]["cost_usd"] == pytest.approx(2.0)


def test_a_task_out_of_its_cost_budget_is_held_and_the_run_stops(
    repo: Path, run_plan: RunPlan
) -> None:
    plan = write_plan(
        repo,
        """
        [run]
        retry_backoff = "0.05s"

        [agents.fake]
        kind = "scripted"
        circuit_breaker = 100
        script = { "*" = { output = { cost_usd = 0.3 }, exit = 1 } }

        [[task]]
        id = "pricey"
        retries = 5
        max_cost_usd = 0.5
        """,
    )

    run = drive_bounded(run_plan, plan)

    assert run.state is RunState.STOPPED
    assert run.doc["reason"] == "cost budget spent for: pricey"
    assert len(run.task("pricey")["attempts"]) == 2  # $0.60 after two: no third
    assert run.task("pricey")["reason"] == "cost budget spent ($0.60)"


def test_a_deadline_stops_the_run_quickly_and_it_is_resumable(repo: Path) -> None:
    # Given: slow first attempts (30 s) and a 2 s deadline
    plan = write_plan(
        repo,
        """
        [run]
        deadline = "2s"
        max_parallel = 2

        [agents.fake]
        kind = "scripted"
        script = { "*" = [{ sleep = 30 }, { write = { "x.txt" = "x\\n" } }] }

        [[task]]
        id = "a"

        [[task]]
        id = "b"
        """,
        commit=True,
    )
    # When
    first = orchardist(repo, "run", str(plan))

    # Then: stopped at the deadline, the running attempts cut before their 30 s sleep ended
    # (they would have ended failed, with no changes) and recorded interrupted
    assert first.returncode == 1, first.stdout + first.stderr
    run_id = only_run(repo)
    doc = status(repo, run_id)
    assert (doc["state"], doc["reason"]) == ("stopped", "deadline reached")
    assert [a["state"] for t in doc["tasks"] for a in t["attempts"]] == ["interrupted"] * 2

    # When / Then: resumed with a later deadline, it finishes
    resumed = orchardist(repo, "resume", run_id, "--deadline", "1h")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert status(repo, run_id)["state"] == "done"


def test_free_retries_take_every_rate_limit_and_two_infra_errors_a_task() -> None:
    # Given: a task that keeps failing on the infrastructure, and one rate-limited again and again
    free = FreeRetries()
    # Then: its first two infra errors are requeued free, the third counts; other tasks have
    # their own two; rate limits are always free; an agent's own failure never is
    assert [free.take("a", Failure.INFRA_ERROR) for _ in range(3)] == [True, True, False]
    assert free.take("b", Failure.INFRA_ERROR)
    assert all(free.take("a", Failure.RATE_LIMITED) for _ in range(10))
    assert not free.take("c", Failure.AGENT_ERROR)
    assert not free.take("c", Failure.VERIFY_FAILED)
