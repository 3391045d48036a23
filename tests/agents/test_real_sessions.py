"""A retry continues the agent's own session: the real CLIs against the fake model APIs.

Each model's first attempt makes add() multiply, and verify fails. Its retry starts from the
same base (the tree is reset), is told only what failed, reads calc.py again and makes add()
add. The fake APIs answer by the model's turns already in the conversation, so the retry's
requests get the fixing turns only when they carry the first attempt's conversation: a fresh
retry would make add() multiply again, and the task would fail. What the fake API received is
the evidence; the numbers printed (``-s``) are the ones docs/agents.md reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from real_runs import run_fix
from real_support import buggy_project, run_task

from modelapi.anthropic import AnthropicServer, Step, Text, ToolUse
from modelapi.gemini import GeminiServer
from modelapi.openai import Call, OpenAiServer
from modelapi.openai import Text as OText
from modelapi.server import Reply, Request
from orchardist import Workspace
from realtools import require_tool
from run_support import only_run

pytestmark = pytest.mark.slow

FOLLOWUP = "An earlier attempt failed"  # the retry's message (Briefs.followup) begins so
BRIEF = "add() in calc.py subtracts; make it add."  # the task's prompt (real_runs, real_support)


def edit(old: str, new: str) -> dict[str, str]:
    return {"file_path": "{cwd}/calc.py", "old_string": old, "new_string": new}


def check_continued(project: Path, bodies: list[Any], label: str) -> None:
    """The task is done by its second attempt, which continued the first one's session; the
    retry's requests carry the first attempt's turns and the failure, not the brief anew."""
    ws = Workspace.open(project)
    try:
        run = only_run(project)
        first, second = ws.store.attempts(run)
        ended = {
            e.attempt: dict(e.data)
            for e in ws.store.events(run)
            if e.kind == "attempt" and e.data.get("state") in ("passed", "failed")
        }
        task = ws.store.tasks(run)[0]
    finally:
        ws.store.close()
    assert task.state.value == "done", (first, second)
    assert (first.failure.value if first.failure else None) == "verify_failed", first
    assert first.usage.session_id, first
    assert ended[2]["session"] == f"continued {first.usage.session_id}", ended
    texts = [json.dumps(b) for b in bodies]
    retry = [t for t in texts if FOLLOWUP in t]
    fresh = [t for t in texts if FOLLOWUP not in t]
    assert retry and fresh, texts
    # the retry's first request holds the first attempt's work (its edit to a * b)
    assert "a * b" in retry[0], retry[0][-3000:]
    # and the brief once (from the first attempt's turn), not again with the failure
    assert retry[0].count(BRIEF) == fresh[-1].count(BRIEF), retry[0][-3000:]
    report(label, fresh, retry)


def report(label: str, fresh: list[str], retry: list[str]) -> None:
    """The requests each attempt sent: how many, their size, the part an earlier one began with
    (what a provider's prompt cache could serve), in estimated tokens (4 characters each)."""

    def shared(text: str, earlier: list[str]) -> int:
        best = 0
        for old in earlier:
            n = 0
            for a, b in zip(text, old, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    seen: list[str] = []
    rows = []
    for name, group in (("first attempt (fresh)", fresh), ("retry (continued)", retry)):
        sent = sum(len(t) for t in group) // 4
        cached = sum(shared(t, seen + group[:i]) for i, t in enumerate(group)) // 4
        rows.append(f"{label}: {name}: {len(group)} requests, ~{sent} tokens, ~{cached} a prefix")
        seen += group
    print("\n" + "\n".join(rows))


# -- Claude Code --------------------------------------------------------------------------------


def test_claude_continues_its_session_on_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    script: list[Step] = [
        ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "Let me look."),
        ToolUse("Edit", edit("a - b", "a * b")),
        Text("Made add() multiply."),
        ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "The tree is back at the start."),
        ToolUse("Edit", edit("a - b", "a + b"), "The check wants a sum."),
        Text("Fixed add()."),
    ]
    api = AnthropicServer(script)
    settings = f'kind = "claude"\ncommand = {json.dumps(str(exe))}\n'
    doc = run_fix(tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", settings, retries=1)
    check_continued(Path(doc["_repo"]), api.turns(), "claude")


# -- Gemini CLI ---------------------------------------------------------------------------------


def test_gemini_continues_its_session_on_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
    doc = run_fix(tmp_path, monkeypatch, api, "GOOGLE_GEMINI_BASE_URL", settings, retries=1)
    check_continued(Path(doc["_repo"]), api.turns(), "gemini")


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
) -> tuple[Path, list[Any]]:
    """``orchardist run`` of the fix task, retried once, against a fake OpenAI API."""
    project = buggy_project(tmp_path)
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


def test_codex_continues_its_session_on_the_retry(tmp_path: Path) -> None:
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
    )
    check_continued(project, bodies, "codex")


def test_opencode_continues_its_session_on_the_retry(tmp_path: Path) -> None:
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
    )
    check_continued(project, bodies, "opencode")


def test_aider_continues_its_chat_on_the_retry(tmp_path: Path) -> None:
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
    )
    check_continued(project, bodies, "aider")
