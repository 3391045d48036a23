"""The real Codex CLI (``@openai/codex``, installed by ``.ci/tools.sh``) against a fake OpenAI API.

Each test drives ``orchardist run`` with a ``codex`` profile whose model API is
:class:`modelapi.openai.OpenAiServer` on 127.0.0.1, speaking the Responses API as codex does,
with scripted tool calls. Skipped when codex is not installed, failed instead when CI is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_support import BUGGY, breaker_states, buggy_project, requeued, run_task

from modelapi.openai import INPUT_TOKENS, OUTPUT_TOKENS, Call, OpenAiServer, Text, rate_limited
from modelapi.openai import unauthorized as refused_key
from realtools import require_tool

pytestmark = pytest.mark.slow

PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n"
    "*** End Patch\n"
)
# codex turns a shell call of apply_patch into a patch of its own (a ``file_change`` item)
FIX = Call("exec_command", {"cmd": f"apply_patch <<'EOF'\n{PATCH}EOF\n"})
PRICE_IN, PRICE_OUT = 1.25, 10.0  # per million tokens; codex reports tokens, not cost
CALL_USD = (INPUT_TOKENS * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT) / 1e6


@pytest.fixture
def codex() -> Path:
    return require_tool("codex")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_project(tmp_path)


@pytest.fixture
def api() -> Iterator[OpenAiServer]:
    with OpenAiServer([FIX, Text("Fixed add().")]) as server:
        yield server


def run_codex(
    project: Path,
    codex: Path,
    api: OpenAiServer,
    tmp_path: Path,
    permission: str = "auto",
    **settings: Any,
) -> dict[str, Any]:
    """``orchardist run`` of the fix task with codex against ``api``; the task's status."""
    profile = {
        "kind": "codex",
        "command": str(codex),
        "model": "gpt-fake-1",
        "price_in": PRICE_IN,
        "price_out": PRICE_OUT,
        "permission": permission,
        **settings,
    }
    env = {"OPENAI_BASE_URL": f"{api.url}/v1", "OPENAI_API_KEY": "sk-fake-key"}
    return run_task(project, profile, env, tmp_path)


def test_codex_fixes_the_bug_and_the_fix_merges_with_its_reported_usage(
    project: Path, codex: Path, api: OpenAiServer, tmp_path: Path
) -> None:
    # Given a fake OpenAI API that answers with a patch fixing add(), then a final message
    # When orchardist runs codex on the task
    task = run_codex(project, codex, api, tmp_path)
    # Then the fix is merged, with the tokens codex reported and their price
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["state"]) == ("done", "merged"), task
    calls = len(api.model_calls)
    assert calls == 2, [r.path for r in api.requests]
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        INPUT_TOKENS * calls,
        OUTPUT_TOKENS * calls,
    )
    expected = (INPUT_TOKENS * calls * PRICE_IN + OUTPUT_TOKENS * calls * PRICE_OUT) / 1e6
    assert attempt["cost_usd"] == pytest.approx(expected)
    # and codex used the base URL and key orchardist passed, over HTTPS (no WebSocket)
    assert {r.header("authorization") for r in api.requests} == {"Bearer sk-fake-key"}
    assert all(r.method == "POST" for r in api.requests)


def test_a_patch_codex_could_not_write_fails_the_attempt(
    project: Path, codex: Path, api: OpenAiServer, tmp_path: Path
) -> None:
    # Given codex in its read-only sandbox, where the scripted patch is rejected (codex exits 0)
    task = run_codex(project, codex, api, tmp_path, permission="read-only")
    # Then the attempt failed, saying what could not be written, and nothing was merged
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "no_changes"), task
    assert "codex could not write any file" in attempt["detail"], attempt["detail"]
    assert task["commit"] is None
    assert (project / "calc.py").read_text() == BUGGY


def test_a_refused_key_is_an_auth_error(codex: Path, project: Path, tmp_path: Path) -> None:
    # Given an API that refuses the key (401), as OpenAI does
    with OpenAiServer(fail=refused_key()) as api:
        task = run_codex(project, codex, api, tmp_path)
    # Then the attempt failed with auth_error and the final error in its detail
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "auth_error"), task
    # and the profile's circuit breaker opened at once: a refused key will not get better
    assert breaker_states(project) == ["open"]
    assert "401" in attempt["detail"] and "Reconnecting" not in attempt["detail"], attempt


def test_a_rate_limit_pauses_and_the_task_is_retried_without_spending_a_retry(
    codex: Path, project: Path, tmp_path: Path
) -> None:
    # Given an API that answers 429 (with reset headers) to codex's first session, and a task
    # with no retries
    with OpenAiServer([FIX, Text("Fixed add().")], rate_limited(1), fail_conversations=1) as api:
        task = run_codex(project, codex, api, tmp_path)
    # Then the first attempt was rate limited, the second merged the fix
    first, second = task["attempts"]
    assert first["failure"] == "rate_limited", first
    # requeued, not counted against the task's retries; codex prints no reset time (its last
    # words are "exceeded retry limit, last status: 429"), so the profile backs off
    assert [(e["failure"], e.get("retry_after_s")) for e in requeued(project)] == [
        ("rate_limited", None)
    ]
    assert (task["state"], second["state"]) == ("done", "merged"), task


def test_a_budget_stop_ends_codex_and_keeps_the_tokens_it_logged(
    codex: Path, project: Path, tmp_path: Path
) -> None:
    # Given a model that reads the file forever, and a budget that covers less than two calls
    # (codex's stream tells tokens only when its turn ends: orchardist reads its session log)
    read = Call("exec_command", {"cmd": "cat calc.py"})
    with OpenAiServer([read] * 30) as api:
        task = run_codex(project, codex, api, tmp_path, max_cost_usd=CALL_USD * 1.5)
        calls = len(api.model_calls)
    # Then orchardist stopped codex long before the script ran out
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "agent_error"), task
    assert "budget spent" in attempt["detail"], attempt["detail"]
    assert calls < 30
    # and the attempt keeps the tokens codex logged for its calls, priced
    tokens_in, tokens_out = attempt["input_tokens"], attempt["output_tokens"]
    n = tokens_in // INPUT_TOKENS
    assert 2 <= n <= calls and (tokens_in, tokens_out) == (n * INPUT_TOKENS, n * OUTPUT_TOKENS)
    assert attempt["cost_usd"] == pytest.approx(n * CALL_USD)
