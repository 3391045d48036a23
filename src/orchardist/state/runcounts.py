"""Each run's tasks by state and its attempts' cost, read back: the one record readers of the
counts get (the run list, the dashboard) and the queries it is read with.

Apart from the triggers that keep the counts (counts.py), which every writer's store runs as it
opens: a scan opens the store to log its events and never reads a run's counts, and a dataclass
costs about a millisecond to make (its methods are compiled from source at import).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RunCounts:
    """A run's tasks counted by state, and what its attempts cost (None: none reported)."""

    tasks: Mapping[str, int]
    cost_usd: float | None


KEPT_TASKS = "select run_id, state, n from task_counts where n > 0"
KEPT_RUNS = "select run_id, cost_usd, costed from run_stats"
RECOUNT = (  # in a store that keeps no counts: from the rows
    "select t.run_id, t.state, count(*) as n, c.cost from tasks t left join "
    "(select run_id, sum(cost_usd) as cost from attempts group by run_id) c "
    "on c.run_id = t.run_id group by t.run_id, t.state"
)


def kept(tasks: Iterable[sqlite3.Row], runs: Iterable[sqlite3.Row]) -> dict[str, RunCounts]:
    """Each run's counts from the rows of :data:`KEPT_TASKS` and :data:`KEPT_RUNS`."""
    states: dict[str, dict[str, int]] = {}
    for r in tasks:
        states.setdefault(r["run_id"], {})[r["state"]] = r["n"]
    return {
        r["run_id"]: RunCounts(states.get(r["run_id"], {}), r["cost_usd"] if r["costed"] else None)
        for r in runs
    }


def counted(rows: Iterable[sqlite3.Row]) -> dict[str, RunCounts]:
    """Each run's counts from the rows of :data:`RECOUNT`."""
    counts: dict[str, RunCounts] = {}
    for r in rows:
        prev = counts.get(r["run_id"], RunCounts({}, r["cost"]))
        counts[r["run_id"]] = RunCounts({**prev.tasks, r["state"]: r["n"]}, r["cost"])
    return counts
