"""aider's rate limit, the real CLI against a fake OpenAI API (test_real_aider.py says how).

A file of its own: aider itself retries a rate-limited call until its back-off passes 60 s
(0.25 + 0.5 + ... + 32 s, ``RETRY_TIMEOUT`` in aider/models.py, 0.86.2, a constant no setting or
variable changes), so the test waits ~64 s, and xdist runs a file on one worker: with aider's other
tests in one file it was a chain of ~150 s on one worker of the whole suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_support import requeued
from test_real_aider import FIX, LEAN, aider, project, run_aider

from e2e_support import log_of
from modelapi.openai import OpenAiServer, rate_limited

pytestmark = pytest.mark.slow
__all__ = ["aider", "project"]  # the fixtures, used by name

# aider's own tries of a rate-limited call: 0.125 s doubled before each retry until past its
# RETRY_TIMEOUT (60 s), i.e. 8 retries (aider/models.py, 0.86.2); the SDK's are switched off
AIDER_TRIES = 9


def test_a_rate_limit_pauses_and_the_task_is_retried_without_spending_a_retry(
    aider: Path, project: Path, tmp_path: Path
) -> None:
    # Given an API that answers 429 ("try again in 1s") to every call of aider's first run, and
    # a task with no retries
    limit = rate_limited(1, should_retry=False)
    with OpenAiServer([FIX], limit, side_requests=False, failures=AIDER_TRIES) as api:
        task = run_aider(project, aider, api, tmp_path, *LEAN)
    # Then the first attempt was rate limited with the reset time aider printed, the second merged
    first, second = task["attempts"]
    assert first["failure"] == "rate_limited", first
    # paused for the reset time the tool reported, not counted against the task's retries
    assert [(e["failure"], e.get("retry_after_s")) for e in requeued(project)] == [
        ("rate_limited", 1.0)
    ]
    assert "try again in 1s" in log_of(first)
    assert (task["state"], second["state"]) == ("done", "merged"), task
