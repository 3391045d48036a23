"""The transition tables of records.py drawn as mermaid state diagrams.

docs/architecture.md shows these drawings; a test compares them with :func:`diagram`, so the
page changes when a table does. ``python -m orchardist.state.statecharts`` prints them for the page.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .records import ATTEMPT_MOVES, ATTEMPT_START, RUN_MOVES, RUN_START, TASK_MOVES, TASK_START

# name -> (the state a record starts in, its table); the names head the doc's diagrams
CHARTS: Mapping[str, tuple[enum.StrEnum, Mapping[Any, frozenset[Any]]]] = {
    "run": (RUN_START, RUN_MOVES),
    "task": (TASK_START, TASK_MOVES),
    "attempt": (ATTEMPT_START, ATTEMPT_MOVES),
}


def diagram(name: str) -> str:
    """One table as a mermaid ``stateDiagram-v2``, moves in the enum's order; a state no move
    leaves is drawn ending."""
    start, moves = CHARTS[name]
    lines = ["---", f"title: {name}", "---", "stateDiagram-v2", f"    [*] --> {start.value}"]
    order = list(type(start))
    for old in order:
        targets = [new for new in order if new in moves[old]]
        lines += [f"    {old.value} --> {new.value}" for new in targets]
        if not targets:
            lines.append(f"    {old.value} --> [*]")
    return "\n".join(lines) + "\n"


def fenced() -> str:
    """Every chart as a fenced mermaid block, in the order the page shows them."""
    return "\n".join(f"```mermaid\n{diagram(name)}```\n" for name in CHARTS)


if __name__ == "__main__":
    print(fenced(), end="")
