"""The pools (breakers, rate gates, load, fallback) and the cost budgets, alone on a fake clock."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from orchardist.agents import KINDS
from orchardist.clocks import FakeClock
from orchardist.engine.policy import Budgets, Pools
from orchardist.plan.loading import load_plan
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.state.records import AttemptState
from orchardist.state.usage import Usage
from support import write_plan


@dataclass(frozen=True)
class Ended:
    state: AttemptState
    failure: Failure | None = None
    verdict: str = ""
    retry_after_s: float | None = None


FAILED = Ended(AttemptState.FAILED, Failure.AGENT_ERROR)
PASSED = Ended(AttemptState.PASSED)


def pools(
    clock: FakeClock,
    breaker_threshold: int = 3,
    breaker_cooldown_s: float = 60.0,
    max_parallel: int | None = None,
) -> Pools:
    """A pool ``main`` with the fallback ``spare``."""
    main = AgentProfile(
        "main",
        "shell",
        max_parallel=max_parallel,
        fallback="spare",
        breaker_threshold=breaker_threshold,
        breaker_cooldown_s=breaker_cooldown_s,
    )
    agents = {"main": main, "spare": AgentProfile("spare", "shell")}
    return Pools(agents, clock, random.Random(0))


def solo(clock: FakeClock, breaker_threshold: int = 3) -> Pools:
    """A pool ``main`` without a fallback: when it is closed, its work waits."""
    main = AgentProfile("main", "shell", breaker_threshold=breaker_threshold)
    return Pools({"main": main}, clock, random.Random(0))


def test_a_pool_whose_breaker_opened_sends_its_work_to_the_fallback_until_the_cool_down_ends() -> (
    None
):
    # Given: a pool that opens after two failures and cools down for a minute
    clock = FakeClock(1000.0)
    p = pools(clock, breaker_threshold=2, breaker_cooldown_s=60.0)
    # When: two attempts fail on it
    p.started("main")
    assert p.ended("main", "t", FAILED) is False
    p.started("main")
    assert p.ended("main", "t", FAILED) is True
    # Then: it is closed, and its work goes to the fallback at once
    assert not p.open("main") and p.has_room("main")
    assert p.profile_for("t", "main") == "spare"
    assert p.wake_in(["main"]) == 0.0
    # When: the minute passes, one probe goes through and succeeds
    clock.advance(60.0)
    assert p.open("main") and p.profile_for("t", "main") == "main"
    p.started("main")
    assert not p.open("main")  # one probe at a time
    p.ended("main", "t", PASSED)
    # Then: the pool is open again, and its work may start at once
    assert p.open("main") and p.wake_in(["main"]) == 0.0


def test_a_pool_counts_its_load_against_its_max_parallel() -> None:
    clock = FakeClock()
    p = pools(clock, max_parallel=1)
    p.started("main")
    # Then: main is full; its work may not go to the fallback while main is open, and only an
    # attempt that ends makes room (nothing to wake the loop for)
    assert p.open("main") and p.has_room("main") is False
    assert p.profile_for("t", "main") == "main"
    assert p.wake_in(["main"]) is None
    p.ended("main", "t", PASSED)
    assert p.has_room("main")


def test_a_rate_limit_pauses_launches_without_counting_against_the_breaker() -> None:
    clock = FakeClock(50.0)
    p = solo(clock, breaker_threshold=1)
    p.started("main")
    limited = Ended(AttemptState.FAILED, Failure.RATE_LIMITED, retry_after_s=30.0)
    assert p.ended("main", "t", limited) is False
    assert p.breakers["main"].failures == 0
    assert not p.open("main") and p.wake_in(["main"]) == 30.0
    clock.advance(30.0)
    assert p.open("main")


def test_a_pool_without_a_fallback_wakes_the_loop_when_its_breaker_cools_down() -> None:
    # Given: a pool without a fallback, whose breaker one failure opens for a minute
    clock = FakeClock(1000.0)
    p = solo(clock, breaker_threshold=1)
    p.started("main")
    assert p.ended("main", "t", FAILED) is True
    # Then: its work waits, and the loop is woken when the minute is over
    assert not p.has_room("main") and p.wake_in(["main"]) == 60.0
    clock.advance(60.0)
    assert p.has_room("main") and p.wake_in(["main"]) == 0.0


def test_a_rate_limit_that_ended_while_the_loop_was_busy_says_start_now_not_never() -> None:
    # Given: a pool paused for 100 ms by a rate limit, its work refused a launch during it
    clock = FakeClock(50.0)
    p = solo(clock)
    p.started("main")
    limited = Ended(AttemptState.FAILED, Failure.RATE_LIMITED, retry_after_s=0.1)
    p.ended("main", "t", limited)
    assert not p.has_room("main")
    # When: the pause ends before the loop asks how long it may sleep (it was merging)
    clock.advance(0.2)
    # Then: the answer is "now"; None would have the loop sleep until a message that, with
    # nothing running, never comes (a run hung so, after an opencode 429, under load)
    assert p.wake_in(["main"]) == 0.0


def test_work_waiting_on_a_closed_pool_wakes_when_its_fallback_reopens_first() -> None:
    # Given: main's breaker opened for an hour, and its fallback paused 30 s by a rate limit
    clock = FakeClock(1000.0)
    p = pools(clock, breaker_threshold=1, breaker_cooldown_s=3600.0)
    p.started("main")
    assert p.ended("main", "t", FAILED) is True
    p.started("spare")
    p.ended("spare", "u", Ended(AttemptState.FAILED, Failure.RATE_LIMITED, retry_after_s=30.0))
    # When: the loop asks when main's work may start
    assert not p.has_room("main")
    # Then: in 30 s, on the fallback, not in an hour on main
    assert p.wake_in(["main"]) == 30.0
    clock.advance(30.0)
    assert p.has_room("main") and p.profile_for("t", "main") == "spare"


def test_a_probe_that_ended_without_a_verdict_lets_the_next_probe_through() -> None:
    # Given: main's breaker cooled down, and its one probe under way
    clock = FakeClock(0.0)
    p = solo(clock, breaker_threshold=1)
    p.started("main")
    p.ended("main", "t", FAILED)
    clock.advance(60.0)
    p.started("main")
    assert not p.open("main")  # one probe at a time
    # When: the probe is cancelled (no verdict on the backend)
    assert p.ended("main", "t", Ended(AttemptState.CANCELLED)) is False
    # Then: another probe may go, at once
    assert p.open("main") and p.wake_in(["main"]) == 0.0


def test_a_refused_credential_opens_the_breaker_at_once_and_the_cool_down_lets_one_probe() -> None:
    # Given: a pool that three agent errors would close
    clock = FakeClock(0.0)
    p = solo(clock, breaker_threshold=3)
    p.started("main")
    # When: one attempt ends with its credentials refused
    assert p.ended("main", "t", Ended(AttemptState.FAILED, Failure.AUTH_ERROR)) is True
    # Then: closed at once until the minute's cool-down ends
    assert not p.open("main") and p.wake_in(["main"]) == 60.0
    clock.advance(60.0)
    assert p.open("main")


def test_a_breaker_that_is_off_stays_open_after_a_refused_credential() -> None:
    clock = FakeClock(0.0)
    p = solo(clock, breaker_threshold=0)
    p.started("main")
    assert p.ended("main", "t", Ended(AttemptState.FAILED, Failure.AUTH_ERROR)) is False
    assert p.open("main")


def test_a_failure_during_verification_is_the_patchs_and_leaves_the_breaker_closed() -> None:
    clock = FakeClock()
    p = pools(clock, breaker_threshold=1)
    p.started("main")
    assert p.ended("main", "t", Ended(AttemptState.FAILED, Failure.TIMEOUT, "failed")) is False
    assert p.open("main") and p.profile_for("t", "main") == "main"


def test_a_timeout_moves_that_task_alone_onto_the_fallback() -> None:
    clock = FakeClock()
    p = pools(clock, breaker_threshold=0)  # breaker off
    p.started("main")
    p.ended("main", "slow", Ended(AttemptState.FAILED, Failure.TIMEOUT))
    assert p.profile_for("slow", "main") == "spare"
    assert p.profile_for("other", "main") == "main"


def test_budgets_hold_a_task_at_its_limit_and_stop_the_run_at_the_runs() -> None:
    budgets = Budgets(1.0, {"a": 0.5, "b": None})
    budgets.spend("a", Usage(cost_usd=0.25))
    assert budgets.task_left("a") == 0.25 and not budgets.task_spent("a")
    assert budgets.task_left("b") is None
    budgets.spend("a", Usage(cost_usd=0.25))
    assert budgets.task_spent("a") and budgets.task_left("a") == 0.0
    assert budgets.run_spent() is None
    budgets.spend("b", Usage(cost_usd=0.5))
    budgets.spend("b", Usage())  # an agent that said nothing spent nothing
    assert not budgets.task_spent("b")
    assert budgets.run_spent() == "run cost budget spent ($1.00 of $1.00)"


def test_an_attempt_that_reported_no_cost_leaves_its_tasks_budget_untouched() -> None:
    budgets = Budgets(None, {"a": 0.75})
    budgets.spend("a", Usage(cost_usd=0.5))
    budgets.spend("a", Usage())
    assert budgets.task_left("a") == 0.25 and not budgets.task_spent("a")


def test_a_pool_counts_every_attempt_running_on_it() -> None:
    # Given: a pool that may run two attempts at once
    clock = FakeClock()
    p = pools(clock, max_parallel=2)
    # When: two start; Then: it is full, and one ending makes room again
    p.started("main")
    assert p.has_room("main")
    p.started("main")
    assert p.open("main") and not p.has_room("main")
    p.ended("main", "t", PASSED)
    assert p.has_room("main")


class Jitter(random.Random):
    """A Random whose ``random()`` is always ``value``: 1.0 gives the full back-off."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_rate_limits_without_a_reset_pause_a_profile_15_s_doubling_up_to_15_min() -> None:
    # Given: a profile whose backend refuses for rate limits without saying until when, and
    # the jitter at its top (the full pause) or its bottom (half of it)
    for jitter, share in ((1.0, 1.0), (0.0, 0.5)):
        clock = FakeClock(0.0)
        main = AgentProfile("main", "claude", breaker_threshold=3)
        p = Pools({"main": main}, clock, Jitter(jitter))
        limited = Ended(AttemptState.FAILED, Failure.RATE_LIMITED)
        pauses = []
        # When: eight launches in a row are rate limited, each as soon as the pause allows
        for _ in range(8):
            p.started("main")
            p.ended("main", "t", limited)
            wait_s = p.wake_in(["main"])
            assert wait_s is not None and not p.open("main")
            pauses.append(wait_s)
            clock.advance(wait_s)
        # Then: the README's schedule, 15 s doubling per limit up to 15 minutes
        full = [15.0, 30.0, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0]
        assert pauses == [s * share for s in full]
        # And: a launch that goes through starts the schedule again
        p.started("main")
        p.ended("main", "t", PASSED)
        p.started("main")
        p.ended("main", "t", limited)
        assert p.wake_in(["main"]) == 15.0 * share


def failures_to_open(p: Pools, pool: str, most: int = 20) -> int | None:
    """How many agent errors in a row open the pool's breaker (None: not ``most`` of them)."""
    for n in range(1, most + 1):
        p.started(pool)
        if p.ended(pool, "t", FAILED):
            return n
    return None


def test_a_plan_s_profiles_break_after_three_agent_errors_except_shell_and_scripted(
    repo: Path,
) -> None:
    # Given: a plan with a profile of every kind, none saying ``circuit_breaker``
    required = {
        "shell": 'command = "true"',
        "llm": 'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"',
    }
    profiles = "\n".join(
        f'[agents.{kind}]\nkind = "{kind}"\n{required.get(kind, "")}\n' for kind in KINDS
    )
    plan = load_plan(write_plan(repo, f'{profiles}\n[[task]]\nid = "t"\nagent = "shell"\n'))
    p = Pools(plan.agents, FakeClock(0.0), random.Random(0))
    # When: each fails with agent errors until its breaker opens
    opened = {kind: failures_to_open(p, kind) for kind in KINDS}
    # Then: the README's defaults: 3 for the coding agents, off for shell and scripted
    assert opened == {kind: None if kind in ("shell", "scripted") else 3 for kind in KINDS}
