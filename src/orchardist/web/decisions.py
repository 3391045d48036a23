"""The dashboard's review actions: what awaits review, and a person's decision from the page,
both through :mod:`orchardist.runs.review` (the one home of the logic ``orchardist review``
shares). The page's JSON is checked here; the decision's meaning is checked there.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..runs.review import decide, pending
from ..state.records import LineComment, ReviewDecision, Verdict
from ..state.store import Store

MAX_TEXT_CHARS = 20_000  # a change request, not a document
MAX_LINES = 200


class BadDecision(ValueError):
    """The page sent a body that is no decision (the message says which field)."""


def pending_rows(store: Store) -> list[dict[str, Any]]:
    """Everything awaiting review in every unfinished run, oldest first."""
    return [asdict(p) for p in pending(store)]


def decision_of(body: Any) -> ReviewDecision:
    """``{"verdict": "approve"|"changes"|"reject", "text": str, "lines": [{path, line, text}]}``
    as a decision; BadDecision naming the field that is wrong."""
    if not isinstance(body, dict):
        raise BadDecision("the body must be a JSON object")
    try:
        verdict = Verdict(str(body.get("verdict")))
    except ValueError:
        raise BadDecision(f"verdict: one of {', '.join(v.value for v in Verdict)}") from None
    text = body.get("text", "")
    if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
        raise BadDecision(f"text: a string of at most {MAX_TEXT_CHARS} characters")
    lines = body.get("lines", [])
    if not isinstance(lines, list) or len(lines) > MAX_LINES:
        raise BadDecision(f"lines: a list of at most {MAX_LINES} line comments")
    return ReviewDecision(verdict, text, tuple(_line(i, c) for i, c in enumerate(lines)))


def _line(i: int, raw: Any) -> LineComment:
    where = f"lines[{i}]"
    if not isinstance(raw, dict):
        raise BadDecision(f"{where}: an object with path, line and text")
    path, line, text = raw.get("path"), raw.get("line"), raw.get("text")
    if not isinstance(path, str) or not path:
        raise BadDecision(f"{where}.path: a file of the patch")
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise BadDecision(f"{where}.line: a line number from 1")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise BadDecision(f"{where}.text: the comment")
    return LineComment(path, line, text)


def record(store_path: Path, run_id: str, task_id: str, decision: ReviewDecision) -> bool:
    """Record the decision (a writable store for this one transaction; the dashboard's own is
    read-only) and wake the run's orchestrator; True when one was woken."""
    store = Store(store_path)
    try:
        return decide(store, store_path.parent, run_id, task_id, decision)
    finally:
        store.close()
