"""A fake Gemini API on 127.0.0.1, for driving the real Gemini CLI in tests.

It speaks ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` (server-sent events, one
``GenerateContentResponse`` each) and ``:generateContent`` (one JSON response) as the real API
does, with ``usageMetadata``. Answers are scripted per conversation turn (n = model turns already
in ``contents``); requests without tools (Gemini CLI's own checks, which ask for JSON) get ``{}``.
``{cwd}`` in a call's arguments becomes the working directory the request names. ``fail``
answers requests with an API error (401, 429) in Google's error format: all, or the first
``failures``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from modelapi.anthropic import ApiError, Text, ToolUse, _Server

PROMPT_TOKENS = 1500
OUTPUT_TOKENS = 60
Step = ToolUse | Text


def unauthorized() -> ApiError:
    """What the API answers a wrong key (400 INVALID_ARGUMENT, as Google sends it)."""
    return ApiError(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")


def rate_limited(reset_in_s: int) -> ApiError:
    """429 RESOURCE_EXHAUSTED with a RetryInfo delay."""
    return ApiError(
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan and billing details.",
        {"retry-delay": f"{reset_in_s}s"},
    )


@dataclass
class Seen:
    """What the server was asked."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def turns(self) -> list[dict[str, Any]]:
        """The requests that offered tools (the agent's own turns)."""
        return [r for r in self.requests if r.get("tools")]


class GeminiServer:
    """``with GeminiServer(script) as api:`` serves on ``api.url`` until the block ends."""

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
        """The base URL, for ``GOOGLE_GEMINI_BASE_URL``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> GeminiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)

    def record(self, path: str, body: dict[str, Any]) -> ApiError | None:
        """Keep one request; the error to answer it with, if any."""
        with self._lock:
            self.seen.requests.append(body)
            self.seen.paths.append(path)
            if self.fail is None or not body.get("tools"):
                return None
            if self.failures is None:
                return self.fail
            if self.failures > 0:
                self.failures -= 1
                return self.fail
            return None

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The response for this request."""
        if not body.get("tools"):
            routing = "Complexity Score" in json.dumps(body.get("systemInstruction"))
            return response([{"text": json.dumps(ROUTED if routing else {})}])
        turn = sum(1 for c in body.get("contents", []) if c.get("role") == "model")
        step = self.script[turn] if turn < len(self.script) else Text("Done.")
        parts: list[dict[str, Any]] = [{"text": step.text}] if step.text else []
        if isinstance(step, ToolUse):
            given = json.dumps(step.input)
            found = _CWD.search(json.dumps(body))
            if found:
                given = given.replace("{cwd}", found.group(1))
            parts.append({"functionCall": {"name": step.name, "args": json.loads(given)}})
        return response(parts)


_CWD = re.compile(r"Workspace Directories:\*\*\\n\s*- (/[^\s\\\"]+)")
# Gemini CLI's model router asks for a complexity score in this shape.
ROUTED = {"reasoning": "A small local edit.", "complexity_score": 10}


def response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One GenerateContentResponse."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": PROMPT_TOKENS,
            "candidatesTokenCount": OUTPUT_TOKENS,
            "totalTokenCount": PROMPT_TOKENS + OUTPUT_TOKENS,
        },
        "modelVersion": "gemini-2.5-pro",
    }


def _error(fail: ApiError) -> dict[str, Any]:
    details: list[dict[str, Any]] = []
    if "retry-delay" in fail.headers:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": fail.headers["retry-delay"],
            }
        )
    return {
        "error": {
            "code": fail.status,
            "message": fail.message,
            "status": fail.type,
            "details": details,
        }
    }


def _handler(api: GeminiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest treats stray output as noise."""

        def do_GET(self) -> None:
            self._json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, {"error": {"code": 400, "message": "bad JSON"}})
                return
            path = self.path.split("?", 1)[0]
            if path.endswith(":countTokens"):
                self._json(200, {"totalTokens": PROMPT_TOKENS})
                return
            fail = api.record(path, body)
            if fail is not None:
                self._json(fail.status, _error(fail))
                return
            reply = api.answer(body)
            if path.endswith(":streamGenerateContent"):
                self._stream(reply)
            else:
                self._json(200, reply)

        def _json(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json; charset=UTF-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(reply)}\r\n\r\n".encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler
