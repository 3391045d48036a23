"""The adapters read the streams the real tools printed, and the fakes print the same formats.

Claude Code 2.1.332, Gemini CLI 0.61.0, Codex 0.171.0, OpenCode 1.18.33 and aider 0.86.2. The
fixtures under tests/fixtures/agents/KIND/ were recorded from the real tools driven against
tests/modelapi/anthropic.py (each request 1200 input and 80 output tokens),
tests/modelapi/gemini.py (1500 and 60) and tests/modelapi/openai.py (1000 and 50); codex,
opencode, aider and gemini's turn limit by tests/agents/record_formats.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchardist.agents import make_agent
from orchardist.agents.cli import CliAgent, Seen
from orchardist.agents.context import AgentContext, AgentResult
from orchardist.confine.procs import CancelToken, ProcessResult
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.terminal import plain

FIXTURES = Path(__file__).parent.parent / "fixtures" / "agents"


def replay(
    name: str,
    exit_code: int,
    tmp_path: Path,
    kind: str = "claude",
    options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Seen, AgentResult]:
    """Feed a recorded stream to the adapter; the Seen and the AgentResult."""
    agent = make_agent(AgentProfile(kind, kind, options=options or {}))
    assert isinstance(agent, CliAgent)
    seen = Seen()
    for line in (FIXTURES / kind / name).read_bytes().splitlines():
        agent.feed(seen, line)
    ctx = AgentContext(
        run_id="r",
        task_id="t",
        attempt=1,
        candidate=0,
        title="t",
        prompt="p",
        worktree=tmp_path,
        cwd=tmp_path,
        prompt_file=tmp_path / "prompt",
        output_file=tmp_path / "output",
        log=tmp_path / "log",
        env=env or {},
        timeout_s=60,
        cancel=CancelToken(),
        marker="m",
    )
    return seen, agent.result(ProcessResult(exit_code, 1.0), seen, ctx)


def test_an_edit_reads_cost_tokens_turns_and_the_answer(tmp_path: Path) -> None:
    seen, result = replay("edit.jsonl", 0, tmp_path)
    assert (seen.input_tokens, seen.output_tokens, seen.turns) == (2400, 160, 2)
    assert seen.cost_usd == pytest.approx(0.0128)
    assert result.failure is None
    assert result.detail == "Fixed add."


def test_a_budget_stop_keeps_the_whole_sessions_tokens(tmp_path: Path) -> None:
    # Given a stream stopped by --max-budget-usd: its ``usage`` holds only the last turn
    seen, result = replay("budget.jsonl", 1, tmp_path)
    # Then the tokens come from modelUsage, which counts both requests
    assert (seen.input_tokens, seen.output_tokens) == (2400, 160)
    assert seen.cost_usd == pytest.approx(0.0128)
    assert result.failure is Failure.AGENT_ERROR
    assert "Reached maximum budget" in result.detail


def test_refused_tool_calls_are_reported_in_the_detail(tmp_path: Path) -> None:
    _, result = replay("deny.jsonl", 0, tmp_path)
    detail = result.detail
    assert "Claude Code refused 1 tool call(s)" in detail
    assert "- Write /" in detail and ".git/hooks/pre-commit" in detail
    assert detail.endswith("Could not edit.")


@pytest.mark.parametrize(
    ("name", "failure", "said"),
    [
        ("auth_401.jsonl", Failure.AUTH_ERROR, "Invalid API key"),
        ("rate_429.jsonl", Failure.RATE_LIMITED, "Request rejected (429)"),
    ],
)
def test_api_errors_are_classified_by_status(
    name: str, failure: Failure, said: str, tmp_path: Path
) -> None:
    seen, result = replay(name, 1, tmp_path)
    assert result.failure is failure
    assert said in result.detail
    assert (seen.input_tokens, seen.output_tokens) == (0, 0)


def test_details_lose_terminal_escapes() -> None:
    coloured = "\x1b[31mError:\x1b[0m no\x1b]0;title\x07 trust\x07\tok\n"
    assert plain(coloured) == "Error: no trust\tok\n"


def test_gemini_edit_reads_tokens_turns_and_the_answer(tmp_path: Path) -> None:
    seen, result = replay("edit.jsonl", 0, tmp_path, "gemini")
    assert (seen.input_tokens, seen.output_tokens) == (4500, 180)  # its router's request too
    assert seen.session_id == "042c5c33-60c2-48c1-b1d0-d5a93714d366"
    assert seen.turns == 2
    assert result.failure is None
    assert result.detail == "Fixed add."


@pytest.mark.parametrize(
    ("name", "exit_code", "failure", "said"),
    [
        ("auth_400.jsonl", 144, Failure.AUTH_ERROR, "API key not valid"),
        ("rate_429.jsonl", 173, Failure.RATE_LIMITED, "exceeded your current quota"),
    ],
)
def test_gemini_api_errors_are_classified_from_its_messages(
    name: str, exit_code: int, failure: Failure, said: str, tmp_path: Path
) -> None:
    _, result = replay(name, exit_code, tmp_path, "gemini")
    assert result.failure is failure
    assert said in result.detail
    if failure is Failure.RATE_LIMITED:
        assert result.retry_after_s == 1.0  # "Suggested retry after 1s."


# -- codex ------------------------------------------------------------------------------------

PRICES = {"price_in": 1.25, "price_out": 10.0}


def test_codex_edit_reads_tokens_and_the_answer(tmp_path: Path) -> None:
    seen, result = replay("edit.jsonl", 0, tmp_path, "codex", PRICES)
    assert (seen.input_tokens, seen.output_tokens, seen.turns) == (3000, 150, 1)
    assert result.usage.cost_usd == pytest.approx((3000 * 1.25 + 150 * 10.0) / 1e6)
    assert (result.failure, result.detail) == (None, "Fixed add.")


def test_codex_session_log_gives_the_same_totals_as_its_stream(tmp_path: Path) -> None:
    # Given the session log codex wrote during the recorded edit, where orchardist reads
    # the running totals for max_cost_usd
    seen, _ = replay("edit.jsonl", 0, tmp_path, "codex", PRICES)
    sessions = tmp_path / "home" / ".codex" / "sessions" / "2026" / "12" / "02"
    sessions.mkdir(parents=True)
    log = (FIXTURES / "codex" / "edit.session.jsonl").read_text()
    (sessions / f"rollout-2026-12-02T03-56-04-{seen.session_id}.jsonl").write_text(log)
    # When the adapter reads it as it would while codex runs (stream totals not yet known)
    agent = make_agent(AgentProfile("codex", "codex", options=PRICES))
    running = Seen(session_id=seen.session_id)
    spent = agent.spent_usd(running, _ctx(tmp_path, {"HOME": str(tmp_path / "home")}))
    # Then its last token_count is the turn's usage, priced
    assert running.state["session_tokens"] == (seen.input_tokens, seen.output_tokens)
    assert spent == pytest.approx((3000 * 1.25 + 150 * 10.0) / 1e6)


@pytest.mark.parametrize("trap", ["fifo", "link to /dev/zero"])
def test_a_session_log_made_a_trap_by_the_agent_is_not_read(tmp_path: Path, trap: str) -> None:
    # Given a "session log" the agent left in its (writable) home: a FIFO, or a link to an
    # endless file
    sessions = tmp_path / "home" / ".codex" / "sessions" / "2026" / "12" / "02"
    sessions.mkdir(parents=True)
    log = sessions / "rollout-2026-12-02T03-56-04-abc.jsonl"
    if trap == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero")
    # When the adapter looks for the running totals (a blocking open would never return)
    agent = make_agent(AgentProfile("codex", "codex", options=PRICES))
    running = Seen(session_id="abc")
    spent = agent.spent_usd(running, _ctx(tmp_path, {"HOME": str(tmp_path / "home")}))
    # Then it returns at once, having read nothing
    assert "session_tokens" not in running.state
    assert running.state.get("session_offset", 0) == 0
    assert spent is None or spent == 0


@pytest.mark.parametrize(
    ("name", "failure", "said"),
    [
        ("refused.jsonl", None, "codex could not write any file (its sandbox refused)"),
        ("auth_401.jsonl", Failure.AUTH_ERROR, "401 Unauthorized"),
        ("rate_429.jsonl", Failure.RATE_LIMITED, "last status: 429"),
    ],
)
def test_codex_failures_are_classified(
    name: str, failure: Failure | None, said: str, tmp_path: Path
) -> None:
    # (an unchanged worktree then fails a refused attempt as no_changes)
    exit_code = 0 if name == "refused.jsonl" else 1
    _, result = replay(name, exit_code, tmp_path, "codex")
    assert result.failure is failure
    assert said in result.detail
    assert "Reconnecting" not in result.detail


# -- opencode ---------------------------------------------------------------------------------


def test_opencode_edit_reads_its_cost_and_tokens(tmp_path: Path) -> None:
    seen, result = replay("edit.jsonl", 0, tmp_path, "opencode")
    assert (seen.input_tokens, seen.output_tokens, seen.turns) == (2000, 100, 2)
    assert seen.cost_usd == pytest.approx(2 * (1000 * 1.25 + 50 * 10.0) / 1e6)
    assert (result.failure, result.detail) == (None, "Fixed add.")


def test_opencode_says_which_tool_calls_its_permissions_refused(tmp_path: Path) -> None:
    _, result = replay("refused.jsonl", 0, tmp_path, "opencode")
    assert result.failure is None  # it ends normally: "changed nothing" fails the attempt
    assert result.detail.startswith("opencode refused 1 tool call(s) (permission): apply_patch")


@pytest.mark.parametrize(
    ("name", "failure", "said", "retry_after_s"),
    [
        ("auth_401.jsonl", Failure.AUTH_ERROR, "Incorrect API key", None),
        ("rate_429.jsonl", Failure.RATE_LIMITED, "Rate limit reached", 1.0),
    ],
)
def test_opencode_failures_are_classified_with_the_reset_time(
    name: str, failure: Failure, said: str, retry_after_s: float | None, tmp_path: Path
) -> None:
    _, result = replay(name, 1, tmp_path, "opencode")
    assert result.failure is failure
    assert said in result.detail
    assert result.retry_after_s == retry_after_s


# -- aider ------------------------------------------------------------------------------------


def test_aider_edit_reads_its_tokens(tmp_path: Path) -> None:
    seen, result = replay("edit.txt", 0, tmp_path, "aider")
    assert (seen.input_tokens, seen.output_tokens, seen.turns) == (1000, 50, 1)
    assert result.failure is None


def test_aider_says_which_edits_it_skipped(tmp_path: Path) -> None:
    _, result = replay("refused.txt", 0, tmp_path, "aider")
    assert result.failure is None
    assert result.detail == (
        "aider: Skipping edits to __pycache__/notes.py that matches gitignore spec."
    )


@pytest.mark.parametrize(
    ("name", "failure", "retry_after_s"),
    [("auth_401.txt", Failure.AUTH_ERROR, None), ("rate_429.txt", Failure.RATE_LIMITED, 1.0)],
)
def test_aider_failures_are_classified_though_it_exits_0(
    name: str, failure: Failure, retry_after_s: float | None, tmp_path: Path
) -> None:
    _, result = replay(name, 0, tmp_path, "aider")
    assert result.failure is failure
    assert result.retry_after_s == retry_after_s


# -- gemini's turn limit and refusals ---------------------------------------------------------


def test_gemini_says_which_tool_calls_it_refused(tmp_path: Path) -> None:
    _, result = replay("refused.jsonl", 0, tmp_path, "gemini")
    assert result.failure is None  # it ends normally: "changed nothing" fails the attempt
    assert result.detail.startswith("gemini refused 1 tool call(s):\n- write_file: Path not in")
    assert result.detail.endswith("I could not write the file.")


def test_gemini_turn_limit_keeps_its_tokens(tmp_path: Path) -> None:
    seen, result = replay("turn_limit.jsonl", 53, tmp_path, "gemini")
    assert (seen.input_tokens, seen.output_tokens) == (3000, 120)
    assert result.failure is Failure.AGENT_ERROR
    assert result.detail.startswith("gemini: turn limit exceeded (exit 53): Reached max session")


# -- the hand-written fakes print what the real tools print -----------------------------------

FAKES = Path(__file__).parent / "fakes"
JSON_KINDS = ("claude", "codex", "gemini", "opencode")
# events no recording can hold: Claude Code sends rate_limit_event to subscriptions only
UNRECORDED = {"rate_limit_event"}


def shapes(lines: list[str]) -> dict[str, set[str]]:
    """For each event type, the key paths (``part.tokens.input``) its events carry."""
    found: dict[str, set[str]] = {}
    for line in lines:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        found.setdefault(str(event.get("type")), set()).update(_paths(event))
    return found


TOOL_ARGUMENTS = ("parameters", "input")  # the model's own arguments to a tool: any shape
BY_MODEL = ("modelUsage", "models")  # tables keyed by model name


def _paths(value: Any, prefix: str = "") -> set[str]:
    parent = prefix.rstrip(".").rsplit(".", 1)[-1]
    if not isinstance(value, dict) or parent in TOOL_ARGUMENTS:
        return set()
    paths = set()
    for key, inner in value.items():
        name = "*" if parent in BY_MODEL else key
        paths.add(prefix + name)
        paths |= _paths(inner, f"{prefix}{name}.")
    return paths


def fake_output(kind: str, mode: str, tmp_path: Path) -> list[str]:
    """What the fake of ``kind`` prints in ``mode``."""
    home = tmp_path / f"{kind}-{mode}"
    home.mkdir()
    (home / ".fake-agents.json").write_text(json.dumps({"mode": mode}))
    message = home / "message.md"
    message.write_text("p")
    argv = {"aider": ["--message-file", str(message)], "claude": ["-p"]}.get(kind, ["-p", "p"])
    proc = subprocess.run(
        [sys.executable, str(FAKES / kind), *argv],
        cwd=home,
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        input="p",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout.splitlines()


@pytest.mark.parametrize("kind", JSON_KINDS)
def test_each_fake_event_has_only_fields_the_real_tool_prints(kind: str, tmp_path: Path) -> None:
    # Given everything the real tool printed across its recordings
    real = shapes(
        [line for f in (FIXTURES / kind).glob("*.jsonl") for line in f.read_text().splitlines()]
    )
    real = {k: v for k, v in real.items() if "session" not in k}
    # Then every event the fake prints is of a type the tool prints, with fields it prints
    for mode in ("ok", "auth", "rate_limit"):
        for event_type, paths in shapes(fake_output(kind, mode, tmp_path)).items():
            if event_type in UNRECORDED:
                continue
            assert event_type in real, (mode, event_type)
            invented = paths - real[event_type]
            assert not invented, (mode, event_type, sorted(invented))


AIDER_LINES = {
    "tokens": r"^Tokens: [\d.]+k? sent, ",
    "error": r"^litellm\.\w+Error: \w+Error: ",
    "explained": r"^The API provider ",
}


def test_the_aider_fake_prints_the_lines_the_real_aider_prints(tmp_path: Path) -> None:
    import re

    real = "\n".join(f.read_text() for f in (FIXTURES / "aider").glob("*.txt"))
    fake = "\n".join(
        line
        for mode in ("ok", "auth", "rate_limit")
        for line in fake_output("aider", mode, tmp_path)
    )
    for name, pattern in AIDER_LINES.items():
        assert re.search(pattern, fake, re.MULTILINE), name
        assert re.search(pattern, real, re.MULTILINE), name


def _ctx(tmp_path: Path, env: dict[str, str]) -> AgentContext:
    return AgentContext(
        run_id="r",
        task_id="t",
        attempt=1,
        candidate=0,
        title="t",
        prompt="p",
        worktree=tmp_path,
        cwd=tmp_path,
        prompt_file=tmp_path / "prompt",
        output_file=tmp_path / "output",
        log=tmp_path / "log",
        env=env,
        timeout_s=60,
        cancel=CancelToken(),
        marker="m",
    )
