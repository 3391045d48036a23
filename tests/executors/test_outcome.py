"""What the scheduler keeps of an attempt's outcome: the agent's claims bounded, the strings an
agent wrote cut to their caps, and every dropped claim noted in the detail."""

from __future__ import annotations

import math

import pytest

from orchardist.executors import AttemptJob, Outcome
from orchardist.state.agentrecords import Failure
from orchardist.state.records import AttemptState
from orchardist.state.usage import Usage

JOB = AttemptJob("t.1", "r", "t", 1, 0, "b" * 40, "t", "", None, (), ".", 60.0, "t: msg", "m")


def rate_limited(retry_after_s: float) -> Outcome:
    return Outcome(
        JOB, AttemptState.FAILED, 0.0, 1.0, Failure.RATE_LIMITED, "429", retry_after_s=retry_after_s
    )


@pytest.mark.parametrize("reset_s", [1e300, math.inf, math.nan, -5.0, 9 * 86400.0])
def test_a_rate_limit_reset_out_of_range_gives_way_to_the_back_off_and_is_noted(
    reset_s: float,
) -> None:
    # Given: an agent saying its backend resets in 1e300 s (or never, or a week and more off)
    # When the outcome is bounded; Then the pool backs off as for no reset, and the detail says so
    kept, _ = rate_limited(reset_s).bounded()
    assert kept.retry_after_s is None
    assert kept.detail.startswith("429; rate-limit reset ignored, out of range: ")


def test_a_reset_within_a_weekly_quota_is_kept() -> None:
    kept, _ = rate_limited(7 * 86400.0).bounded()
    assert kept.retry_after_s == 7 * 86400.0
    assert kept.detail == "429"


def test_usage_out_of_range_is_dropped_and_noted_and_the_rest_kept() -> None:
    # Given: 10**12 input tokens (the most kept), 10**12 + 1 output tokens, $1,000,001, 3 turns
    usage = Usage(1_000_001.0, 10**12, 10**12 + 1, 3, "s" * 300)
    outcome = Outcome(JOB, AttemptState.PASSED, 0.0, 1.0, detail="ok", usage=usage)
    # When
    kept, dropped = outcome.bounded()
    # Then
    assert dropped == ("cost_usd", "output_tokens")
    assert kept.usage.input_tokens == 10**12 and kept.usage.turns == 3
    assert kept.usage.cost_usd is None and kept.usage.output_tokens is None
    assert kept.usage.session_id == "s" * 256 + "… [44 characters cut]"
    assert kept.detail == "ok; usage ignored, out of range: cost_usd, output_tokens"


def test_an_agents_strings_are_cut_to_their_caps_saying_how_much() -> None:
    outcome = Outcome(
        JOB, AttemptState.FAILED, 0.0, 1.0, detail="d" * 5000, summary="s" * 2001, feedback="f"
    )
    kept, _ = outcome.bounded()
    assert kept.detail == "d" * 4000 + "… [1000 characters cut]"
    assert kept.summary == "s" * 2000 + "… [1 characters cut]"
    assert kept.feedback == "f"
