"""Reading rate-limit resets and credential failures out of what backends print."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchardist.agents.limits import classify, retry_after_s
from orchardist.state.agentrecords import Failure

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("Retry-After: 30", 30),
        ('"retry-after": "12"', 12),
        ('"retryDelay": "35s"', 35),
        ("Please retry in 35.5s.", 35.5),
        ("try again in 3 days 6 hours 57 minutes.", 3 * 86400 + 6 * 3600 + 57 * 60),
        ("Your quota will reset after 2h3m15s.", 2 * 3600 + 3 * 60 + 15),
        ("Rate limit reached for gpt-4o. Please try again in 20s.", 20),
        ("retry after 2 hours", 7200),
        ("Claude AI usage limit reached|1768050000", 3600),
        ('"resetsAt": 1768050000000', 3600),
        ("resets at 15:00 UTC", 3 * 3600),
        ("You've hit your limit · resets 3pm (UTC)", 3 * 3600),
        ("resets 8am (America/New_York)", 3600),  # 12:00 UTC is 7am in New York
        ("try again at Jan 12th, 2026 12:30 PM", None),  # local time: checked below
    ],
)
def test_reset_times_are_read_from_the_forms_tools_print(text: str, seconds: float | None) -> None:
    if seconds is None:
        local = datetime(2026, 1, 12, 12, 30).astimezone()
        seconds = (local - NOW).total_seconds()
    assert retry_after_s(text, NOW) == pytest.approx(seconds)


def test_a_clock_time_already_past_means_tomorrow() -> None:
    assert retry_after_s("resets at 11:00 UTC", NOW) == pytest.approx(23 * 3600)


@pytest.mark.parametrize(
    "text", ["try again later", "Retrying in 0.2 seconds...", "resets 3", "line 429 of a file"]
)
def test_no_reset_time_is_invented(text: str) -> None:
    assert retry_after_s(text, NOW) is None


@pytest.mark.parametrize(
    ("text", "status", "failure"),
    [
        ("", 429, Failure.RATE_LIMITED),
        ("", 401, Failure.AUTH_ERROR),
        ("You've hit your usage limit. Try again Aug 18.", None, Failure.RATE_LIMITED),
        ("You\u2019ve hit your limit, try again later", None, Failure.RATE_LIMITED),  # codex
        ("exceeded retry limit, last status: 429 Too Many Requests", None, Failure.RATE_LIMITED),
        ("429 Too Many Requests", None, Failure.RATE_LIMITED),
        ("RESOURCE_EXHAUSTED: Quota exceeded for quota metric", None, Failure.RATE_LIMITED),
        ("Invalid API key · Please run /login", None, Failure.AUTH_ERROR),
        ("API key not valid. Please pass a valid API key.", None, Failure.AUTH_ERROR),
        ("you must specify the GEMINI_API_KEY environment variable", None, Failure.AUTH_ERROR),
        ("unexpected status 401 Unauthorized", None, Failure.AUTH_ERROR),
        ("TypeError: undefined is not a function", None, None),
        ("", 500, None),
    ],
)
def test_errors_are_classified(text: str, status: int | None, failure: Failure | None) -> None:
    assert classify(text, status) is failure
