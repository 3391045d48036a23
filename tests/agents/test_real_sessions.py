"""A retry continues the agent's own session: the real CLIs against the fake model APIs.

Each model's first attempt makes add() multiply, and verify fails. Its retry starts from the
same base (the tree is reset), is told only what failed, reads calc.py again and makes add()
add. The fake APIs answer by the model's turns already in the conversation, so the retry's
requests get the fixing turns only when they carry the first attempt's conversation: a fresh
retry would make add() multiply again, and the task would fail. What the fake API received is
the evidence; the numbers printed (``-s``) are the ones docs/agents.md reports.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_testing import make_ctx
from real_runs import run_fix
from real_support import buggy_project, run_task

from modelapi.anthropic import AnthropicServer, Step, Text, ToolUse
from modelapi.gemini import GeminiServer
from modelapi.openai import Call, OpenAiServer
from modelapi.openai import Text as OText
from modelapi.server import Reply, Request
from orchardist import Workspace
from orchardist.agents import make_agent
from orchardist.executors.continuing import refused
from orchardist.state.records import AgentProfile
from realtools import require_tool
from run_support import only_run

pytestmark = pytest.mark.slow

FOLLOWUP = "An earlier attempt failed"  # the retry's message (Briefs.followup) begins so
BRIEF = "add() in calc.py subtracts; make it add."  # the task's prompt (real_runs, real_support)


def edit(old: str, new: str) -> dict[str, str]:
    return {"file_path": "{cwd}/calc.py", "old_string": old, "new_string": new}


def attempts_of(project: Path) -> tuple[list[Any], dict[int, dict[str, Any]], str]:
    """The run's attempts, their ending events by number, and the task's state."""
    ws = Workspace.open(project)
    try:
        run = only_run(project)
        ended = {
            e.attempt: dict(e.data)
            for e in ws.store.events(run)
            if e.kind == "attempt" and e.data.get("state") in ("passed", "failed")
        }
        return ws.store.attempts(run), ended, ws.store.tasks(run)[0].state.value
    finally:
        ws.store.close()


def split(bodies: list[Any]) -> tuple[list[Any], list[Any]]:
    """The model requests of the first attempt, and of the retry (told of the failure)."""
    retry = [b for b in bodies if FOLLOWUP in json.dumps(b)]
    return [b for b in bodies if FOLLOWUP not in json.dumps(b)], retry


def check_continued(project: Path, bodies: list[Any], label: str) -> None:
    """The task is done by its second attempt, which continued the first one's session; the
    retry's requests carry the first attempt's turns and the failure, not the brief anew."""
    (first, _), ended, state = attempts_of(project)
    assert state == "done", (first, ended)
    assert (first.failure.value if first.failure else None) == "verify_failed", first
    assert first.usage.session_id, first
    assert ended[2]["session"] == f"continued {first.usage.session_id}", ended
    fresh, retry = split(bodies)
    assert fresh and retry, bodies
    said = json.dumps(retry[0])
    # the retry's first request holds the first attempt's work (its edit to a * b)
    assert "a * b" in said, said[-3000:]
    # and the brief once (from the first attempt's turn), not again with the failure
    assert said.count(BRIEF) == json.dumps(fresh[-1]).count(BRIEF), said[-3000:]
    report(label, "continued", fresh, retry)


def check_fresh(project: Path, bodies: list[Any], label: str) -> None:
    """The retry started afresh (its session could not be kept): the whole brief again, with
    none of the first attempt's turns; the task failed, as the script makes a fresh retry do."""
    (first, second), ended, state = attempts_of(project)
    assert state == "failed", (first, second)
    assert ended[1]["session"].startswith("not kept (cannot write them: "), ended
    assert ended[2]["session"].startswith("fresh (no earlier session of this task)"), ended
    fresh, retry = split(bodies)
    assert len(conversation(retry[0])) == len(conversation(fresh[0])), retry[0]
    assert BRIEF in json.dumps(conversation(retry[0])), retry[0]
    report(label, "fresh", fresh, retry)


def conversation(body: dict[str, Any]) -> list[Any]:
    """A request's turns, in whichever API's field."""
    for key in ("messages", "contents", "input"):
        if isinstance(body.get(key), list):
            return list(body[key])
    return []


def blocks(body: dict[str, Any]) -> list[str]:
    """What a provider's prompt cache keys on, in its order: the tools and system prompt, then
    each turn (Claude Code's moving ``cache_control`` marks left out)."""

    def bare(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: bare(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [bare(v) for v in value]
        return value

    keys = ("tools", "system", "systemInstruction", "instructions")
    head = json.dumps([bare(body.get(k)) for k in keys], sort_keys=True)
    return [head, *(json.dumps(bare(turn), sort_keys=True) for turn in conversation(body))]


def report(label: str, how: str, fresh: list[Any], retry: list[Any]) -> None:
    """The retry's requests: how many, their size, and the part an earlier request began with
    (what a provider's prompt cache can serve), in estimated tokens (4 characters each)."""

    def served(body: dict[str, Any], earlier: list[Any]) -> int:
        mine, best = blocks(body), 0
        for old in map(blocks, earlier):
            n = 0
            for a, b in zip(mine, old, strict=False):
                if a != b:
                    break
                n += len(a)
            best = max(best, n)
        return best

    sent = sum(len("".join(blocks(b))) for b in retry) // 4
    cached = sum(served(b, fresh + retry[:i]) for i, b in enumerate(retry)) // 4
    first = sum(len("".join(blocks(b))) for b in fresh) // 4
    print(
        f"\n{label} retry {how}: {len(retry)} requests, ~{sent} input tokens, ~{cached} of them"
        f" a prefix of an earlier request (first attempt: {len(fresh)} requests, ~{first})"
    )


def unkept(repo: Path) -> None:
    """Make the state folder unable to keep sessions: a file where their folder goes."""
    (repo / ".git" / "orchardist").mkdir(exist_ok=True)
    (repo / ".git" / "orchardist" / "sessions").write_text("in the way")


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


# -- the OpenAI-API tools: Codex, OpenCode, aider -----------------------------------------------


class ByModelTurns(OpenAiServer):
    """The script by the model's own turns in the conversation (its calls, and the messages
    the script wrote; not a tool's examples), so a continued conversation goes on from there."""

    def answer(self, request: Request) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        path = request.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/chat/completions") and (body.get("tools") or not self.side_requests):
            done = sum(1 for m in body.get("messages") or () if self._scripted(m))
            return self._chat(body, self.script[min(done, len(self.script) - 1)])
        if path.endswith("/responses") and body.get("tools"):
            done = sum(1 for item in body.get("input") or () if self._scripted(item))
            return self._responses(body, self.script[min(done, len(self.script) - 1)])
        return super().answer(request)

    def _scripted(self, item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        if item.get("type") == "function_call" or item.get("tool_calls"):
            return True
        if item.get("role") != "assistant":
            return False
        said = item.get("content")
        if isinstance(said, list):  # Responses: [{"type": "output_text", "text": ...}]
            said = "".join(str(part.get("text", "")) for part in said if isinstance(part, dict))
        texts = {t.text.strip() for t in self.script if isinstance(t, OText)}
        return str(said or "").strip() in texts


def run_openai_tool(
    tmp_path: Path,
    script: list[Any],
    profile: Callable[[str], dict[str, Any]],
    env: Callable[[str], dict[str, str]],
    side_requests: bool = True,
    kept: bool = True,
) -> tuple[Path, list[Any]]:
    """``orchardist run`` of the fix task, retried once, against a fake OpenAI API (``kept``:
    whether the state folder can keep the agent's session)."""
    project = buggy_project(tmp_path)
    if not kept:
        unkept(project)
    with ByModelTurns(script, side_requests=side_requests) as api:
        run_task(project, profile(api.url), env(api.url), tmp_path, retries=1)
        bodies = [r.body for r in api.model_calls]
    if side_requests:
        bodies = [b for b in bodies if isinstance(b, dict) and b.get("tools")]
    return project, bodies


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


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_opencode_continues_its_session_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, kept: bool
) -> None:
    exe = require_tool("opencode")

    def sed(new: str) -> Call:
        return Call("bash", {"command": f"sed -i 's/a - b/{new}/' calc.py", "description": "Fix"})

    script = [sed("a * b"), OText("Made add() multiply."), sed("a + b"), OText("Fixed add().")]

    def env(url: str) -> dict[str, str]:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {"gpt-fake-1": {"name": "Fake"}},
        }
        return {
            "OPENAI_API_KEY": "sk-fake-key",
            "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
        }

    project, bodies = run_openai_tool(
        tmp_path,
        script,
        lambda url: {"kind": "opencode", "command": str(exe), "model": "fake/gpt-fake-1"},
        env,
        kept=kept,
    )
    (check_continued if kept else check_fresh)(project, bodies, "opencode")


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_aider_continues_its_chat_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, kept: bool
) -> None:
    exe = require_tool("aider")

    def whole(body: str) -> OText:  # aider's "whole file" edit format
        return OText(f"calc.py\n```python\ndef add(a, b):\n    return {body}\n```\n")

    project, bodies = run_openai_tool(
        tmp_path,
        [whole("a * b"), whole("a + b")],
        lambda url: {
            "kind": "aider",
            "command": str(exe),
            "model": "openai/gpt-fake-1",
            "args": ["--analytics-disable", "--no-show-model-warnings", "calc.py"],
        },
        lambda url: {"OPENAI_API_BASE": f"{url}/v1", "OPENAI_API_KEY": "sk-fake-key"},
        side_requests=False,
        kept=kept,
    )
    (check_continued if kept else check_fresh)(project, bodies, "aider")


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
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Fake",
        "options": {"baseURL": f"{url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
        "models": {"gpt-fake-1": {"name": "Fake"}},
    }
    return {
        "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }


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
