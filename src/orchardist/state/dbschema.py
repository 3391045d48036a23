"""The store's tables, and the migration of stores older versions made.

Apart from the rows' records (:mod:`.tables`): opening the store creates the tables, and a
scan, which opens it to log its events and use its cache, reads no run, task or attempt.
"""

from __future__ import annotations

import sqlite3

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
