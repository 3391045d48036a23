"""Transcripts from the real CLIs' recorded streams (tests/fixtures/agents): messages, tool
calls and results, whichever tool wrote the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchardist.web.transcript import ENTRY_CHARS, transcript

FIXTURES = Path(__file__).parent.parent / "fixtures" / "agents"


def entries(text: str) -> list[tuple[str, str, str]]:
    return [(e["kind"], e["who"], e["text"]) for e in transcript(text)]


@pytest.mark.parametrize(
    ("tool", "call"),
    [
        ("claude", ("tool", "Edit")),
        ("codex", ("tool", "shell")),
        ("gemini", ("tool", "replace")),
        ("opencode", ("tool", "bash")),
    ],
)
def test_each_tools_stream_reads_as_messages_tool_calls_and_results(
    tool: str, call: tuple[str, str]
) -> None:
    # Given: what the real CLI printed for the "fix add" session, as the attempt's log has it
    got = entries((FIXTURES / tool / "edit.jsonl").read_text())
    # Then: the model's last message, the tool call it made and a result, and no raw event
    assert ("message", "assistant", "Fixed add.") in got
    assert any((kind, who) == call for kind, who, _ in got)
    assert any(kind == "result" for kind, _, _ in got)
    assert not any('"type"' in text for _, _, text in got)


def test_codex_errors_and_plain_lines_are_kept_apart_from_the_events() -> None:
    got = entries((FIXTURES / "codex" / "edit.jsonl").read_text())
    assert got[0] == ("output", "", "Reading additional input from stdin...")
    assert got[1][0] == "error" and "gpt-fake-1" in got[1][2]


def test_streamed_pieces_of_one_message_read_as_one_and_long_results_are_cut() -> None:
    # Given: Gemini streaming a message in two deltas, then a tool result of a whole file
    lines = [
        {"type": "message", "role": "assistant", "content": "Fixed ", "delta": True},
        {"type": "message", "role": "assistant", "content": "add.", "delta": True},
        {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "x" * 10_000},
        "orchardist: a note",
        "$ pytest -q",
    ]
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    got = entries(text)
    assert got[0] == ("message", "assistant", "Fixed add.")
    assert got[1][0] == "result" and len(got[1][2]) <= ENTRY_CHARS + 10
    assert got[2] == ("output", "", "orchardist: a note\n$ pytest -q")
