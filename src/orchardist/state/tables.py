"""The store's tables: the schema, the migration of stores older versions made, and the
conversion between rows and the records of :mod:`orchardist.state.records`."""

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

SCHEMA = """
create table if not exists runs (
    id text primary key,
    plan_path text not null,
    plan_digest text not null,
    repo text not null,
    base_commit text not null,
    branch text not null,
    state text not null,
    created_at real not null,
    finished_at real,
    reason text not null default ''
);
create table if not exists tasks (
    run_id text not null references runs(id),
    task_id text not null,
    state text not null,
    idx integer not null,
    commit_sha text,
    reason text not null default '',
    failures integer not null default 0,
    reruns integer not null default 0,
    stage text not null default '',
    pipeline_task text not null default '',
    primary key (run_id, task_id)
);
create table if not exists attempts (
    run_id text not null,
    task_id text not null,
    n integer not null,
    candidate integer not null,
    agent text not null,
    state text not null,
    base_commit text not null,
    started_at real not null,
    ended_at real,
    exit_code integer,
    failure text,
    detail text not null default '',
    patch_commit text,
    changed_lines integer,
    log_path text not null default '',
    marker text not null default '',
    cost_usd real,
    input_tokens integer,
    output_tokens integer,
    turns integer,
    session_id text,
    verdict text not null default '',
    selection text not null default '',
    won integer not null default 0,
    handoff text not null default '',
    primary key (run_id, task_id, n)
);
create table if not exists events (
    seq integer primary key autoincrement,
    run_id text not null,
    ts real not null,
    kind text not null,
    task_id text,
    attempt integer,
    data text not null default '{}'
);
create index if not exists events_run on events(run_id, seq);
create table if not exists baselines (
    key text primary key,
    commit_sha text not null,
    command text not null,
    exit_code integer not null,
    timed_out integer not null,
    report text,
    created_at real not null
);
create table if not exists scan_cache (
    key text primary key,
    scanner text not null,
    value text not null,
    used_at real not null
);
create index if not exists scan_cache_used on scan_cache(used_at);
-- Commits orchardist is about to put on a run branch, written before the ref moves: resume
-- trusts a task's commit on the branch only if it is here (a trailer anyone can write).
create table if not exists branch_commits (
    run_id text not null,
    commit_sha text not null,
    task_id text not null,
    attempt integer not null,
    primary key (run_id, commit_sha)
);
-- A person's decision on a patch that awaits review: one per reviewed attempt, applied once
-- (applied_at is set in the transaction of the move it causes).
create table if not exists reviews (
    run_id text not null,
    task_id text not null,
    attempt integer not null,
    verdict text not null,
    text text not null default '',
    lines text not null default '[]',
    who text not null default '',
    decided_at real not null,
    diff text not null default '',
    applied_at real,
    primary key (run_id, task_id, attempt)
);
"""

USAGE_FIELDS = [f.name for f in fields(Usage)]


def migrate(conn: sqlite3.Connection) -> None:
    """Add columns that newer versions introduced to stores made by older ones."""
    for table, columns in (
        ("attempts", ("verdict", "selection", "handoff")),
        ("tasks", ("stage", "pipeline_task")),
    ):
        have = {row[1] for row in conn.execute(f"pragma table_info({table})")}
        for column in columns:
            if column not in have:
                conn.execute(f"alter table {table} add column {column} text not null default ''")
    have = {row[1] for row in conn.execute("pragma table_info(attempts)")}
    if "won" not in have:  # winners were told only in the selection's words before
        conn.execute("alter table attempts add column won integer not null default 0")
        conn.execute("update attempts set won = 1 where selection like 'won%'")


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
