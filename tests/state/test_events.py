"""The event vocabulary (events.py) is the one the code writes and docs/state.md documents."""

from __future__ import annotations

import ast
import re

import pytest

from orchardist.state.events import STATES, Kind, known
from orchardist.state.records import TaskState
from source_trees import ROOT, SRC, python_files


def _constant(node: ast.expr) -> list[str] | None:
    """The string(s) an expression is, when it is a literal, an enum member of the vocabulary
    or a choice of two literals; None when it is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, other = _constant(node.body), _constant(node.orelse)
        return body + other if body is not None and other is not None else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        import orchardist.state.agentrecords as agentrecords
        import orchardist.state.events as events
        import orchardist.state.records as records

        enum = next(
            (e for m in (events, records, agentrecords) if (e := getattr(m, node.value.id, None))),
            None,
        )
        member = getattr(enum, node.attr, None) if enum is not None else None
        return [str(member)] if isinstance(member, str) else None
    return None


def _may_write_an_event(func: ast.expr) -> bool:
    """Whether a call of ``func`` may be ``x.event``, ``x._event`` or ``Event``: checked on the
    node before unparsing it (unparsing each of the package's ~9,000 calls took ~0.25 s)."""
    if isinstance(func, ast.Attribute):
        return func.attr in ("event", "_event")
    return isinstance(func, ast.Name) and func.id == "Event"


def emitted() -> tuple[tuple[str, str, list[str] | None], ...]:
    """(where, kind, states) of every event the run's code writes with a literal kind."""
    found = []
    for file in python_files(SRC):
        path = file.path
        if "scan" in path.relative_to(SRC).parts:  # scans keep a log of their own
            continue
        for node in ast.walk(file.tree):
            if not isinstance(node, ast.Call) or not _may_write_an_event(node.func):
                continue
            name = ast.unparse(node.func)
            kinds_given = [a for a in node.args[:2] if ast.unparse(a).startswith("Kind.")]
            if name.endswith((".event", "._event")) and kinds_given:
                # tx.event(Kind.X, ...) and the ledger's own event(tx, Kind.X, ...)
                kind_node = kinds_given[0]
                states = next((_constant(k.value) for k in node.keywords if k.arg == "state"), [])
            elif name == "Event" and len(node.args) >= 2:
                kind_node = node.args[1]
                data = next((k.value for k in node.keywords if k.arg == "data"), None)
                states = []
                if isinstance(data, ast.Dict):
                    for key, value in zip(data.keys, data.values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == "state":
                            states = _constant(value)
            else:
                continue
            kinds = _constant(kind_node)
            if kinds is None:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found += [(where, kind, states) for kind in kinds]
    return tuple(found)


@pytest.fixture(scope="module")
def events() -> tuple[tuple[str, str, list[str] | None], ...]:
    """The events the code writes, found once for the two tests that read them."""
    return emitted()


def test_every_event_the_code_writes_is_in_the_vocabulary(
    events: tuple[tuple[str, str, list[str] | None], ...],
) -> None:
    assert len(events) >= 30  # the scan found the scheduler's and runs.py's events
    for where, kind, states in events:
        assert kind in set(Kind), (where, kind)
        for state in states or []:
            assert known(kind, state), (where, kind, state)


def test_every_kind_is_written_somewhere(
    events: tuple[tuple[str, str, list[str] | None], ...],
) -> None:
    assert {kind for _, kind, _ in events} == set(Kind)


def documented_table() -> dict[str, set[str]]:
    """``kind -> states`` from the event table of docs/state.md (fields in parentheses left out)."""
    text = (ROOT / "docs" / "state.md").read_text()
    start = text.index("| `kind` | `data.state` values, and other fields |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        kind_cell, states_cell = (cell.strip() for cell in line.strip("|").split(" | ", 1))
        kind = kind_cell.strip("`")
        if states_cell.startswith("any task state"):
            rows[kind] = {s.value for s in TaskState}
            continue
        if states_cell.startswith("no state"):
            rows[kind] = set()
            continue
        bare = re.sub(
            r"\([^)]*\)", "", states_cell.split(":", 1)[0] if kind == "escalation" else states_cell
        )
        rows[kind] = set(re.findall(r"`([^`]+)`", bare))
    return rows


def test_the_documented_event_table_lists_every_kind_with_exactly_its_states() -> None:
    table = documented_table()
    assert set(table) == {k.value for k in Kind}
    for kind, states in STATES.items():
        assert table[kind.value] == {str(s) for s in states}, kind
