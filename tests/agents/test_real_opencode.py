"""The real OpenCode CLI (``opencode-ai``, installed by ``.ci/tools.sh``) against a fake OpenAI API.

OpenCode reaches :class:`modelapi.openai.OpenAiServer` through an OpenAI-compatible provider
declared in ``OPENCODE_CONFIG_CONTENT`` (streamed chat completions, with the model's prices so
that OpenCode reports a cost). Skipped when opencode is not installed, failed instead when CI is
set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from real_support import (
    BUGGY,
    PROMPT,
    VERIFY,
    breaker_states,
    buggy_project,
    npm_links_first,
    requeued,
    run_task,
    run_tasks,
)

from e2e_support import log_of
from modelapi.openai import INPUT_TOKENS, OUTPUT_TOKENS, Call, OpenAiServer, Text, rate_limited
from modelapi.openai import unauthorized as refused_key
from realtools import require_tool
from support import toml_str

pytestmark = pytest.mark.slow

FIX = Call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix add"})
PRICE_IN, PRICE_OUT = 1.25, 10.0  # per million tokens, told to opencode, which prices itself
STEP_USD = (INPUT_TOKENS * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT) / 1e6  # what one step costs


@pytest.fixture
def opencode() -> Path:
    return require_tool("opencode")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_project(tmp_path)


def run_opencode(
    project: Path,
    opencode: Path,
    api: OpenAiServer,
    tmp_path: Path,
    task_keys: str = "",
    **settings: Any,
) -> dict[str, Any]:
    """``orchardist run`` of the fix task with opencode against ``api``; the task's status."""
    profile = {"kind": "opencode", "command": str(opencode), "model": "fake/gpt-fake-1", **settings}
    return run_task(project, profile, opencode_env(fake=api), tmp_path, task_keys)


def opencode_env(**apis: OpenAiServer) -> dict[str, str]:
    """The environment that declares each fake API as a provider of that name (the models'
    prices told, so that opencode reports a cost), with the key they expect."""
    model = {"name": "Fake", "cost": {"input": PRICE_IN, "output": PRICE_OUT}}
    providers = {
        name: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{api.url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {"gpt-fake-1": model},
        }
        for name, api in apis.items()
    }
    return {
        "OPENAI_API_KEY": "sk-fake-key",
        "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": providers}),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }


@dataclass(frozen=True)
class Fixed:
    """A finished run of the fix task: its task's status, and the fake API it talked to."""

    task: dict[str, Any]
    api: OpenAiServer


@pytest.fixture(scope="module")
def _runs() -> dict[str, Any]:
    """The module's runs that several tests only read, made once (each costs an OpenCode
    start, ~7 s of CPU)."""
    return {}


@pytest.fixture
def fixed(
    _runs: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Fixed:
    """One run of the fix task with opencode installed under the host's /tmp (which attempts do
    not see) and started by name from npm's ``.bin`` link on PATH, against a fake OpenAI API
    that answers with a shell command fixing add(), then a message. Made by the first test that
    asks (in its environment: the suite's git, its attempt folders), read by the others."""
    if "fix" not in _runs:
        require_tool("opencode")
        folder = tmp_path_factory.mktemp("opencode-fix")
        bin_dir = npm_links_first(folder / "tools", monkeypatch)
        assert (bin_dir / "opencode").is_symlink()
        with OpenAiServer([FIX, Text("Fixed add().")]) as api:
            task = run_opencode(buggy_project(folder), Path("opencode"), api, folder)
        _runs["fix"] = Fixed(task, api)
    fix: Fixed = _runs["fix"]
    return fix


def test_opencode_from_npm_links_under_tmp_fixes_and_merges(fixed: Fixed) -> None:
    # Given opencode from npm's links under /tmp, started by name (the fixture's run)
    # Then the fix merged: orchardist showed the attempt the install it does not otherwise see
    assert fixed.task["state"] == "done", fixed.task
    assert [a["state"] for a in fixed.task["attempts"]] == ["merged"], fixed.task


def test_opencode_fixes_the_bug_and_the_fix_merges_with_its_reported_cost(fixed: Fixed) -> None:
    # Given a fake OpenAI API that answers with a shell command fixing add(), then a message
    # When orchardist runs opencode on the task (the fixture's run)
    task, api = fixed.task, fixed.api
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
    # and opencode made no model call that it reports no cost for (a session title, say)
    assert [r for r in api.model_calls if not r.body.get("tools")] == []
    # and it kept no snapshots of the worktree (orchardist's diff is the record): no step
    # carries the hash of a tree opencode recorded, as each did with its snapshots on
    steps_started = [e["part"] for e in log_events(attempt) if e.get("type") == "step_start"]
    assert len(steps_started) == 2, steps_started
    assert [p for p in steps_started if "snapshot" in p] == [], steps_started


def test_a_refused_key_is_an_auth_error(opencode: Path, project: Path, tmp_path: Path) -> None:
    # Given an API that refuses the key (401)
    with OpenAiServer(fail=refused_key()) as api:
        task = run_opencode(project, opencode, api, tmp_path)
    # Then the attempt failed with auth_error
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "auth_error"), task
    # and the profile's circuit breaker opened at once: a refused key will not get better
    assert breaker_states(project) == ["open"]


def test_a_rate_limit_pauses_and_the_task_is_retried_without_spending_a_retry(
    opencode: Path, project: Path, tmp_path: Path
) -> None:
    # Given an API that answers 429 with reset headers to opencode's first session (100 ms:
    # retry-after-ms, which opencode's own retries wait for; retry-after says 1 s), and a task
    # with no retries
    limit = rate_limited(0.1)
    with OpenAiServer([FIX, Text("Fixed add().")], limit, fail_conversations=1) as api:
        task = run_opencode(project, opencode, api, tmp_path)
    # Then the first attempt was rate limited (reset read from its headers), the second merged
    first, second = task["attempts"]
    assert first["failure"] == "rate_limited", first
    # paused for the reset time the tool reported (the precise one), not counted against the
    # task's retries
    assert [(e["failure"], e.get("retry_after_s")) for e in requeued(project)] == [
        ("rate_limited", 0.1)
    ]
    assert (task["state"], second["state"]) == ("done", "merged"), task


def test_an_edit_opencode_refuses_fails_the_attempt_with_no_changes(
    opencode: Path, project: Path, tmp_path: Path
) -> None:
    # Given a model that only tries to write a file outside the worktree, which orchardist's
    # permission table has opencode deny (external_directory)
    outside = tmp_path / "outside.py"
    patch = f"*** Begin Patch\n*** Add File: {outside}\n+x = 1\n*** End Patch"
    write = Call("apply_patch", {"patchText": patch})
    with OpenAiServer([write, Text("I could not write the file.")]) as api:
        task = run_opencode(project, opencode, api, tmp_path)
    # Then nothing was written, and the attempt failed for changing nothing
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "no_changes"), task
    assert not outside.exists()
    assert "opencode refused 1 tool call(s) (permission): apply_patch" in attempt["detail"]
    # because opencode refused the tool call (not, say, because the tool was unknown)
    (tool,) = [e["part"] for e in log_events(attempt) if e.get("type") == "tool_use"]
    assert (tool["tool"], tool["state"]["status"]) == ("apply_patch", "error"), tool
    assert "permission" in tool["state"]["error"].lower(), tool
    assert (project / "calc.py").read_text() == BUGGY


@dataclass(frozen=True)
class Stopped:
    """A finished budget stop: the task's status, and the model calls opencode made for it."""

    task: dict[str, Any]
    calls: int


@pytest.fixture
def stopped(
    _runs: dict[str, Any], opencode: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Stopped]:
    """One run of two tasks whose model reads calc.py forever, each against a fake API of its
    own: ``fix`` on a profile whose ``max_cost_usd`` covers one and a half steps, ``capped`` on
    a profile with no budget, but whose own ``max_cost_usd`` covers as much. Made by the first
    test that asks, read by both (one ``orchardist run`` instead of two); by task id."""
    if "stopped" not in _runs:
        folder = tmp_path_factory.mktemp("opencode-budgets")
        read = Call("read", {"filePath": "calc.py"})
        with OpenAiServer([read] * 20) as api, OpenAiServer([read] * 20) as other:
            profile = {
                "kind": "opencode",
                "command": str(opencode),
                "model": "fake/gpt-fake-1",
                "max_cost_usd": STEP_USD * 1.5,
            }
            more = (
                f'[agents.unbounded]\nkind = "opencode"\ncommand = {toml_str(opencode)}\n'
                'model = "other/gpt-fake-1"\ntimeout = "120s"\nenv = ["NPM_CONFIG_REGISTRY"]\n\n'
                f'[[task]]\nid = "capped"\nagent = "unbounded"\nretries = 0\n'
                f"prompt = {toml_str(PROMPT)}\nverify = {toml_str(VERIFY)}\n"
                f"max_cost_usd = {STEP_USD * 1.5}\n"
            )
            env = opencode_env(fake=api, other=other)
            tasks = run_tasks(buggy_project(folder), profile, env, folder, more)
        _runs["stopped"] = {
            "fix": Stopped(tasks["fix"], steps_asked(api)),
            "capped": Stopped(tasks["capped"], steps_asked(other)),
        }
    stops: dict[str, Stopped] = _runs["stopped"]
    return stops


def steps_asked(api: OpenAiServer) -> int:
    """The model calls opencode made for its steps (not for a title, say)."""
    return len([r for r in api.model_calls if r.body.get("tools")])


def test_a_budget_stop_ends_opencode_and_keeps_the_usage_it_reported(
    stopped: dict[str, Stopped],
) -> None:
    # Given a model that reads the file forever, and a budget that covers two of its steps
    task, calls = stopped["fix"].task, stopped["fix"].calls
    # Then orchardist stopped it once its reported cost reached the budget
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "agent_error"), task
    assert "budget spent" in attempt["detail"], attempt["detail"]
    assert calls < 20
    # and the attempt keeps the cost and tokens opencode reported for the steps it finished
    steps = round(attempt["cost_usd"] / STEP_USD)
    assert steps >= 2 and attempt["cost_usd"] == pytest.approx(steps * STEP_USD)
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        INPUT_TOKENS * steps,
        OUTPUT_TOKENS * steps,
    )


def log_events(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events opencode printed in the attempt's log."""
    return [json.loads(line) for line in log_of(attempt).splitlines() if line.startswith('{"')]


def test_the_tasks_max_cost_usd_stops_a_running_opencode_too(
    stopped: dict[str, Stopped],
) -> None:
    # Given no budget in the profile, but a task whose max_cost_usd covers less than two steps
    task, calls = stopped["capped"].task, stopped["capped"].calls
    # Then the attempt was stopped at the task's budget, and no other attempt started
    (attempt,) = task["attempts"]
    assert attempt["failure"] == "agent_error", attempt
    assert "budget spent" in attempt["detail"], attempt["detail"]
    assert calls < 20 and attempt["cost_usd"] >= STEP_USD * 1.5
