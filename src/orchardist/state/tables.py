"""The conversion between the store's rows and the records of :mod:`orchardist.state.records`
(the tables themselves are :mod:`.dbschema`'s)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from .agentrecords import Failure
from .records import (
    AttemptRecord,
    AttemptState,
    LineComment,
    ReviewDecision,
    Run,
    RunState,
    StoredDecision,
    TaskRecord,
    TaskState,
    Verdict,
)
from .usage import Usage

USAGE_FIELDS = [f.name for f in fields(Usage)]


def run_of(r: sqlite3.Row) -> Run:
    return Run(
        id=r["id"],
        plan_path=r["plan_path"],
        plan_digest=r["plan_digest"],
        repo=r["repo"],
        base_commit=r["base_commit"],
        branch=r["branch"],
        state=RunState(r["state"]),
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        reason=r["reason"],
    )


def task_of(r: sqlite3.Row) -> TaskRecord:
    return TaskRecord(
        run_id=r["run_id"],
        task_id=r["task_id"],
        state=TaskState(r["state"]),
        index=r["idx"],
        commit=r["commit_sha"],
        reason=r["reason"],
        failures=r["failures"],
        reruns=r["reruns"],
        stage=r["stage"],
        pipeline_task=r["pipeline_task"],
    )


def attempt_row(a: AttemptRecord) -> dict[str, Any]:
    row: dict[str, Any] = {
        f.name: getattr(a, f.name) for f in fields(AttemptRecord) if f.name != "usage"
    }
    row["state"] = a.state.value
    row["failure"] = a.failure.value if a.failure else None
    row.update({k: getattr(a.usage, k) for k in USAGE_FIELDS})
    return row


def attempts_of(rows: Sequence[sqlite3.Row]) -> list[AttemptRecord]:
    """The attempts rows of one query hold, their columns looked up once (a 500-task run's
    page reads 500 rows: by name in a Row, each of 25 fields is a search of its columns)."""
    if not rows:
        return []
    keys = rows[0].keys()
    usage = tuple(k for k in USAGE_FIELDS if k in set(keys))
    return [attempt_of(dict(zip(keys, r, strict=True)), usage) for r in rows]


def attempt_of(
    r: sqlite3.Row | Mapping[str, Any], usage: Sequence[str] = USAGE_FIELDS
) -> AttemptRecord:
    """The attempt a row holds; ``usage``: the usage fields it has columns for."""
    return AttemptRecord(
        run_id=r["run_id"],
        task_id=r["task_id"],
        n=r["n"],
        candidate=r["candidate"],
        agent=r["agent"],
        state=AttemptState(r["state"]),
        base_commit=r["base_commit"],
        started_at=r["started_at"],
        ended_at=r["ended_at"],
        exit_code=r["exit_code"],
        failure=Failure(r["failure"]) if r["failure"] else None,
        detail=r["detail"],
        patch_commit=r["patch_commit"],
        changed_lines=r["changed_lines"],
        log_path=r["log_path"],
        marker=r["marker"],
        usage=Usage(**{k: r[k] for k in usage}),
        verdict=r["verdict"],
        selection=r["selection"],
        won=bool(r["won"]),
        handoff=r["handoff"],
    )


def decision_row(d: StoredDecision) -> tuple[Any, ...]:
    lines = [
        {"path": c.path, "line": c.line, "text": c.text, "quote": c.quote} for c in d.decision.lines
    ]
    decision = d.decision
    return (
        d.run_id,
        d.task_id,
        d.attempt,
        decision.verdict.value,
        decision.text,
        json.dumps(lines),
        decision.who,
        d.decided_at,
        d.diff,
        d.applied_at,
    )


def decision_of(r: sqlite3.Row) -> StoredDecision:
    lines = tuple(LineComment(**c) for c in json.loads(r["lines"]))
    decision = ReviewDecision(Verdict(r["verdict"]), r["text"], lines, r["who"])
    return StoredDecision(
        run_id=r["run_id"],
        task_id=r["task_id"],
        attempt=r["attempt"],
        decision=decision,
        decided_at=r["decided_at"],
        diff=r["diff"],
        applied_at=r["applied_at"],
    )
