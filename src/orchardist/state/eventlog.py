"""The event log's record: one line of the store's append-only log.

Apart from the run, task and attempt records (:mod:`.records`) and their transition tables,
which a scan never reads: a scan logs its events under its own id, and importing the records
(their six dataclasses, states and tables) took longer than writing those events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    """One line of a run's append-only event log."""

    run_id: str
    kind: str
    ts: float
    task_id: str | None = None
    attempt: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0  # assigned by the store
