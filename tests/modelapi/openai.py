"""A fake OpenAI API on 127.0.0.1: chat completions and Responses, streamed and not.

``POST /v1/chat/completions`` (what opencode and aider speak) answers a ``chat.completion``, or
with ``"stream": true`` ``chat.completion.chunk`` events ending in ``data: [DONE]`` (usage in the
last chunk when ``stream_options.include_usage`` asks for it, as the real API does).
``POST /v1/responses`` (what codex speaks) answers a ``response`` object, or the streamed events
``response.created → response.output_item.added/done … → response.completed`` with ``usage``.
``GET`` on the Responses path (codex's WebSocket upgrade) is refused with 404, so the client falls
back to HTTPS at once.

Answers are scripted per conversation turn: the n-th model call of a conversation, where n is the
number of tool results already in it, gets ``script[n]`` (the last entry repeats), so client
retries and side requests do not shift the script. ``fail`` answers model calls with an API
error (401, 429 with reset headers) carrying the real error body: all of them, or only those of
the first ``fail_conversations`` conversations (told apart by codex's ``prompt_cache_key``, by
opencode's ``x-session-id``), or the first ``failures`` model calls (aider's requests name no
conversation), so a tool's own retries are refused and the next attempt goes through.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .server import ModelServer, Reply, Request

INPUT_TOKENS = 1000  # per model call, so totals are predictable
OUTPUT_TOKENS = 50
MODEL = "gpt-fake-1"


@dataclass(frozen=True)
class Call:
    """A model turn that calls one tool (a function) with these arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Text:
    """A model turn that answers with text and calls nothing (ends the conversation)."""

    text: str


@dataclass(frozen=True)
class ApiError:
    """An HTTP error with the real API's body and headers."""

    status: int
    type: str
    message: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def reply(self) -> Reply:
        """The error as the API sends it."""
        body = {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }
        return Reply.json(body, self.status, self.headers)


def unauthorized() -> ApiError:
    """401 as the API sends it for a bad key."""
    return ApiError(
        401, "invalid_request_error", "Incorrect API key provided: sk-bad.", "invalid_api_key"
    )


def rate_limited(reset_s: float = 120, should_retry: bool | None = None) -> ApiError:
    """429 with the API's reset headers (``retry-after``, ``retry-after-ms``, ``x-ratelimit-*``).

    A reset under a second is said in milliseconds, as the API does ("try again in 100ms"), and
    ``retry-after`` (whole seconds) is rounded up. ``should_retry`` adds the API's
    ``x-should-retry`` header, which the OpenAI SDKs obey.
    """
    extra = {} if should_retry is None else {"x-should-retry": str(should_retry).lower()}
    reset_ms = round(reset_s * 1000)
    reset = f"{reset_ms}ms" if reset_ms < 1000 else f"{reset_s:g}s"
    headers = {
        **extra,
        "retry-after": str(math.ceil(reset_s)),
        "retry-after-ms": str(reset_ms),
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-reset-tokens": reset,
    }
    message = f"Rate limit reached for requests. Please try again in {reset}."
    return ApiError(429, "requests", message, "rate_limit_exceeded", headers)


Turn = Call | Text | ApiError


class OpenAiServer(ModelServer):
    """Scripted chat completions and Responses; ``requests`` holds every request received."""

    def __init__(
        self,
        script: Sequence[Turn] = (),
        fail: ApiError | None = None,
        fail_conversations: int | None = None,
        side_requests: bool = True,
        failures: int | None = None,
    ) -> None:
        super().__init__()
        self.script = list(script) or [Text("Done.")]
        self.fail = fail
        self.fail_conversations = fail_conversations
        self.failures = failures
        self.side_requests = side_requests  # False: requests without tools get the script too
        self._conversations: list[str] = []
        self._ids = itertools.count(1)

    @property
    def model_calls(self) -> list[Request]:
        """The POSTs that asked the model for an answer."""
        return [r for r in self.requests if r.method == "POST" and _is_model_call(r.path)]

    def answer(self, request: Request) -> Reply:
        """Route by path; model calls get the scripted turn."""
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method == "GET" and path.endswith("/models"):
            return Reply.json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if request.method != "POST" or not _is_model_call(path):
            return Reply.json({"error": {"message": f"Not found: {path}"}}, status=404)
        body = request.body if isinstance(request.body, dict) else {}
        conversation = str(body.get("prompt_cache_key") or request.header("x-session-id"))
        if self.fail is not None and self._failing(conversation):
            return self.fail.reply()
        if path.endswith("/responses"):
            turn = self._turn(_responses_tool_results(body), bool(body.get("tools")))
            return self._responses(body, turn)
        turn = self._turn(_chat_tool_results(body), bool(body.get("tools")))
        return self._chat(body, turn)

    def _failing(self, conversation: str) -> bool:
        with self.lock:
            if self.failures is not None:
                self.failures -= 1
                return self.failures >= 0
        if self.fail_conversations is None:
            return True
        with self.lock:
            if conversation not in self._conversations:
                self._conversations.append(conversation)
            return self._conversations.index(conversation) < self.fail_conversations

    def _turn(self, done: int, tools_offered: bool) -> Turn:
        if not tools_offered and self.side_requests:  # titles, summaries: a short text
            return Text("Fix failing test")
        return self.script[min(done, len(self.script) - 1)]

    def _id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}_{next(self._ids):04d}"

    # chat completions

    def _chat(self, body: Mapping[str, Any], turn: Turn) -> Reply:
        if isinstance(turn, ApiError):
            return turn.reply()
        ident = self._id("chatcmpl")
        usage = _chat_usage()
        if isinstance(turn, Call):
            call = {
                "id": self._id("call"),
                "type": "function",
                "function": {"name": turn.name, "arguments": json.dumps(turn.arguments)},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": turn.text}
            finish = "stop"
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            return Reply.json(_chat_object(ident, "chat.completion", [choice], usage))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Reply.sse(_chat_chunks(ident, message, finish, usage if include_usage else None))

    # Responses

    def _responses(self, body: Mapping[str, Any], turn: Turn) -> Reply:
        if isinstance(turn, ApiError):
            return turn.reply()
        if isinstance(turn, Call):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": self._id("fc"),
                "call_id": self._id("call"),
                "name": turn.name,
                "arguments": json.dumps(turn.arguments),
                "status": "completed",
            }
        else:
            content = [{"type": "output_text", "text": turn.text, "annotations": []}]
            item = {
                "type": "message",
                "id": self._id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        response = {
            "id": self._id("resp"),
            "object": "response",
            "created_at": 1_700_000_000,
            "model": body.get("model") or MODEL,
            "status": "completed",
            "output": [item],
            "usage": _responses_usage(),
        }
        if not body.get("stream"):
            return Reply.json(response)
        return Reply.sse(_response_events(response, item))


def _is_model_call(path: str) -> bool:
    path = path.split("?", 1)[0].rstrip("/")
    return path.endswith("/chat/completions") or path.endswith("/responses")


def _chat_tool_results(body: Mapping[str, Any]) -> int:
    return sum(
        1 for m in body.get("messages") or () if isinstance(m, dict) and m.get("role") == "tool"
    )


def _responses_tool_results(body: Mapping[str, Any]) -> int:
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    kinds = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
    return sum(1 for i in items if isinstance(i, dict) and i.get("type") in kinds)


def _chat_usage() -> dict[str, Any]:
    return {
        "prompt_tokens": INPUT_TOKENS,
        "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _responses_usage() -> dict[str, Any]:
    return {
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    }


def _chat_object(ident: str, kind: str, choices: list[Any], usage: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "object": kind,
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


def _chat_chunks(
    ident: str, message: Mapping[str, Any], finish: str, usage: Any
) -> Iterator[tuple[str | None, Any]]:
    def chunk(delta: Mapping[str, Any], reason: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
        return _chat_object(ident, "chat.completion.chunk", [choice], None)

    yield None, chunk({"role": "assistant", "content": ""}, None)
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        head = {"index": 0, "id": call["id"], "type": "function"}
        yield (
            None,
            chunk(
                {
                    "tool_calls": [
                        {**head, "function": {"name": call["function"]["name"], "arguments": ""}}
                    ]
                },
                None,
            ),
        )
        args = call["function"]["arguments"]
        for start in range(0, len(args), 40):
            part = {"index": 0, "function": {"arguments": args[start : start + 40]}}
            yield None, chunk({"tool_calls": [part]}, None)
    else:
        text = str(message.get("content") or "")
        for start in range(0, len(text), 20):
            yield None, chunk({"content": text[start : start + 20]}, None)
    yield None, chunk({}, finish)
    if usage is not None:
        yield None, _chat_object(ident, "chat.completion.chunk", [], usage)
    yield None, "[DONE]"


def _response_events(
    response: Mapping[str, Any], item: Mapping[str, Any]
) -> Iterator[tuple[str | None, Any]]:
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    seq = itertools.count()

    def event(kind: str, **fields: Any) -> tuple[str, Any]:
        return kind, {"type": kind, "sequence_number": next(seq), **fields}

    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    yield event(
        "response.output_item.added", output_index=0, item={**item, "status": "in_progress"}
    )
    if item["type"] == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            part=part,
        )
        yield event(
            "response.output_text.delta",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            delta=text,
        )
        yield event(
            "response.output_text.done",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            text=text,
        )
    else:
        args = item["arguments"]
        yield event(
            "response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=args
        )
        yield event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=0,
            arguments=args,
        )
    yield event("response.output_item.done", output_index=0, item=item)
    yield event("response.completed", response=response)
