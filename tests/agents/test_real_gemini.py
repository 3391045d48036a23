"""The real Gemini CLI (0.61.0, pinned by .ci/run) driven by ``orchardist run`` against a fake
Gemini API (tests/modelapi/gemini.py) that scripts its function calls.

Skipped with the reason when the tool is not installed; failed under CI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from egress import EgressProxy
from real_runs import events, only_task, reported, run_fix

from e2e_support import log_of
from modelapi.anthropic import ApiError, Text, ToolUse
from modelapi.gemini import (
    GeminiServer,
    Step,
    capacity_exhausted,
    rate_limited,
    unauthorized,
)
from orchardist.agents.gemini import MAX_ATTEMPTS
from realtools import require_tool
from support import git

pytestmark = pytest.mark.slow
FIX: list[Step] = [
    ToolUse("read_file", {"file_path": "{cwd}/calc.py"}),
    ToolUse(
        "replace",
        {
            "file_path": "{cwd}/calc.py",
            "old_string": "a - b",
            "new_string": "a + b",
            "instruction": "add, not subtract",
        },
    ),
    Text("Fixed add()."),
]


@pytest.fixture
def gemini(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real gemini (HOME is a fresh one, ``python`` this interpreter: conftest)."""
    exe = require_tool("gemini")
    monkeypatch.setenv("GEMINI_API_KEY", "test-gemini-key")
    return exe


def _run(
    tmp_path: Path,
    exe: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: list[Step],
    fail: ApiError | None = None,
    failures: int | None = None,
    profile: str = "",
) -> tuple[dict[str, Any], GeminiServer]:
    """Fix add() with the real gemini against a scripted fake API."""
    api = GeminiServer(script, fail=fail, failures=failures)
    settings = (
        f'kind = "gemini"\ncommand = {json.dumps(str(exe))}\nmodel = "gemini-2.5-pro"\n{profile}'
    )
    return run_fix(tmp_path, monkeypatch, api, "GOOGLE_GEMINI_BASE_URL", settings), api


# How many processes of the Gemini CLI the shell command runs under: its ancestors with an
# argument that is the path of gemini's script (node's, whatever its options; not the shell's
# nor Python's, whose code only mentions it). The attempt's own pid namespace ends the walk. Python,
# as gemini refuses a shell command with a command substitution.
COUNT_GEMINIS = """python3 -c "
import os
p, n = os.getpid(), 0
while p > 1:
    args = open(f'/proc/{p}/cmdline', 'rb').read().split(bytes(1))
    n += any(a.endswith(b'bin/gemini') for a in args)
    p = int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])
print('gemini processes:', n)"
"""


def test_gemini_fixes_a_failing_test_and_its_fix_is_merged(
    tmp_path: Path, gemini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that fixes add(), and asks for a shell command that counts the Gemini CLI
    # processes it runs under
    script = [*FIX[:2], ToolUse("run_shell_command", {"command": COUNT_GEMINIS}), FIX[2]]
    # And a proxy the profile passes for every HTTPS connection beyond the model's API
    with EgressProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        passed = 'env = ["HTTPS_PROXY", "NO_PROXY"]'
        doc, api = _run(tmp_path, gemini, monkeypatch, script, profile=passed)
    task = only_task(doc)
    assert task["state"] == "done", task
    (attempt,) = task["attempts"]
    assert attempt["state"] == "merged"
    repo = Path(doc["_repo"])
    assert "a + b" in git(repo, "show", f"{doc['branch']}:calc.py")
    # Tokens are the ones Gemini CLI reported (it reports no cost)
    stats = reported(attempt)["stats"]
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        stats["input_tokens"],
        stats["output_tokens"],
    )
    assert len(api.turns()) == 4
    # and it ran as one process (orchardist sets GEMINI_CLI_NO_RELAUNCH), not two: by default
    # the CLI starts itself again as a child, a second start of the whole bundle
    shell = [e for e in log_events(attempt) if e.get("type") == "tool_result"][-1]
    assert shell["output"].strip() == "gemini processes: 1", log_of(attempt)[-3000:]
    # and it went nowhere but the model's API: no usage statistics (orchardist turns them off
    # where the user's settings do not say), which probe the GPU and post to play.googleapis.com
    assert proxy.asked() == []


def log_events(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events gemini printed in the attempt's log."""
    return [json.loads(line) for line in log_of(attempt).splitlines() if line.startswith('{"')]


def test_an_edit_gemini_refuses_fails_the_attempt(
    tmp_path: Path, gemini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that only tries to edit a file outside its workspace
    script: list[Step] = [
        ToolUse("write_file", {"file_path": "{cwd}/../calc.py", "content": "x = 1\n"}),
        Text("I could not write the file."),
    ]
    doc, _ = _run(tmp_path, gemini, monkeypatch, script)
    task = only_task(doc)
    (attempt,) = task["attempts"]
    assert task["state"] == "failed", task
    assert attempt["failure"] == "no_changes", attempt
    assert "Path not in workspace" in log_of(attempt)
    assert "gemini refused 1 tool call(s)" in attempt["detail"], attempt["detail"]
    assert not (Path(doc["_repo"]).parent / "calc.py").exists()


def test_a_refused_key_is_an_auth_error_that_opens_the_breaker(
    tmp_path: Path, gemini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, _ = _run(tmp_path, gemini, monkeypatch, FIX, fail=unauthorized())
    task = only_task(doc)
    (attempt,) = task["attempts"]
    assert attempt["failure"] == "auth_error", attempt
    assert "API key not valid" in attempt["detail"]
    assert "\x1b" not in attempt["detail"]
    assert task["state"] == "failed"
    assert [e["state"] for e in events(doc, "breaker")] == ["open"]


class BusyThenOverQuota(GeminiServer):
    """As many 429s as Gemini CLI tries by itself, then answers: the model without capacity for
    all but the last try (a reply Gemini CLI retries after the 1 s it names), then the quota
    spent (one it would retry only after 5 s). A try more than :data:`MAX_ATTEMPTS` would be
    answered, within the attempt. (Gemini CLI retries "no capacity" silently at most three
    times, whatever its maxAttempts: the last 429 is the quota one, which obeys maxAttempts.)"""

    def __init__(self, script: list[Step]) -> None:
        super().__init__(script)
        self.errors = [capacity_exhausted(1)] * (MAX_ATTEMPTS - 1) + [rate_limited(1)]

    def failing(self, body: Mapping[str, Any]) -> ApiError | None:
        """The next 429 for a turn's request, until there are none left."""
        if not body.get("tools"):
            return None
        with self.lock:
            return self.errors.pop(0) if self.errors else None


def test_a_rate_limit_pauses_and_relaunches_without_counting_a_retry(
    tmp_path: Path, gemini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backend that answers 429 as often as Gemini CLI tries by itself, and no retries
    # (no capacity, then the quota: about 2 s of its own waiting, where three quota replies
    # took 15-18 s of its 5 s, 10 s back-off)
    api = BusyThenOverQuota(FIX)
    settings = f'kind = "gemini"\ncommand = {json.dumps(str(gemini))}\nmodel = "gemini-2.5-pro"\n'
    doc = run_fix(tmp_path, monkeypatch, api, "GOOGLE_GEMINI_BASE_URL", settings)
    task = only_task(doc)
    # Then Gemini CLI gave up after its own tries (orchardist caps them), and the attempt was
    # rate limited
    assert task["attempts"][0]["failure"] == "rate_limited", task
    assert task["state"] == "done", task
    # paused for the delay the API suggested ("Suggested retry after 1s."), not counted
    pauses = [e for e in events(doc, "attempt") if e.get("state") == "requeued"]
    assert [(e["failure"], e.get("retry_after_s")) for e in pauses] == [("rate_limited", 1.0)]


def test_a_turn_limit_stops_gemini_and_keeps_the_tokens_it_reported(
    tmp_path: Path, gemini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that reads the file forever, and a profile allowing two turns (gemini reports
    # tokens only when it ends, so its budget is a turn limit: model.maxSessionTurns)
    script: list[Step] = [ToolUse("read_file", {"file_path": "{cwd}/calc.py"})] * 8
    doc, api = _run(tmp_path, gemini, monkeypatch, script, profile="max_turns = 2")
    (attempt,) = only_task(doc)["attempts"]
    # Then gemini stopped itself at the limit (exit 53), and the attempt failed saying so
    assert attempt["failure"] == "agent_error", attempt
    assert "turn limit exceeded (exit 53)" in attempt["detail"], attempt["detail"]
    assert len(api.turns()) == 2
    # with the tokens it reported for those turns
    stats = reported(attempt)["stats"]
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        stats["input_tokens"],
        stats["output_tokens"],
    )
    assert attempt["input_tokens"] > 0
