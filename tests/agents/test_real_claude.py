"""The real Claude Code (2.1.332, pinned by .ci/run) driven by ``orchardist run`` against a fake
Anthropic Messages API (tests/modelapi/anthropic.py) that scripts its tool calls.

Skipped with the reason when the tool is not installed; failed under CI.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from egress import EgressProxy
from real_runs import events, only_task, reported, run_fix

from e2e_support import log_of
from modelapi.anthropic import AnthropicServer, ApiError, Step, Text, ToolUse, unauthorized
from modelapi.anthropic import rate_limited as too_many
from modelapi.server import Reply, Request
from realtools import require, require_tool
from support import git

pytestmark = pytest.mark.slow
FIX = [
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "Let me look."),
    ToolUse("Edit", {"file_path": "{cwd}/calc.py", "old_string": "a - b", "new_string": "a + b"}),
    Text("Fixed add()."),
]


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real claude (HOME is a fresh one, ``python`` this interpreter: conftest)."""
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES", raising=False)
    yield exe


def tokens_reported(result: dict[str, Any]) -> tuple[int, int]:
    models = result["modelUsage"].values()
    keys_in = ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    return (
        sum(m[k] for m in models for k in keys_in),
        sum(m["outputTokens"] for m in models),
    )


def _run(
    tmp_path: Path,
    exe: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: list[Step],
    fail: ApiError | None = None,
    failures: int | None = None,
    profile: str = "",
) -> tuple[dict[str, Any], AnthropicServer]:
    """Fix add() with the real claude against a scripted fake API."""
    api = AnthropicServer(script, fail=fail, failures=failures)
    settings = f'kind = "claude"\ncommand = {json.dumps(str(exe))}\n{profile}'
    return run_fix(tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", settings), api


def test_claude_fixes_a_failing_test_and_its_fix_is_merged(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a proxy the profile passes for every HTTPS connection beyond the model's API
    with EgressProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        passed = 'env = ["HTTPS_PROXY", "NO_PROXY"]'
        doc, api = _run(tmp_path, claude, monkeypatch, FIX, profile=passed)
    # Claude Code went nowhere but the model's API: no telemetry, error reports or update
    # checks (orchardist sets CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC), each a connection to
    # api.anthropic.com and a third of its CPU for a short session
    assert proxy.asked() == []
    # Claude Code refuses every edit under .git: it worked in a folder outside the repository's
    (cwd,) = api.working_directories()
    git_dir = Path(doc["_repo"]).resolve() / ".git"
    assert not Path(cwd).resolve().is_relative_to(git_dir), cwd
    task = only_task(doc)
    assert task["state"] == "done", task
    (attempt,) = task["attempts"]
    assert attempt["state"] == "merged"
    # The run branch holds the fix
    repo = Path(doc["_repo"])
    assert "a + b" in git(repo, "show", f"{doc['branch']}:calc.py")
    # Cost and tokens are the ones Claude Code reported
    result = reported(attempt)
    assert attempt["cost_usd"] == pytest.approx(result["total_cost_usd"])
    assert (attempt["input_tokens"], attempt["output_tokens"]) == tokens_reported(result)
    assert attempt["turns"] == result["num_turns"] == 3
    assert len(api.turns()) == 3


def test_an_edit_claude_refuses_fails_the_attempt_and_says_why(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that only tries to write a file Claude Code deems sensitive
    script: list[Step] = [
        ToolUse("Write", {"file_path": "{cwd}/.bashrc", "content": "alias add=sub\n"}),
        Text("I could not write the file."),
    ]
    doc, _ = _run(tmp_path, claude, monkeypatch, script)
    task = only_task(doc)
    (attempt,) = task["attempts"]
    # Then the attempt fails (nothing changed), and the refusal is in its detail
    assert task["state"] == "failed", task
    assert attempt["failure"] == "no_changes", attempt
    assert "Claude Code refused 1 tool call(s)" in log_of(attempt)


def test_an_edit_outside_allowed_tools_is_not_made_under_accept_edits(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a profile that allows only reading, under the default acceptEdits
    # And a model that reads calc.py and then asks for the fixing Edit
    doc, api = _run(tmp_path, claude, monkeypatch, FIX, profile='allowed_tools = ["Read", "Glob"]')
    # Then nothing was changed or merged: the run branch still subtracts
    assert "a - b" in git(Path(doc["_repo"]), "show", f"{doc['branch']}:calc.py")
    task = only_task(doc)
    (attempt,) = task["attempts"]
    assert attempt["failure"] == "no_changes", attempt
    assert task["state"] == "failed"
    # And the model really asked for the Edit: its third turn carries Claude Code's refusal
    assert len(api.turns()) == 3
    answered = json.dumps(api.turns()[2]["messages"][-1])
    assert "No such tool available: Edit" in answered, answered


def test_a_refused_key_is_an_auth_error_that_opens_the_breaker(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, api = _run(tmp_path, claude, monkeypatch, FIX, fail=unauthorized())
    task = only_task(doc)
    (attempt,) = task["attempts"]
    assert attempt["failure"] == "auth_error", attempt
    assert "Invalid API key" in attempt["detail"]
    assert task["state"] == "failed"
    # Claude Code's own retries are capped (3 requests, not 11)
    assert len(api.turns()) == 3
    assert [e["state"] for e in events(doc, "breaker")] == ["open"]


class RejectedThenLoggedOut(AnthropicServer):
    """A subscription's quota state: the first turn is answered, but with headers saying the
    unified limit is rejected (Claude Code prints a rejected ``rate_limit_event``); every later
    turn is refused 401, as for a token no longer logged in."""

    def __init__(self, script: list[Step]) -> None:
        super().__init__(script)
        self.answered = False

    def failing(self, body: Mapping[str, Any]) -> ApiError | None:
        """No error for the first turn; 401 for every later one."""
        if not body.get("tools"):
            return None
        with self.lock:
            first, self.answered = not self.answered, True
        return None if first else ApiError(401, "authentication_error", "Invalid bearer token")

    def answer(self, request: Request) -> Reply:
        """The scripted answer, with the rejected limit in its headers."""
        reply = super().answer(request)
        if reply.status != 200:
            return reply
        rejected = {k: v for k, v in too_many(3600).headers.items() if "unified" in k}
        return Reply(reply.status, {**reply.headers, **rejected}, reply.body)


def test_a_401_after_a_rejected_rate_limit_event_is_an_auth_error_not_requeued(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a subscription token whose first answer says the limit is rejected, then 401s
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test-token")
    api = RejectedThenLoggedOut(FIX)
    settings = f'kind = "claude"\ncommand = {json.dumps(str(claude))}\n'
    doc = run_fix(tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", settings)
    task = only_task(doc)
    (attempt,) = task["attempts"]
    # Then Claude Code really printed the rejected rate_limit_event before its 401 result
    assert '"status":"rejected"' in log_of(attempt)
    assert reported(attempt)["api_error_status"] == 401
    # And the one attempt failed as an auth error: counted, breaker open, never requeued
    assert attempt["failure"] == "auth_error", attempt
    assert task["state"] == "failed", task
    assert "requeued" not in [e.get("state") for e in events(doc, "attempt")]
    assert [e["state"] for e in events(doc, "breaker")] == ["open"]


def test_a_rate_limit_pauses_and_relaunches_without_counting_a_retry(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backend that answers 429 (retry after 1 s) more often than Claude Code retries by
    # itself (twice)
    # And a plan that allows no retries
    doc, _ = _run(tmp_path, claude, monkeypatch, FIX, fail=too_many(1), failures=3)
    task = only_task(doc)
    # Then the rate-limited attempt was requeued, and the next one merged the fix
    assert task["attempts"][0]["failure"] == "rate_limited"
    assert task["state"] == "done", task
    assert "requeued" in [e.get("state") for e in events(doc, "attempt")]


def test_a_budget_stop_keeps_the_usage_claude_reported(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that reads forever, and a budget that covers two requests
    script: list[Step] = [ToolUse("Read", {"file_path": "{cwd}/calc.py"})] * 8
    doc, api = _run(tmp_path, claude, monkeypatch, script, profile="max_cost_usd = 0.01")
    (attempt,) = only_task(doc)["attempts"]
    result = reported(attempt)
    assert result["subtype"] == "error_max_budget_usd"
    assert attempt["failure"] == "agent_error"
    assert "Reached maximum budget" in attempt["detail"]
    # The whole session's usage is kept, not the last turn's
    assert attempt["cost_usd"] == pytest.approx(result["total_cost_usd"])
    assert (attempt["input_tokens"], attempt["output_tokens"]) == tokens_reported(result)
    assert attempt["input_tokens"] > result["usage"]["input_tokens"]
    assert len(api.turns()) < len(script)


SED_FIX = [
    ToolUse("Bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix add"}),
    Text("Fixed add()."),
]


def test_claudes_own_sandbox_turned_on_past_validation_fails_the_attempt_saying_so(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (Claude Code turns its sandbox off, silently, where socat or bwrap is missing)
    require(shutil.which("socat") is not None, "Claude Code's sandbox needs socat")
    # Given a profile whose args turn Claude Code's sandbox on, where the plan's checks of its
    # settings files do not look (it runs each Bash command under a bubblewrap of its own,
    # which cannot set up a uid map inside orchardist's)
    on = json.dumps(json.dumps({"sandbox": {"enabled": True}}))
    # When the model fixes add() with a shell command
    doc, api = _run(tmp_path, claude, monkeypatch, SED_FIX, profile=f'args = ["--settings", {on}]')
    # Then the attempt failed, saying Claude Code's own sandbox could not start and how to fix it
    task = only_task(doc)
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "agent_error"), attempt
    assert "Claude Code's own sandbox (sandbox.enabled" in attempt["detail"], attempt["detail"]
    assert "setting up uid map" in attempt["detail"], attempt["detail"]
    assert '"sandbox": {"enabled": false}' in attempt["detail"], attempt["detail"]
    # because Claude Code really ran the command in its sandbox, which failed as it started
    (init,) = [e for e in log_events(attempt) if e.get("subtype") == "init"]
    assert init["sandbox_enabled"] is True, init
    assert "a - b" in git(Path(doc["_repo"]), "show", f"{doc['branch']}:calc.py")
    assert len(api.turns()) == 2


def log_events(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events claude printed in the attempt's log."""
    return [json.loads(line) for line in log_of(attempt).splitlines() if line.startswith('{"')]
