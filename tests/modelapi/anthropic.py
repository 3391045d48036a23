"""A fake Anthropic Messages API on 127.0.0.1, for driving the real Claude Code in tests.

It speaks ``POST /v1/messages`` as the real API does: a JSON message, or (``"stream": true``)
server-sent events ``message_start → content_block_* → message_delta → message_stop``, with
``usage`` counted the way the API counts it. Answers are scripted per conversation turn: the
n-th request of a conversation (n = assistant messages already in it) gets ``script[n]``, so
retries and side requests do not shift the script. ``{cwd}`` in a tool call's input becomes the
working directory the request names (Claude Code puts it in its prompt). Requests that offer no
tools (titles, quota checks) get a short text. ``fail`` answers requests with an API error (401,
429) carrying the real error body and headers: every request, or the first ``failures``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from modelapi.server import ModelServer, Reply, Request

INPUT_TOKENS = 1200  # per request, so totals are predictable
OUTPUT_TOKENS = 80


@dataclass(frozen=True)
class ToolUse:
    """An assistant turn that calls one tool."""

    name: str
    input: Mapping[str, Any]
    text: str = ""


@dataclass(frozen=True)
class Text:
    """An assistant turn that ends the conversation."""

    text: str


@dataclass(frozen=True)
class ApiError:
    """An HTTP error as the API sends it."""

    status: int
    type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


def unauthorized() -> ApiError:
    """401, as for a wrong ``x-api-key``."""
    return ApiError(401, "authentication_error", "invalid x-api-key")


def rate_limited(reset_in_s: int) -> ApiError:
    """429 with the reset headers the API sends."""
    reset = int(time.time()) + reset_in_s
    stamp = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {
        "retry-after": str(reset_in_s),
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": stamp,
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(reset),
    }
    message = "This request would exceed your organization's rate limit. Please try again later."
    return ApiError(429, "rate_limit_error", message, headers)


Step = ToolUse | Text


class ScriptedServer(ModelServer):
    """A model API answering from a script, failing all or the first ``failures`` turns."""

    def __init__(
        self,
        script: Sequence[Step] = (),
        fail: ApiError | None = None,
        failures: int | None = None,
    ) -> None:
        super().__init__()
        self.script = list(script)
        self.fail = fail
        self.failures = failures

    def turns(self) -> list[dict[str, Any]]:
        """The bodies of the requests that offered tools (the agent's own turns)."""
        with self.lock:
            bodies = [r.body for r in self.requests if isinstance(r.body, dict)]
        return [b for b in bodies if b.get("tools")]

    def working_directories(self) -> set[str]:
        """The working directories the agent named in its turns (where it edits)."""
        return {found.group(1) for b in self.turns() if (found := _CWD.search(json.dumps(b)))}

    def failing(self, body: Mapping[str, Any]) -> ApiError | None:
        """The error to answer an agent's turn with, if any."""
        with self.lock:
            if self.fail is None or not body.get("tools"):
                return None
            if self.failures is None:
                return self.fail
            if self.failures > 0:
                self.failures -= 1
                return self.fail
            return None


class AnthropicServer(ScriptedServer):
    """``with AnthropicServer(script) as api:`` serves on ``api.url`` until the block ends."""

    def answer(self, request: Request) -> Reply:
        """A scripted message (streamed when asked), or the scripted error."""
        path = request.path.split("?", 1)[0]
        body = request.body if isinstance(request.body, dict) else {}
        if path == "/v1/messages/count_tokens":
            return Reply.json({"input_tokens": INPUT_TOKENS})
        if request.method != "POST" or path != "/v1/messages":
            return _error(ApiError(404, "not_found_error", f"{path} not found"))
        fail = self.failing(body)
        if fail is not None:
            return _error(fail)
        reply = message(self.step(body), str(body.get("model", "claude-sonnet-4-5")))
        return Reply.sse(events(reply)) if body.get("stream") else Reply.json(reply)

    def step(self, body: Mapping[str, Any]) -> Step:
        """The scripted turn for this request."""
        if not body.get("tools"):
            return Text("Fix the failing test")
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        step = self.script[turn] if turn < len(self.script) else Text("Done.")
        found = _CWD.search(json.dumps(body))
        if isinstance(step, ToolUse) and found:
            given = json.dumps(step.input).replace("{cwd}", found.group(1))
            step = ToolUse(step.name, json.loads(given), step.text)
        return step


_CWD = re.compile(r"[Pp]rimary working directory: ([^\s\\\"]+)")


def message(step: Step, model: str) -> dict[str, Any]:
    """The non-streamed response body for one turn."""
    content: list[dict[str, Any]] = []
    if step.text:
        content.append({"type": "text", "text": step.text})
    if isinstance(step, ToolUse):
        tool_id = f"toolu_{abs(hash((step.name, json.dumps(step.input)))):024d}"[:30]
        content.append({"type": "tool_use", "id": tool_id, "name": step.name, "input": step.input})
    return {
        "id": f"msg_{time.monotonic_ns():024d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if isinstance(step, ToolUse) else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": OUTPUT_TOKENS,
            "service_tier": "standard",
        },
    }


def events(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server-sent events that stream ``body`` (a complete message)."""
    start = {**body, "content": [], "stop_reason": None}
    start["usage"] = {**body["usage"], "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_start", {"type": "content_block_start", "index": index, **_cb(empty)}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    stop = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": body["usage"]["output_tokens"]}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


def _cb(block: dict[str, Any]) -> dict[str, Any]:
    return {"content_block": block}


def _error(fail: ApiError) -> Reply:
    """An API error with the real body and headers."""
    body = {
        "type": "error",
        "error": {"type": fail.type, "message": fail.message},
        "request_id": f"req_{time.monotonic_ns()}",
    }
    return Reply.json(body, status=fail.status, headers={**fail.headers, "request-id": "req_1"})
