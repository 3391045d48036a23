"""Helpers for agent tests: real attempt contexts, fake-call records, a scripted chat server."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchardist.agents import agent_class
from orchardist.agents.context import AgentContext
from orchardist.confine.procs import CancelToken, new_marker
from orchardist.confine.scrubbed import scrubbed_env

PROMPT = "- add hello.txt\nKeep 'quotes', $DOLLARS and `backticks` exactly as they are.\n"


def fake_call(tool: str) -> dict[str, Any]:
    """What the fake ``tool`` received: argv, env, stdin, cwd."""
    data: dict[str, Any] = json.loads((Path.home() / ".fake-agents" / f"{tool}.json").read_text())
    return data


def make_ctx(
    worktree: Path,
    kind: str,
    *,
    prompt: str = PROMPT,
    timeout_s: float | None = 20.0,
    env: dict[str, str] | None = None,
    profile_env: tuple[str, ...] = (),
    cancel: CancelToken | None = None,
) -> AgentContext:
    """An AgentContext built the way the local executor builds one."""
    logs = worktree.parent / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / "t1-1.log"
    log.write_bytes(b"")
    prompt_file = log.with_suffix(".prompt.md")
    prompt_file.write_text(prompt, encoding="utf-8")
    output_file = log.with_suffix(".output.json")
    if env is None:
        env = scrubbed_env((*profile_env, *agent_class(kind).env_keys))
    env = {
        **env,
        "ORCHARDIST_RUN": "run1",
        "ORCHARDIST_TASK": "t1",
        "ORCHARDIST_ATTEMPT": "1",
        "ORCHARDIST_CANDIDATE": "1",
        "ORCHARDIST_WORKTREE": str(worktree),
        "ORCHARDIST_PROMPT": prompt,
        "ORCHARDIST_PROMPT_FILE": str(prompt_file),
        "ORCHARDIST_OUTPUT": str(output_file),
    }
    return AgentContext(
        run_id="run1",
        task_id="t1",
        attempt=1,
        candidate=1,
        title="add hello",
        prompt=prompt,
        worktree=worktree,
        cwd=worktree,
        prompt_file=prompt_file,
        output_file=output_file,
        log=log,
        env=env,
        timeout_s=timeout_s,
        cancel=cancel or CancelToken(),
        marker=new_marker(),
    )


@dataclass
class ChatServer:
    """Answers POST /v1/chat/completions from a script; records what it was sent."""

    url: str
    replies: list[tuple[int, dict[str, str], Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends a stall

    def stall(self) -> None:
        """Queue a request that gets no answer until the test ends."""
        self.replies.append((0, {}, None))

    def reply(self, content: str, prompt_tokens: int = 100, completion_tokens: int = 20) -> None:
        """Queue a 200 with one assistant message and its usage."""
        body = {
            "id": f"chatcmpl-{len(self.replies) + 1}",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        self.replies.append((200, {}, body))

    def error(self, status: int, headers: dict[str, str] | None = None, message: str = "") -> None:
        """Queue an error response."""
        body = {"error": {"message": message or f"error {status}", "code": status}}
        self.replies.append((status, headers or {}, body))
