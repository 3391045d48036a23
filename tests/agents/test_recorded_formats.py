"""The adapters read the streams the real tools printed: Claude Code 2.1.332, Gemini CLI 0.61.0.

The fixtures under tests/fixtures/agents/KIND/ were recorded from the real tools driven against
tests/modelapi/anthropic.py (each request 1200 input and 80 output tokens) and
tests/modelapi/gemini.py (1500 and 60).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.agents import AgentContext, AgentResult, make_agent
from orchardist.agents.cli import CliAgent, Seen, plain
from orchardist.plan import AgentProfile
from orchardist.procs import CancelToken, ProcessResult
from orchardist.records import Failure

FIXTURES = Path(__file__).parent.parent / "fixtures" / "agents"


def replay(
    name: str, exit_code: int, tmp_path: Path, kind: str = "claude"
) -> tuple[Seen, AgentResult]:
    """Feed a recorded stream to the adapter; the Seen and the AgentResult."""
    agent = make_agent(AgentProfile(kind, kind, options={}))
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
        env={},
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
