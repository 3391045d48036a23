"""Progress for people: a live table on a terminal, one plain line per event elsewhere."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter, deque
from collections.abc import Mapping
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..engine.hooks import Hook
from ..specs import Plan
from ..state.eventlog import Event
from ..state.events import Kind
from ..state.records import TaskState
from ..state.report import describe
from ..terminal import plain

_STYLE = {
    "pending": "dim",
    "ready": "cyan",
    "running": "yellow",
    "verifying": "magenta",
    "awaiting_review": "bold cyan",
    "merging": "blue",
    "done": "green",
    "failed": "bold red",
    "blocked": "red",
    "cancelled": "dim",
    "skipped": "dim",
}


_TERMINAL = {state.value for state in TaskState if state.terminal}


# A task turns running or verifying when one of its attempts does, and that attempt's own line
# says so (with its number): printing the task's too would tell every change twice.
ECHOED_TASK_STATES = frozenset({TaskState.RUNNING, TaskState.VERIFYING})


class PlainLines(Hook):
    """One line per event, with the time: for pipes, CI logs and ``--json`` runs (on stderr)."""

    def __init__(self, stream: IO[str], verbose: bool = False) -> None:
        self.stream = stream
        self.verbose = verbose  # each event's data too

    def on_event(self, event: Event) -> None:
        """Print the event, unless it only repeats the attempt line just printed."""
        if event.kind == Kind.TASK and event.data.get("state") in ECHOED_TASK_STATES:
            return
        stamp = time.strftime("%H:%M:%S", time.localtime(event.ts))
        line = f"{stamp} {describe(event)}"
        if self.verbose and event.data:
            line += "  " + json.dumps(dict(event.data), default=str, sort_keys=True)
        print(line, file=self.stream, flush=True)


def _try(row: Mapping[str, Any]) -> str:
    """The try column: ``2`` for a task's second try, ``1 (3 candidates)`` for a first try of
    3 candidates (the attempt number counts candidates: try 3 was a first try of 3)."""
    if not row["round"]:
        return ""
    several = f" ({row['candidates']} candidates)" if row["candidates"] > 1 else ""
    return f"{row['round']}{several}"


def _idle(state: str) -> bool:
    """Whether a task in ``state`` is not under way (waiting to start, or ended)."""
    return state in ("pending", "ready") or state in _TERMINAL


class LiveTable(Hook):
    """A table of tasks, states, attempts and elapsed time, redrawn a few times a second.

    A plan of up to ``MAX_ROWS`` tasks shows every task. A larger one shows the tasks under
    way and the last ones to end, with a line for the rest: a redraw costs the same at
    10,000 tasks as at 10, and the counts in the footer are kept as events arrive.
    """

    MAX_ROWS = 40
    RECENT = 5  # ended tasks still shown in a large plan

    def __init__(
        self,
        plan: Plan,
        console: Console,
        header: str = "",
        states: Mapping[str, str] | None = None,
    ) -> None:
        states = states or {}  # a resumed run's tasks start where they were (done stays done)
        self.rows: dict[str, dict[str, Any]] = {
            t.id: {
                "state": states.get(t.id, "pending"),
                "attempt": 0,
                "since": None,
                "until": None,
                "note": "",
                "agent": t.agent,
                "round": 0,  # tries of the task so far: a round of candidates is one try
                "candidates": 1,  # in the latest round
            }
            for t in plan.tasks
        }
        self.counts = Counter(row["state"] for row in self.rows.values())
        # tasks neither pending nor ended, in the order they started
        self.under_way = {t: None for t, r in self.rows.items() if not _idle(r["state"])}
        self.recent: deque[str] = deque(maxlen=self.RECENT)
        self.header = header
        self.started = time.time()
        # Rendered afresh at every refresh, so elapsed times move between events too.
        self.live = Live(
            console=console, refresh_per_second=4, transient=False, get_renderable=self._render
        )
        self.live.start()

    def on_event(self, event: Event) -> None:
        """Update the row the event is about (the next refresh draws it)."""
        data = event.data
        row = self.rows.get(event.task_id or "")
        if row is None:
            return
        if event.kind == Kind.TASK:
            self._moved(event.task_id or "", row, data.get("state", row["state"]))
            row["note"] = data.get("reason", "")
            if row["state"] == TaskState.RUNNING and row["since"] is None:
                row["since"] = event.ts
            row["until"] = event.ts if row["state"] in _TERMINAL else None
            if row["state"] == TaskState.DONE:
                row["note"] = str(data.get("commit", ""))[:12]
        elif event.kind == Kind.ATTEMPT and event.attempt:
            row["attempt"] = event.attempt
            if data.get("state") == "running":
                self._started(row, data)

    @staticmethod
    def _started(row: dict[str, Any], data: Mapping[str, Any]) -> None:
        """An attempt started: candidate 0 opens a new try; the agent is the one it runs on
        (a fallback profile when its own breaker is open)."""
        candidate = int(data.get("candidate", 0))
        if candidate == 0:
            row["round"], row["candidates"] = row["round"] + 1, 1
        row["candidates"] = max(row["candidates"], candidate + 1)
        row["agent"] = data.get("agent", row["agent"])

    def _moved(self, task_id: str, row: dict[str, Any], state: str) -> None:
        """Keep the counts, the tasks under way and the last ended in step with a new state."""
        self.counts[row["state"]] -= 1
        self.counts[state] += 1
        row["state"] = state
        self.under_way.pop(task_id, None)
        if state in _TERMINAL:
            if task_id in self.recent:
                self.recent.remove(task_id)
            self.recent.append(task_id)
        elif not _idle(state):
            self.under_way[task_id] = None

    def _shown(self) -> tuple[list[str], int]:
        """The tasks to draw, and how many are left out."""
        if len(self.rows) <= self.MAX_ROWS:
            return list(self.rows), 0
        room = self.MAX_ROWS - len(self.recent)
        shown = [*self.recent, *itertools.islice(self.under_way, max(room, 0))]
        return shown, len(self.rows) - len(shown)

    def _render(self) -> Group:
        table = Table(expand=False, show_edge=False, pad_edge=False)
        for column in ("task", "agent", "state", "try", "elapsed", "note"):
            table.add_column(column, no_wrap=column != "note", overflow="fold")
        now = time.time()
        shown, left_out = self._shown()
        for task_id in shown:
            row = self.rows[task_id]
            since = row["since"]
            end = row["until"] or now
            elapsed = "" if since is None else f"{end - since:5.1f}s"
            state = row["state"]
            table.add_row(
                task_id,
                row["agent"],
                Text(state, style=_STYLE.get(state, "")),
                _try(row),
                elapsed,
                Text(plain(str(row["note"]))[:80]),  # agents' words: no markup, no escapes
            )
        counts = {s: n for s, n in self.counts.items() if n > 0}
        footer = "  ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        more = [Text(f"... and {left_out} more tasks", style="dim")] if left_out else []
        return Group(
            Text(self.header, style="bold"),
            table,
            *more,
            Text(f"{footer}   {now - self.started:.0f}s", style="dim"),
        )

    def close(self) -> None:
        """Draw the final table and stop redrawing."""
        self.live.update(self._render())
        self.live.stop()
