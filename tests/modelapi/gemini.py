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
from collections.abc import Mapping
from typing import Any

from modelapi.anthropic import ApiError, ScriptedServer, Text, ToolUse
from modelapi.server import Reply, Request

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


def capacity_exhausted(reset_in_s: int) -> ApiError:
    """429 RESOURCE_EXHAUSTED for a model without capacity (``ErrorInfo`` reason
    ``MODEL_CAPACITY_EXHAUSTED``) with a RetryInfo delay: Gemini CLI waits that delay between its
    own tries, not its 5 s, 10 s... back-off of a quota error."""
    return ApiError(
        429,
        "RESOURCE_EXHAUSTED",
        f"You have exhausted your capacity on this model. Please retry in {reset_in_s}s.",
        {"retry-delay": f"{reset_in_s}s", "reason": "MODEL_CAPACITY_EXHAUSTED"},
    )


class GeminiServer(ScriptedServer):
    """``with GeminiServer(script) as api:`` serves on ``api.url`` until the block ends."""

    def answer(self, request: Request) -> Reply:
        """A scripted response (streamed for ``streamGenerateContent``), or the scripted error."""
        path = request.path.split("?", 1)[0]
        body = request.body if isinstance(request.body, dict) else {}
        if path.endswith(":countTokens"):
            return Reply.json({"totalTokens": PROMPT_TOKENS})
        if request.method != "POST" or ":" not in path.rsplit("/", 1)[-1]:
            return _error(ApiError(404, "NOT_FOUND", f"{path} not found"))
        fail = self.failing(body)
        if fail is not None:
            return _error(fail)
        reply = self.respond(body)
        if path.endswith(":streamGenerateContent"):
            return Reply.sse([(None, reply)])
        return Reply.json(reply)

    def respond(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The GenerateContentResponse for this request."""
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


def _error(fail: ApiError) -> Reply:
    """An API error in Google's format (with a RetryInfo delay for a 429)."""
    details: list[dict[str, Any]] = []
    if "retry-delay" in fail.headers:
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo"}
        details.append({**retry, "retryDelay": fail.headers["retry-delay"]})
    if "reason" in fail.headers:
        info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo"}
        domain = "generativelanguage.googleapis.com"
        details.append({**info, "reason": fail.headers["reason"], "domain": domain})
    body = {"code": fail.status, "message": fail.message, "status": fail.type, "details": details}
    return Reply.json({"error": body}, status=fail.status)
