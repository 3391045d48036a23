"""The real Claude Code (2.1.332, pinned by .ci/run) driven by ``orchardist run`` against a fake
Anthropic Messages API (tests/modelapi/anthropic.py) that scripts its tool calls.

Skipped with the reason when the tool is not installed; failed under CI.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e_support import log_of, python_on_path
from modelapi.anthropic import AnthropicServer, ApiError, Step, Text, ToolUse, unauthorized
from modelapi.anthropic import rate_limited as too_many
from orchardist import Workspace
from realtools import require_tool
from run_support import only_run, orchardist, status
from support import git, make_repo, write_plan

pytestmark = pytest.mark.slow
# Claude Code refuses every edit under .git, where attempt worktrees lived before AttemptPaths.
OUTSIDE_GIT = importlib.util.find_spec("orchardist.worktree") is not None
RUN_TIMEOUT_S = 300.0  # the whole `orchardist run`; each finishes in seconds when all is well
BUGGY = "def add(a, b):\n    return a - b\n"
VERIFY = "python -c 'import calc; assert calc.add(2, 3) == 5'"
FIX = [
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "Let me look."),
    ToolUse("Edit", {"file_path": "{cwd}/calc.py", "old_string": "a - b", "new_string": "a + b"}),
    Text("Fixed add()."),
]


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real claude (HOME is a fresh one: conftest), and this interpreter as ``python``."""
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES", raising=False)
    python_on_path(monkeypatch)
    yield exe


def run_claude(
    tmp_path: Path,
    exe: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: list[Step],
    fail: ApiError | None = None,
    failures: int | None = None,
    profile: str = "",
) -> tuple[dict[str, Any], AnthropicServer]:
    """``orchardist run`` of one task (fix add()) with the real claude; its status document."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    write_plan(
        repo,
        f"""
        [agents.claude]
        kind = "claude"
        command = {json.dumps(str(exe))}
        timeout = "4m"
        circuit_breaker = 1
        {profile}

        [[task]]
        id = "fix"
        title = "Fix add"
        prompt = "add() in calc.py subtracts; make it add."
        agent = "claude"
        verify = {json.dumps(VERIFY)}
        retries = 0
        """,
    )
    with AnthropicServer(script, fail=fail, failures=failures) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        done = orchardist(repo, "run", "plan.toml", timeout_s=RUN_TIMEOUT_S)
    assert done.returncode in (0, 1), done.stderr
    doc = status(repo, only_run(repo))
    doc["_repo"] = str(repo)
    return doc, api


def reported(attempt: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` event Claude Code printed in the attempt's log."""
    results = [
        json.loads(line)
        for line in log_of(attempt).splitlines()
        if line.startswith('{"') and '"type":"result"' in line
    ]
    assert len(results) == 1, log_of(attempt)[-3000:]
    result: dict[str, Any] = results[0]
    return result


def the_task(doc: dict[str, Any]) -> dict[str, Any]:
    (task,) = doc["tasks"]
    return task  # type: ignore[no-any-return]


def tokens_reported(result: dict[str, Any]) -> tuple[int, int]:
    models = result["modelUsage"].values()
    keys_in = ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    return (
        sum(m[k] for m in models for k in keys_in),
        sum(m["outputTokens"] for m in models),
    )


@pytest.mark.skipif(
    not OUTSIDE_GIT,
    reason="attempt worktrees still live under .git, where Claude Code refuses every edit"
    " (issue 11; helper ws moves them out)",
)
def test_claude_fixes_a_failing_test_and_its_fix_is_merged(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, api = run_claude(tmp_path, claude, monkeypatch, FIX)
    task = the_task(doc)
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
    doc, _ = run_claude(tmp_path, claude, monkeypatch, script)
    task = the_task(doc)
    (attempt,) = task["attempts"]
    # Then the attempt fails (nothing changed), and the refusal is in its detail
    assert task["state"] == "failed", task
    assert attempt["failure"] in ("no_changes", "verify_failed"), attempt
    assert "Claude Code refused 1 tool call(s)" in log_of(attempt)


def test_a_refused_key_is_an_auth_error_that_opens_the_breaker(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, api = run_claude(tmp_path, claude, monkeypatch, FIX, fail=unauthorized())
    task = the_task(doc)
    (attempt,) = task["attempts"]
    assert attempt["failure"] == "auth_error", attempt
    assert "Invalid API key" in attempt["detail"]
    assert task["state"] == "failed"
    # Claude Code's own retries are capped (3 requests, not 11)
    assert len(api.turns()) == 3
    assert [e["state"] for e in events(doc, "breaker")] == ["open"]


def test_a_rate_limit_pauses_and_relaunches_without_counting_a_retry(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backend that answers 429 more often than Claude Code retries by itself (twice)
    # And a plan that allows no retries
    doc, _ = run_claude(tmp_path, claude, monkeypatch, FIX, fail=too_many(2), failures=3)
    task = the_task(doc)
    # Then the rate-limited attempt was requeued, and the next one merged the fix
    assert task["attempts"][0]["failure"] == "rate_limited"
    assert task["state"] == ("done" if OUTSIDE_GIT else "failed"), task
    assert "requeued" in [e.get("state") for e in events(doc, "attempt")]


def test_a_budget_stop_keeps_the_usage_claude_reported(
    tmp_path: Path, claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that reads forever, and a budget that covers two requests
    script: list[Step] = [ToolUse("Read", {"file_path": "{cwd}/calc.py"})] * 8
    doc, api = run_claude(tmp_path, claude, monkeypatch, script, profile="max_cost_usd = 0.01")
    (attempt,) = the_task(doc)["attempts"]
    result = reported(attempt)
    assert result["subtype"] == "error_max_budget_usd"
    assert attempt["failure"] == "agent_error"
    assert "Reached maximum budget" in attempt["detail"]
    # The whole session's usage is kept, not the last turn's
    assert attempt["cost_usd"] == pytest.approx(result["total_cost_usd"])
    assert (attempt["input_tokens"], attempt["output_tokens"]) == tokens_reported(result)
    assert attempt["input_tokens"] > result["usage"]["input_tokens"]
    assert len(api.turns()) < len(script)


def events(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The data of the run's events of one kind, from the store."""
    ws = Workspace.open(Path(doc["_repo"]))
    try:
        return [dict(e.data) for e in ws.store.events(doc["run"]) if e.kind == kind]
    finally:
        ws.store.close()
