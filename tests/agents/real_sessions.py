"""Shared by the tests of a retry continuing the agent's own session with the real CLIs
(tests/agents/test_real_sessions*.py, one file per tool where a tool's runs are long, so that
xdist spreads them over its workers).

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

from real_support import buggy_project, run_task

from modelapi.openai import OpenAiServer
from modelapi.openai import Text as OText
from modelapi.server import Reply, Request
from orchardist import Workspace
from run_support import only_run

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


def opencode_env(url: str) -> dict[str, str]:
    """What points OpenCode at a fake OpenAI API at ``url`` (a provider of its config)."""
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
