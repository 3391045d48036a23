"""The ``llm`` agent against a local chat-completions server, working in a real repository."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_testing import ChatServer, make_ctx

from orchardist.agents import agent_class
from orchardist.agents.llm import DONE, HISTORY, LlmAgent
from orchardist.confine.procs import CancelToken
from orchardist.state.agentrecords import AgentProfile, Failure
from support import make_repo, marked_processes

VERIFY = f"{shlex.quote(sys.executable)} -c 'import calc; assert calc.add(2, 3) == 5'"


def bash(command: str, thought: str = "Next step.") -> str:
    return f"{thought}\n\n```bash\n{command}\n```\n"


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    """A repository whose calc.py has an add() that subtracts (made once per test process and
    copied: no git add and commit per test)."""
    return make_repo(
        tmp_path / "repo",
        {
            "README.md": "hello\n",
            ".gitignore": "__pycache__/\n.pytest_cache/\n",
            "calc.py": "def add(a, b):\n    return a - b\n",
        },
    )


def llm(server: ChatServer, sleeps: list[float] | None = None, **options: Any) -> LlmAgent:
    opts = {"base_url": server.url, "model": "fake-model", **options}
    profile = AgentProfile("model", "llm", options=opts)
    return LlmAgent(profile, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def sent(server: ChatServer, n: int) -> list[dict[str, str]]:
    """The messages of the n-th request."""
    messages: list[dict[str, str]] = server.requests[n]["body"]["messages"]
    return messages


# -- the main path ------------------------------------------------------------------------------


def test_the_model_fixes_a_real_file_until_verify_passes(
    calc_repo: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model that looks, is throttled, hits a server error, fixes, checks, and is done
    monkeypatch.setenv("FAKE_LLM_KEY", "test-key")
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    chat_server.reply(bash("cat calc.py", "Let me look."), 100, 20)
    chat_server.error(429, {"Retry-After": "3"}, "Rate limit reached for requests")
    chat_server.error(500)
    chat_server.reply(bash("sed -i 's/a - b/a + b/' calc.py", "It subtracts."), 200, 30)
    chat_server.reply(bash("env"), 300, 10)
    chat_server.reply(bash(VERIFY, "Check it."), 400, 10)
    chat_server.reply(f"add() adds now.\n{DONE}\n", 500, 10)
    sleeps: list[float] = []
    agent = llm(chat_server, sleeps, api_key_env="FAKE_LLM_KEY", price_in=1.0, price_out=2.0)
    ctx = make_ctx(calc_repo, "llm")
    # When it runs
    result = agent.run(ctx)
    # Then it ended done, and the verify command passes on the real file
    assert (result.failure, result.exit_code) == (None, 0), result.detail
    assert result.detail == "add() adds now."
    assert subprocess.run(VERIFY, shell=True, cwd=calc_repo).returncode == 0
    # and usage was summed from the responses, priced from the profile
    assert (result.usage.turns, result.usage.input_tokens, result.usage.output_tokens) == (
        5,
        1500,
        80,
    )
    assert result.usage.cost_usd == pytest.approx((1500 * 1.0 + 80 * 2.0) / 1e6)
    # and the 429 waited its Retry-After, the 500 a backoff
    assert sleeps == [3.0, 2.0]
    assert len(chat_server.requests) == 7
    assert chat_server.requests[0]["headers"]["Authorization"] == "Bearer test-key"
    # and each command's output went back to the model
    assert "return a - b" in sent(chat_server, 3)[-1]["content"]
    assert sent(chat_server, 3)[-1]["content"].startswith("exit code: 0")
    env_output = sent(chat_server, 5)[-1]["content"]
    assert "ORCHARDIST_TASK=t1" in env_output
    assert "do-not-leak" not in env_output and "test-key" not in env_output


def test_the_transcript_and_log_are_kept_next_to_the_attempt_log(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    chat_server.reply(bash("echo hi"))
    chat_server.reply(DONE)
    ctx = make_ctx(calc_repo, "llm")
    llm(chat_server).run(ctx)
    transcript = json.loads(ctx.log.with_suffix(".transcript.json").read_text())
    assert [m["role"] for m in transcript["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert transcript["stop"].startswith("done")
    assert transcript["usage"]["input_tokens"] == 200
    log = ctx.log.read_text()
    assert "$ echo hi" in log and "hi\n" in log


def test_the_system_prompt_states_the_protocol(calc_repo: Path, chat_server: ChatServer) -> None:
    chat_server.reply(DONE)
    llm(chat_server, command_timeout="45s").run(make_ctx(calc_repo, "llm"))
    system, user = sent(chat_server, 0)
    assert DONE in system["content"] and "```bash" in system["content"]
    assert "45s timeout" in system["content"]
    assert user["content"] == make_ctx(calc_repo, "llm").prompt


def test_an_answer_without_exactly_one_command_is_sent_back(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    chat_server.reply("I think I should edit the file.")
    chat_server.reply(bash("ls") + bash("pwd"))
    chat_server.reply(DONE)
    result = llm(chat_server).run(make_ctx(calc_repo, "llm"))
    assert result.failure is None
    assert "0 command blocks" in sent(chat_server, 1)[-1]["content"]
    assert "2 command blocks" in sent(chat_server, 2)[-1]["content"]


def test_long_output_is_shortened_in_the_middle(calc_repo: Path, chat_server: ChatServer) -> None:
    chat_server.reply(bash("seq 1 20000"))
    chat_server.reply(DONE)
    llm(chat_server).run(make_ctx(calc_repo, "llm"))
    observation = sent(chat_server, 1)[-1]["content"]
    assert len(observation) < 11_000
    assert "characters omitted" in observation
    assert "\n1\n2\n" in observation and observation.rstrip().endswith("20000\n</output>")


# -- limits -------------------------------------------------------------------------------------


def test_max_turns_ends_the_attempt(calc_repo: Path, chat_server: ChatServer) -> None:
    for _ in range(3):
        chat_server.reply(bash("true"))
    result = llm(chat_server, max_turns=3).run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AGENT_ERROR
    assert "max_turns=3" in result.detail
    assert len(chat_server.requests) == 3


def test_max_cost_usd_ends_the_attempt(calc_repo: Path, chat_server: ChatServer) -> None:
    chat_server.reply(bash("true"), 1_000_000, 0)
    chat_server.reply(bash("true"), 1_000_000, 0)
    agent = llm(chat_server, price_in=0.6, price_out=2.4, max_cost_usd=1.0)
    result = agent.run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AGENT_ERROR
    assert "max_cost_usd" in result.detail
    assert result.usage.cost_usd == pytest.approx(1.2)


def test_a_slow_command_is_killed_at_command_timeout(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    chat_server.reply(bash("sleep 30"))
    chat_server.reply(DONE)
    ctx = make_ctx(calc_repo, "llm")
    result = llm(chat_server, command_timeout=1).run(ctx)
    assert result.failure is None
    assert "timed out after 1s" in sent(chat_server, 1)[-1]["content"]
    assert marked_processes(ctx.marker) == set()


# -- HTTP failures ------------------------------------------------------------------------------


def test_a_long_retry_after_ends_the_attempt_as_rate_limited(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    chat_server.error(429, {"Retry-After": "3600"}, "You exceeded your current quota")
    sleeps: list[float] = []
    result = llm(chat_server, sleeps).run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.RATE_LIMITED
    assert result.retry_after_s == 3600
    assert sleeps == []


def test_retries_are_bounded(calc_repo: Path, chat_server: ChatServer) -> None:
    for _ in range(7):  # more than the documented 5 retries would use
        chat_server.error(503)
    sleeps: list[float] = []
    result = llm(chat_server, sleeps).run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AGENT_ERROR
    assert "HTTP 503" in result.detail
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert len(chat_server.requests) == 6  # the first try and 5 retries (docs/agents.md)


def test_a_rejected_key_is_an_auth_error_without_retry(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    chat_server.error(401, message="Incorrect API key provided")
    result = llm(chat_server).run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AUTH_ERROR
    assert len(chat_server.requests) == 1


def test_an_unset_key_variable_is_an_auth_error(
    calc_repo: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    result = llm(chat_server, api_key_env="NO_SUCH_KEY").run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AUTH_ERROR
    assert "NO_SUCH_KEY" in result.detail
    assert chat_server.requests == []


def test_an_unreachable_server_is_retried_then_an_agent_error(calc_repo: Path) -> None:
    profile = AgentProfile("m", "llm", options={"base_url": "http://127.0.0.1:9", "model": "m"})
    sleeps: list[float] = []
    result = LlmAgent(profile, sleep=sleeps.append).run(make_ctx(calc_repo, "llm"))
    assert result.failure is Failure.AGENT_ERROR
    assert "cannot reach" in result.detail
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]  # 5 retries (docs/agents.md)


# -- cancellation and time ----------------------------------------------------------------------


def test_cancel_interrupts_a_pending_request(calc_repo: Path, chat_server: ChatServer) -> None:
    chat_server.stall()
    token = CancelToken()
    timer = threading.Timer(0.2, token.cancel, args=("run stopped",))
    timer.start()
    try:
        result = llm(chat_server).run(make_ctx(calc_repo, "llm", cancel=token))
    finally:
        timer.cancel()
    assert result.cancelled
    assert result.detail == "run stopped"
    assert result.duration_s < 5


def test_the_timeout_bounds_a_pending_request(calc_repo: Path, chat_server: ChatServer) -> None:
    chat_server.stall()
    result = llm(chat_server).run(make_ctx(calc_repo, "llm", timeout_s=0.5))
    assert result.failure is Failure.TIMEOUT
    assert result.duration_s < 5


# -- profile checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"model": "m"}, "base_url"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"base_url": "http://x"}, "model"),
        ({"base_url": "http://x", "model": "m", "api_key_env": "not a name"}, "api_key_env"),
        ({"base_url": "http://x", "model": "m", "max_cost_usd": 1}, "max_cost_usd"),
        ({"base_url": "http://x", "model": "m", "price_in": 1}, "price_in"),
        ({"base_url": "http://x", "model": "m", "command_timeout": "soon"}, "command_timeout"),
        ({"base_url": "http://x", "model": "m", "max_turns": 0}, "max_turns"),
    ],
)
def test_bad_options_are_reported(options: dict[str, Any], key: str) -> None:
    problems = agent_class("llm").check_options(options)
    assert key in [k for _, k in problems], problems


def test_good_options_pass() -> None:
    options = {
        "base_url": "http://localhost:11434/v1",
        "model": "qwen2.5-coder:14b",
        "max_turns": 30,
        "command_timeout": "2m",
        "price_in": 0,
        "price_out": 0,
        "max_cost_usd": 1,
    }
    assert agent_class("llm").check_options(options) == []


# -- continuing its conversation on the task's next attempt --------------------------------------


def test_a_continued_attempt_sends_the_earlier_messages_then_the_followup(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    # Given a first attempt that looked at calc.py and ended
    chat_server.reply(bash("cat calc.py", "Let me look."), 100, 20)
    chat_server.reply(f"Looked.\n{DONE}\n", 100, 10)
    first = make_ctx(calc_repo, "llm")
    assert llm(chat_server).run(first).failure is None
    kept = json.loads((first.home / HISTORY).read_text())
    # When its retry continues, told only what failed
    chat_server.reply(f"Fixed.\n{DONE}\n", 100, 10)
    again = dataclasses.replace(first, prompt="It failed: fix it.", resume="chatcmpl-1")
    result = llm(chat_server).run(again)
    # Then the retry's request is the first attempt's conversation, then the followup
    assert result.failure is None
    retry = sent(chat_server, 2)
    assert retry[:-1] == kept and len(kept) == 5  # system, brief, cat, its output, done
    assert "return a - b" in retry[3]["content"]  # what cat printed in the first attempt
    assert retry[-1] == {"role": "user", "content": "It failed: fix it."}


def test_a_continued_attempt_without_history_fails_before_any_request(
    calc_repo: Path, chat_server: ChatServer
) -> None:
    ctx = dataclasses.replace(make_ctx(calc_repo, "llm"), resume="chatcmpl-1")
    result = llm(chat_server).run(ctx)
    assert result.failure is Failure.AGENT_ERROR
    assert result.detail.startswith("no message history to continue")
    assert chat_server.requests == []
