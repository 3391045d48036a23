"""docs/architecture.md draws the state diagrams its transition tables make, and no others."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchardist.state.records import TASK_MOVES, TASK_START, TaskState
from orchardist.state.statecharts import CHARTS, diagram

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BLOCK = re.compile(r"```mermaid\n(---\ntitle: (\w+)\n---\n.*?)```", re.DOTALL)


def stale(text: str) -> list[str]:
    """The charts a page (markdown) does not draw as :func:`diagram` does, by name."""
    drawn = {m.group(2): m.group(1) for m in BLOCK.finditer(text)}
    return [name for name in CHARTS if drawn.get(name) != diagram(name)]


def test_the_architecture_page_draws_each_state_diagram_as_its_table_makes_it() -> None:
    assert stale(PAGE.read_text(encoding="utf-8")) == []


def test_a_table_that_gains_a_move_leaves_the_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the page as it is, When the task table lets a done task run again
    grown = {**TASK_MOVES, TaskState.DONE: TASK_MOVES[TaskState.DONE] | {TaskState.RUNNING}}
    monkeypatch.setitem(CHARTS, "task", (TASK_START, grown))
    # Then the page's task diagram no longer matches, and the drawing has the new arrow
    assert stale(PAGE.read_text(encoding="utf-8")) == ["task"]
    assert "    done --> running\n" in diagram("task")


def test_a_page_missing_an_arrow_or_a_diagram_is_stale() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert stale(page.replace("    merging --> done\n", "", 1)) == ["task"]
    assert stale(page.replace("title: attempt", "title: attempts", 1)) == ["attempt"]


def test_a_state_no_move_leaves_is_drawn_ending_and_every_chart_starts_at_its_start_state() -> None:
    run = diagram("run").splitlines()
    assert "    done --> [*]" in run and "    [*] --> running" in run
    assert not any(line.startswith("    failed --> [*]") for line in run)  # failed runs retry
