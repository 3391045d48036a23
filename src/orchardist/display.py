"""Progress for people: a live table on a terminal, one plain line per event elsewhere."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .events import Kind
from .hooks import Hook
from .plan import Plan
from .records import Event, TaskState
from .report import describe

_STYLE = {
    "pending": "dim",
    "ready": "cyan",
    "running": "yellow",
    "verifying": "magenta",
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


class LiveTable(Hook):
    """A table of tasks, states, attempts and elapsed time, redrawn as events arrive."""

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
            }
            for t in plan.tasks
        }
        self.header = header
        self.started = time.time()
        # Rendered afresh at every refresh, so elapsed times move between events too.
        self.live = Live(
            console=console, refresh_per_second=4, transient=False, get_renderable=self._render
        )
        self.live.start()

    def on_event(self, event: Event) -> None:
        """Update the row the event is about."""
        data = event.data
        row = self.rows.get(event.task_id or "")
        if row is not None:
            if event.kind == Kind.TASK:
                row["state"] = data.get("state", row["state"])
                row["note"] = data.get("reason", "")
                if row["state"] == TaskState.RUNNING and row["since"] is None:
                    row["since"] = event.ts
                row["until"] = event.ts if row["state"] in _TERMINAL else None
                if row["state"] == TaskState.DONE:
                    row["note"] = str(data.get("commit", ""))[:12]
            elif event.kind == Kind.ATTEMPT and event.attempt:
                row["attempt"] = event.attempt
        self.live.refresh()

    def _render(self) -> Group:
        table = Table(expand=False, show_edge=False, pad_edge=False)
        for column in ("task", "agent", "state", "try", "elapsed", "note"):
            table.add_column(column, no_wrap=column != "note", overflow="fold")
        now = time.time()
        for task_id, row in self.rows.items():
            since = row["since"]
            end = row["until"] or now
            elapsed = "" if since is None else f"{end - since:5.1f}s"
            state = row["state"]
            table.add_row(
                task_id,
                row["agent"],
                Text(state, style=_STYLE.get(state, "")),
                str(row["attempt"] or ""),
                elapsed,
                str(row["note"])[:80],
            )
        counts: dict[str, int] = {}
        for row in self.rows.values():
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        footer = "  ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return Group(
            Text(self.header, style="bold"),
            table,
            Text(f"{footer}   {now - self.started:.0f}s", style="dim"),
        )

    def close(self) -> None:
        """Draw the final table and stop redrawing."""
        self.live.update(self._render())
        self.live.stop()
