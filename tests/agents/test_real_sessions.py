"""A retry continues the agent's own session: Claude Code, Gemini CLI and Codex against the fake
model APIs (how the evidence is read: real_sessions.py); OpenCode's and aider's, which run longest,
are in test_real_sessions_opencode.py and test_real_sessions_aider.py. And a tool asked to
continue a session it does not have fails before any turn.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_testing import make_ctx
from real_runs import run_fix
from real_sessions import check_continued, check_fresh, edit, opencode_env, run_openai_tool, unkept
from real_support import buggy_project

from modelapi.anthropic import AnthropicServer, Step, Text, ToolUse
from modelapi.gemini import GeminiServer
from modelapi.openai import Call, OpenAiServer
from modelapi.openai import Text as OText
from orchardist.agents import make_agent
from orchardist.executors.continuing import refused
from orchardist.state.agentrecords import AgentProfile
from realtools import require_tool

pytestmark = pytest.mark.slow


# -- Claude Code --------------------------------------------------------------------------------


CLAUDE: list[Step] = [
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "Let me look."),
    ToolUse("Edit", edit("a - b", "a * b")),
    Text("Made add() multiply."),
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "The tree is back at the start."),
    ToolUse("Edit", edit("a - b", "a + b"), "The check wants a sum."),
    Text("Fixed add()."),
]


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_claude_continues_its_session_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    api = AnthropicServer(CLAUDE)
    settings = f'kind = "claude"\ncommand = {json.dumps(str(exe))}\n'
    prepare = (lambda repo: None) if kept else unkept
    doc = run_fix(
        tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", settings, retries=1, prepare=prepare
    )
    check = check_continued if kept else check_fresh
    check(Path(doc["_repo"]), api.turns(), "claude")


# -- Gemini CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_gemini_continues_its_session_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    exe = require_tool("gemini")
    monkeypatch.setenv("GEMINI_API_KEY", "test-gemini-key")

    def replace(old: str, new: str) -> ToolUse:
        return ToolUse("replace", {**edit(old, new), "instruction": "fix add"})

    script: list[Step] = [
        ToolUse("read_file", {"file_path": "{cwd}/calc.py"}),
        replace("a - b", "a * b"),
        Text("Made add() multiply."),
        ToolUse("read_file", {"file_path": "{cwd}/calc.py"}),
        replace("a - b", "a + b"),
        Text("Fixed add()."),
    ]
    api = GeminiServer(script)
    settings = f'kind = "gemini"\ncommand = {json.dumps(str(exe))}\nmodel = "gemini-2.5-pro"\n'
    prepare = (lambda repo: None) if kept else unkept
    doc = run_fix(
        tmp_path, monkeypatch, api, "GOOGLE_GEMINI_BASE_URL", settings, retries=1, prepare=prepare
    )
    (check_continued if kept else check_fresh)(Path(doc["_repo"]), api.turns(), "gemini")


# -- Codex (an OpenAI-API tool) ------------------------------------------------------------------


def apply_patch(old: str, new: str) -> Call:
    """codex's shell call of apply_patch (codex makes a ``file_change`` of it)."""
    patch = f"*** Begin Patch\n*** Update File: calc.py\n@@\n-{old}\n+{new}\n*** End Patch\n"
    return Call("exec_command", {"cmd": f"apply_patch <<'EOF'\n{patch}EOF\n"})


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_codex_continues_its_session_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, kept: bool
) -> None:
    exe = require_tool("codex")
    script = [
        apply_patch("    return a - b", "    return a * b"),
        OText("Made add() multiply."),
        apply_patch("    return a - b", "    return a + b"),
        OText("Fixed add()."),
    ]
    project, bodies = run_openai_tool(
        tmp_path,
        script,
        lambda url: {"kind": "codex", "command": str(exe), "model": "gpt-fake-1"},
        lambda url: {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-fake-key"},
        kept=kept,
    )
    (check_continued if kept else check_fresh)(project, bodies, "codex")


# -- a session the tool does not have ------------------------------------------------------------

UNKNOWN = "0c5e2a61-7f3b-4c1e-9d2a-5b8e4f6a1c3d"  # a session id no tool here has seen


def servers(kind: str) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """A fake API that would answer a fresh session's turns, the variables pointing the tool
    at it, and the profile's options."""
    if kind == "claude":
        api: Any = AnthropicServer(CLAUDE)
        return api, {"ANTHROPIC_API_KEY": "sk-ant-test-key"}, {}
    if kind == "gemini":
        return GeminiServer([Text("Done.")]), {"GEMINI_API_KEY": "k"}, {"model": "gemini-2.5-pro"}
    api = OpenAiServer([OText("Done.")])
    if kind == "codex":
        return api, {"OPENAI_API_KEY": "sk-fake-key"}, {"model": "gpt-fake-1"}
    return api, {"OPENAI_API_KEY": "sk-fake-key"}, {"model": "fake/gpt-fake-1"}


def base_url(kind: str, url: str) -> dict[str, str]:
    if kind == "claude":
        return {"ANTHROPIC_BASE_URL": url}
    if kind == "gemini":
        return {"GOOGLE_GEMINI_BASE_URL": url}
    if kind == "codex":
        return {"OPENAI_BASE_URL": f"{url}/v1"}
    return opencode_env(url)


@pytest.mark.parametrize("kind", ["claude", "codex", "gemini", "opencode"])
def test_a_session_the_tool_does_not_have_fails_before_any_turn(kind: str, tmp_path: Path) -> None:
    # Given the real tool, asked to continue a session its (empty) home does not hold, with a
    # model API that would answer a fresh session
    exe = require_tool(kind)
    repo = buggy_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    api, keys, options = servers(kind)
    with api:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), **keys, **base_url(kind, api.url)}
        ctx = dataclasses.replace(make_ctx(repo, kind, env=env, timeout_s=120), resume=UNKNOWN)
        profile = AgentProfile("p", kind, options={"command": str(exe), **options})
        result = make_agent(profile).run(ctx)
    # Then it failed before any turn: what the executor takes for a refusal, and runs afresh
    assert refused(result), (result, ctx.log.read_text()[-2000:])
    print(f"\n{kind}: {result.detail}")


def test_gemini_takes_a_message_that_begins_with_a_dash(tmp_path: Path) -> None:
    # Given a message beginning with "-", as a reviewer's list of changes may
    exe = require_tool("gemini")
    repo = buggy_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    api, keys, options = servers("gemini")
    with api:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), **keys, **base_url("gemini", api.url)}
        ctx = make_ctx(repo, "gemini", env=env, timeout_s=120, prompt="- make add() add\n")
        profile = AgentProfile("p", "gemini", options={"command": str(exe), **options})
        result = make_agent(profile).run(ctx)
        asked = api.turns()
    # Then Gemini CLI took it as the prompt (yargs took a separate "-p" value for an option)
    assert result.failure is None, (result, ctx.log.read_text()[-2000:])
    assert "- make add() add" in json.dumps(asked[0]["contents"])
