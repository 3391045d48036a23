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
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


@dataclass
class Seen:
    """What the server was asked."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def turns(self) -> list[dict[str, Any]]:
        """The requests that offered tools (the agent's own turns)."""
        return [r for r in self.requests if r.get("tools")]


class AnthropicServer:
    """``with AnthropicServer(script) as api:`` serves on ``api.url`` until the block ends."""

    def __init__(
        self,
        script: Sequence[Step] = (),
        fail: ApiError | None = None,
        failures: int | None = None,
    ) -> None:
        self.script = list(script)
        self.fail = fail
        self.failures = failures
        self.seen = Seen()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL, for ``ANTHROPIC_BASE_URL``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> AnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)

    def answer(self, body: Mapping[str, Any]) -> Step:
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

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> ApiError | None:
        """Keep one request for the test to look at; the error to answer it with, if any."""
        with self._lock:
            self.seen.requests.append(body)
            self.seen.headers.append(headers)
            if self.fail is None or not body.get("tools"):
                return None
            if self.failures is None:
                return self.fail
            if self.failures > 0:
                self.failures -= 1
                return self.fail
            return None


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hang up mid-stream when they stop; that is not the server's problem."""


def _handler(api: AnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest treats stray output as noise."""

        def do_HEAD(self) -> None:
            self._json(200, {})

        def do_GET(self) -> None:
            self._json(404, _error("not_found_error", f"{self.path} not found"))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, _error("invalid_request_error", "body is not JSON"))
                return
            path = self.path.split("?", 1)[0]
            if path == "/v1/messages/count_tokens":
                self._json(200, {"input_tokens": INPUT_TOKENS})
                return
            if path != "/v1/messages":
                self._json(404, _error("not_found_error", f"{path} not found"))
                return
            fail = api.record(body, {k.lower(): v for k, v in self.headers.items()})
            if fail is not None:
                self._json(fail.status, _error(fail.type, fail.message), fail.headers)
                return
            reply = message(api.answer(body), str(body.get("model", "claude-sonnet-4-5")))
            if body.get("stream"):
                self._stream(reply)
            else:
                self._json(200, reply)

        def _json(
            self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] = {}
        ) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_{time.monotonic_ns()}")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", f"req_{time.monotonic_ns()}")
            self.send_header("connection", "close")
            self.end_headers()
            for name, data in events(reply):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

    return Handler


def _error(kind: str, text: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": text},
        "request_id": f"req_{time.monotonic_ns()}",
    }
