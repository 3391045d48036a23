"""The real OpenCode CLI (``opencode-ai``, installed by ``.ci/tools.sh``) against a fake OpenAI API.

OpenCode reaches :class:`modelapi.openai.OpenAiServer` through an OpenAI-compatible provider
declared in ``OPENCODE_CONFIG_CONTENT`` (streamed chat completions, with the model's prices so
that OpenCode reports a cost). Skipped when opencode is not installed, failed instead when CI is
set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_support import buggy_project, run_task

from modelapi.openai import INPUT_TOKENS, OUTPUT_TOKENS, Call, OpenAiServer, Text, rate_limited
from modelapi.openai import unauthorized as refused_key
from realtools import require_tool

FIX = Call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix add"})
PRICE_IN, PRICE_OUT = 1.25, 10.0  # per million tokens, told to opencode, which prices itself


@pytest.fixture
def opencode() -> Path:
    return require_tool("opencode")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_project(tmp_path)


def run_opencode(
    project: Path, opencode: Path, api: OpenAiServer, tmp_path: Path
) -> dict[str, Any]:
    """``orchardist run`` of the fix task with opencode against ``api``; the task's status."""
    model = {"name": "Fake", "cost": {"input": PRICE_IN, "output": PRICE_OUT}}
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Fake",
        "options": {"baseURL": f"{api.url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
        "models": {"gpt-fake-1": model},
    }
    env = {
        "OPENAI_API_KEY": "sk-fake-key",
        "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }
    profile = {"kind": "opencode", "command": str(opencode), "model": "fake/gpt-fake-1"}
    return run_task(project, profile, env, tmp_path)


@pytest.fixture
def api() -> Iterator[OpenAiServer]:
    with OpenAiServer([FIX, Text("Fixed add().")]) as server:
        yield server


def test_opencode_fixes_the_bug_and_the_fix_merges_with_its_reported_cost(
    project: Path, opencode: Path, api: OpenAiServer, tmp_path: Path
) -> None:
    # Given a fake OpenAI API that answers with a shell command fixing add(), then a message
    # When orchardist runs opencode on the task
    task = run_opencode(project, opencode, api, tmp_path)
    # Then the fix is merged, with the tokens and cost opencode reported for its steps
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["state"]) == ("done", "merged"), task
    steps = len([r for r in api.model_calls if r.body.get("tools")])
    assert steps == 2, [r.path for r in api.requests]
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        INPUT_TOKENS * steps,
        OUTPUT_TOKENS * steps,
    )
    expected = (INPUT_TOKENS * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT) * steps / 1e6
    assert attempt["cost_usd"] == pytest.approx(expected)
    assert {r.header("authorization") for r in api.requests} == {"Bearer sk-fake-key"}


def test_a_refused_key_is_an_auth_error(opencode: Path, project: Path, tmp_path: Path) -> None:
    # Given an API that refuses the key (401)
    with OpenAiServer(fail=refused_key()) as api:
        task = run_opencode(project, opencode, api, tmp_path)
    # Then the attempt failed with auth_error
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "auth_error"), task


def test_a_rate_limit_pauses_and_the_task_is_retried_without_spending_a_retry(
    opencode: Path, project: Path, tmp_path: Path
) -> None:
    # Given an API that answers 429 with reset headers to opencode's first session, and a task
    # with no retries
    with OpenAiServer([FIX, Text("Fixed add().")], rate_limited(1), fail_conversations=1) as api:
        task = run_opencode(project, opencode, api, tmp_path)
    # Then the first attempt was rate limited (reset read from its headers), the second merged
    first, second = task["attempts"]
    assert first["failure"] == "rate_limited", first
    assert (task["state"], second["state"]) == ("done", "merged"), task
