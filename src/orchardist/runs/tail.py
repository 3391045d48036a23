"""``events``, ``logs --follow`` and ``status --watch``: a run read as it happens.

Each reader reads what is there, then waits on :func:`orchardist.runs.follow.follow` (inotify and
the orchestrator's pidfd, no polling) and reads again, until the run's orchestrator exits.
"""

from __future__ import annotations

import codecs
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..safeio import read_tail
from ..state.eventlog import Event
from ..state.records import Run
from ..terminal import plain
from .follow import follow


def event_json(event: Event) -> str:
    """One line of ``orchardist events``: seq, time, kind, task, attempt, data."""
    return json.dumps(
        {
            "seq": event.seq,
            "time": event.ts,
            "kind": event.kind,
            "task": event.task_id,
            "attempt": event.attempt,
            "data": dict(event.data),
        },
        default=str,
    )


def print_events(
    ws: Any, run: Run, follow_run: bool, after: int = 0, out: IO[str] = sys.stdout
) -> None:
    """Print the run's events with ``seq > after``; with ``follow_run``, until the run ends."""
    for _ in follow(ws.state_dir, run.id) if follow_run else [True]:
        for event in ws.store.events(run.id, after):
            out.write(event_json(event) + "\n")
            after = event.seq
        out.flush()


def follow_logs(
    ws: Any,
    run: Run,
    task: str,
    attempt: int | None,
    out: IO[str] = sys.stdout,
    raw: bool = False,
) -> None:
    """Print the task's attempt logs and keep printing what is appended, new attempts
    included, until the run's orchestrator exits (escape sequences stripped unless ``raw``)."""
    logs = ws.state_dir / "logs" / run.id
    offsets: dict[int, int] = {}
    decoders: dict[int, codecs.IncrementalDecoder] = {}
    for _ in follow(ws.state_dir, run.id, extra=(logs,)):
        for record in ws.store.attempts(run.id, task):
            if attempt is not None and record.n != attempt:
                continue
            path = Path(record.log_path or logs / f"{task}.{record.n}.log")
            if record.n not in offsets:
                out.write(f"==> {task} attempt {record.n} ({record.state.value}) {path}\n")
                offsets[record.n] = 0
                decoders[record.n] = codecs.getincrementaldecoder("utf-8")(errors="replace")
            offsets[record.n] = _copy_from(path, offsets[record.n], decoders[record.n], out, raw)
        out.flush()


def _copy_from(
    path: Path, offset: int, decoder: codecs.IncrementalDecoder, out: IO[str], raw: bool
) -> int:
    """Write the bytes of ``path`` from ``offset`` on (leniently decoded); the new offset."""
    while chunk := read_tail(path, offset, 1 << 16).data:  # nothing yet: not created
        text = decoder.decode(chunk)
        out.write(text if raw else plain(text))
        offset += len(chunk)
    return offset


def watch_status(
    ws: Any, run: Run, render: Callable[[Run], str], out: IO[str] = sys.stdout
) -> None:
    """Print ``render(run)`` again each time it changes, until the run's orchestrator exits;
    on a terminal the screen is cleared first."""
    shown = ""
    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    for _ in follow(ws.state_dir, run.id):
        text = render(ws.resolve_run(run.id))
        if text != shown:
            out.write(clear + text + "\n")
            out.flush()
            shown = text
