"""A retry continues the agent's own session, with the real CLIs against the fake model APIs.

The model's first attempt makes add() multiply (verify fails); its retry, told only what
failed, turns ``a * b`` into ``a + b``. The script is by turn (tests/modelapi): the retry's
requests are turns 3 and 4 only when they carry the first attempt's conversation, so a fresh
retry would make add() multiply again and fail. What the fake API received is the evidence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from real_runs import events, only_task, run_fix

from modelapi.anthropic import AnthropicServer, Step, Text, ToolUse
from modelapi.gemini import GeminiServer
from modelapi.openai import Call, OpenAiServer
from modelapi.openai import Text as OText
from modelapi.server import Reply, Request
from real_support import buggy_project, run_task
from realtools import require_tool
from support import git

pytestmark = pytest.mark.slow

WRONG = {"file_path": "{cwd}/calc.py", "old_string": "a - b", "new_string": "a * b"}
RIGHT = {"file_path": "{cwd}/calc.py", "old_string": "a - b", "new_string": "a + b"}
CLAUDE_SCRIPT: list[Step] = [
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "Let me look."),
    ToolUse("Edit", WRONG),
    Text("Made add() multiply."),
    ToolUse("Read", {"file_path": "{cwd}/calc.py"}, "The tree is back at the start."),
    ToolUse("Edit", RIGHT, "The check wants a sum."),
    Text("Fixed add()."),
]


def attempt_events(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each attempt's ending event (passed or failed), by attempt number."""
    ended = [e for e in events(doc, "attempt") if e.get("state") in ("passed", "failed")]
    return {int(e["attempt"]): e for e in ended} if ended and "attempt" in ended[0] else {}


def test_claude_continues_its_session_on_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    api = AnthropicServer(CLAUDE_SCRIPT)
    settings = f'kind = "claude"\ncommand = {json.dumps(str(exe))}\n'
    doc = run_fix(tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", settings, retries=1)
    task = only_task(doc)
    print(json.dumps(task, indent=1, default=str)[:4000])
    print(events(doc, "attempt"))
    turns = api.turns()
    for t in turns:
        print(len(t["messages"]), len(json.dumps(t)))
    assert task["state"] == "done", task


WRONG_PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a * b\n"
    "*** End Patch\n"
)
RIGHT_PATCH = WRONG_PATCH.replace("a * b", "a + b")


def patch_call(patch: str) -> Call:
    """codex's shell call of apply_patch (it makes a ``file_change`` of it)."""
    return Call("exec_command", {"cmd": f"apply_patch <<'EOF'\n{patch}EOF\n"})


class ByModelTurns(OpenAiServer):
    """The script by the model's own turns in the conversation (its calls and messages), so
    that a continued conversation goes on where it stopped."""

    def scripted(self, message: Any) -> bool:
        """Whether a chat message is one of the script's turns (not a tool's examples)."""
        if not isinstance(message, dict) or message.get("role") != "assistant":
            return False
        texts = {t.text.strip() for t in self.script if isinstance(t, OText)}
        return bool(message.get("tool_calls")) or str(message.get("content") or "").strip() in texts

    def answer(self, request: Request) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        chat = request.path.rstrip("/").endswith("/chat/completions")
        if chat and (body.get("tools") or not self.side_requests):
            said = [m for m in body.get("messages") or () if self.scripted(m)]
            return self._chat(body, self.script[min(len(said), len(self.script) - 1)])
        if request.path.rstrip("/").endswith("/responses") and body.get("tools"):
            items = [i for i in body.get("input") or () if isinstance(i, dict)]
            done = sum(1 for i in items if i.get("type") == "function_call" or (
                i.get("type") == "message" and i.get("role") == "assistant"))
            return self._responses(body, self.script[min(done, len(self.script) - 1)])
        return super().answer(request)


def test_codex_continues_its_session_on_the_retry(tmp_path: Path) -> None:
    exe = require_tool("codex")
    script = [patch_call(WRONG_PATCH), OText("Made add() multiply."), patch_call(RIGHT_PATCH), OText("Fixed add().")]
    project = buggy_project(tmp_path)
    with ByModelTurns(script) as api:
        profile = {"kind": "codex", "command": str(exe), "model": "gpt-fake-1"}
        env = {"OPENAI_BASE_URL": f"{api.url}/v1", "OPENAI_API_KEY": "sk-fake-key"}
        task = run_task(project, profile, env, tmp_path, retries=1)
        calls = [r.body for r in api.model_calls]
    print(json.dumps(task, indent=1, default=str)[-3000:])
    for c in calls:
        print(len(c.get("input") or []), len(json.dumps(c)))
    assert task["state"] == "done", task


def test_opencode_continues_its_session_on_the_retry(tmp_path: Path) -> None:
    exe = require_tool("opencode")
    wrong = Call("bash", {"command": "sed -i 's/a - b/a * b/' calc.py", "description": "Fix add"})
    right = Call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix add"})
    script = [wrong, OText("Made add() multiply."), right, OText("Fixed add().")]
    project = buggy_project(tmp_path)
    with ByModelTurns(script) as api:
        model = {"name": "Fake", "cost": {"input": 1.0, "output": 2.0}}
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{api.url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {"gpt-fake-1": model},
        }
        env = {
            "OPENAI_API_KEY": "sk-fake-key",
            "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
        }
        profile = {"kind": "opencode", "command": str(exe), "model": "fake/gpt-fake-1"}
        task = run_task(project, profile, env, tmp_path, retries=1)
        calls = [r.body for r in api.model_calls]
    print(json.dumps(task, indent=1, default=str)[-3000:])
    import subprocess
    print(subprocess.run(["find", str(project / ".git/orchardist/sessions")], capture_output=True, text=True).stdout)
    for c in calls:
        print(len(c.get("messages") or []), len(json.dumps(c)))
    assert task["state"] == "done", task


def test_aider_continues_its_chat_on_the_retry(tmp_path: Path) -> None:
    exe = require_tool("aider")
    wrong = OText("calc.py\n```python\ndef add(a, b):\n    return a * b\n```\n")
    right = OText("calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n")
    project = buggy_project(tmp_path)
    with ByModelTurns([wrong, right], side_requests=False) as api:
        profile = {
            "kind": "aider",
            "command": str(exe),
            "model": "openai/gpt-fake-1",
            "args": ["--analytics-disable", "--no-show-model-warnings", "calc.py"],
        }
        env = {"OPENAI_API_BASE": f"{api.url}/v1", "OPENAI_API_KEY": "sk-fake-key"}
        task = run_task(project, profile, env, tmp_path, retries=1)
        calls = [r.body for r in api.model_calls]
    print(json.dumps(task, indent=1, default=str)[-3000:])
    for c in calls:
        print(len(c.get("messages") or []), len(json.dumps(c)))
    assert task["state"] == "done", task


def test_gemini_continues_its_session_on_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = require_tool("gemini")
    monkeypatch.setenv("GEMINI_API_KEY", "test-gemini-key")

    def replace(old: str, new: str) -> ToolUse:
        edit = {"file_path": "{cwd}/calc.py", "old_string": old, "new_string": new}
        return ToolUse("replace", {**edit, "instruction": "fix add"})

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
    task = only_task(doc)
    print(events(doc, "attempt"))
    for t in api.turns():
        print(len(t["contents"]), len(json.dumps(t)))
    assert task["state"] == "done", task
