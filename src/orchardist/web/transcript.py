"""An agent's transcript for a reviewer, parsed from the tool's own JSON stream in the attempt's
log: messages, tool calls and their results, not the raw lines.

Each CLI writes its own format (Claude Code's and Gemini's ``stream-json``, Codex's ``exec
--json``, OpenCode's ``run --format json``); lines split the way the adapters read them
(:meth:`orchardist.agents.cli.CliAgent.feed`), and each event is named by its own fields, so a
log is read without knowing which agent wrote it. Lines that are not events (orchardist's notes,
verify output, a shell agent's prints) become ``output`` entries, consecutive ones joined.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..agents.cli import json_event

ENTRY_CHARS = 4000  # a tool result of a whole file is cut: the diff shows what changed
MAX_ENTRIES = 2000


class Entry(StrEnum):
    """What one transcript entry is."""

    MESSAGE = "message"  # the model (or the user's prompt) speaking
    TOOL = "tool"  # a tool call: its name and input
    RESULT = "result"  # what a tool call gave back
    OUTPUT = "output"  # lines that are no event: orchardist's notes, verify output, prints
    ERROR = "error"  # an error the tool reported


@dataclass(frozen=True)
class Item:
    """One entry of a transcript."""

    kind: Entry
    text: str
    who: str = ""  # a message's role, or a tool's name
    delta: bool = False  # a streamed piece of the message before it (Gemini's "delta")

    def shown(self) -> dict[str, Any]:
        """The entry for the page."""
        return {"kind": self.kind.value, "who": self.who, "text": self.text}


def transcript(log_text: str) -> list[dict[str, Any]]:
    """The entries of a log, as JSON-ready dicts."""
    items: list[Item] = []
    for line in log_text.splitlines():
        for item in _items(line):
            last = items[-1] if items else None
            if item.kind is Entry.OUTPUT and last is not None and last.kind is Entry.OUTPUT:
                items[-1] = Item(Entry.OUTPUT, _cut(f"{last.text}\n{item.text}"))
            elif item.delta and last is not None and (last.kind, last.who) == (item.kind, item.who):
                items[-1] = Item(item.kind, _cut(last.text + item.text), item.who)
            else:
                items.append(item)
    return [item.shown() for item in items[-MAX_ENTRIES:]]


def _items(line: str) -> Iterator[Item]:
    event = json_event(line)
    if event is None:
        if line.strip():
            yield Item(Entry.OUTPUT, _cut(line))
        return
    for shape in _SHAPES:
        found = list(shape(event))
        if found:
            yield from found
            return


def _cut(text: str) -> str:
    return text if len(text) <= ENTRY_CHARS else text[:ENTRY_CHARS] + " …(cut)"


def _said(value: Any) -> str:
    """A tool input or output as text."""
    if isinstance(value, str):
        return _cut(value)
    return _cut(json.dumps(value, ensure_ascii=False))


def _claude(event: dict[str, Any]) -> Iterator[Item]:
    """``{"type": "assistant"|"user", "message": {"content": [...]}}``, and the final result."""
    kind, message = event.get("type"), event.get("message")
    if kind in ("assistant", "user") and isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            yield Item(Entry.MESSAGE, _cut(content), str(kind))
            return
        for part in content if isinstance(content, list) else ():
            yield from _claude_part(str(kind), part)
    elif kind == "result" and "session_id" in event and event.get("is_error"):
        yield Item(Entry.ERROR, _said(event.get("result") or event.get("subtype") or "error"))


def _claude_part(role: str, part: Any) -> Iterator[Item]:
    if not isinstance(part, dict):
        return
    if part.get("type") == "text" and part.get("text"):
        yield Item(Entry.MESSAGE, _cut(str(part["text"])), role)
    elif part.get("type") == "tool_use":
        yield Item(Entry.TOOL, _said(part.get("input", {})), str(part.get("name", "tool")))
    elif part.get("type") == "tool_result":
        yield Item(Entry.RESULT, _said(part.get("content", "")))


def _codex(event: dict[str, Any]) -> Iterator[Item]:
    """``{"type": "item.completed", "item": {"type": "agent_message"|"command_execution"|...}}``."""
    item = event.get("item")
    if event.get("type") != "item.completed" or not isinstance(item, dict):
        if event.get("type") in ("turn.failed", "error"):
            error = event.get("error")
            text = error.get("message") if isinstance(error, dict) else event.get("message")
            if text:
                yield Item(Entry.ERROR, _said(text))
        return
    kind = item.get("type")
    if kind == "error":
        yield Item(Entry.ERROR, _said(item.get("message", "")))
    elif kind in ("agent_message", "reasoning") and item.get("text"):
        yield Item(Entry.MESSAGE, _cut(str(item["text"])), "assistant")
    elif kind == "command_execution":
        yield Item(Entry.TOOL, _said(item.get("command", "")), "shell")
        yield Item(Entry.RESULT, _said(item.get("aggregated_output", "")))
    elif kind == "file_change":
        changes = item.get("changes") or []
        paths = [str(c.get("path")) for c in changes if isinstance(c, dict)]
        yield Item(Entry.TOOL, ", ".join(paths), "edit")
    elif kind:
        rest = {k: v for k, v in item.items() if k not in ("id", "type")}
        yield Item(Entry.TOOL, _said(rest), str(kind))


def _gemini(event: dict[str, Any]) -> Iterator[Item]:
    """``{"type": "message", "role", "content"}``, ``tool_use``/``tool_result`` by ``tool_id``."""
    kind = event.get("type")
    if kind == "message" and isinstance(event.get("content"), str):
        role, delta = str(event.get("role", "")), event.get("delta") is True
        yield Item(Entry.MESSAGE, _cut(event["content"]), role, delta)
    elif kind == "tool_use" and "tool_name" in event:
        yield Item(Entry.TOOL, _said(event.get("parameters", {})), str(event["tool_name"]))
    elif kind == "tool_result" and "tool_id" in event:
        error = event.get("error")
        if isinstance(error, dict) and error.get("message"):
            yield Item(Entry.ERROR, _said(error["message"]))
        else:
            yield Item(Entry.RESULT, _said(event.get("output") or event.get("status", "")))


def _opencode(event: dict[str, Any]) -> Iterator[Item]:
    """``{"type": "text"|"tool_use", "part": {...}}`` with a ``sessionID``."""
    part = event.get("part")
    if not isinstance(part, dict):
        return
    kind = event.get("type")
    if kind == "text" and part.get("text"):
        yield Item(Entry.MESSAGE, _cut(str(part["text"])), "assistant")
    elif kind == "tool_use":
        found = part.get("state")
        state: dict[str, Any] = found if isinstance(found, dict) else {}
        yield Item(Entry.TOOL, _said(state.get("input", {})), str(part.get("tool", "tool")))
        if state.get("error"):
            yield Item(Entry.ERROR, _said(state["error"]))
        elif "output" in state:
            yield Item(Entry.RESULT, _said(state["output"]))


_SHAPES: tuple[Callable[[dict[str, Any]], Iterator[Item]], ...] = (
    _claude,
    _codex,
    _gemini,
    _opencode,
)
