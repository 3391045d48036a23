"""What the store keeps per run so that readers need not recount it: each run's tasks by state,
its attempts' cost, and a version that every write of the run's rows moves forward.

SQLite triggers keep them, so they change in the same transaction as the rows they count,
whichever code wrote those rows (an older orchardist still driving a run, a maintenance
statement), and a crash leaves both or neither. Each task and attempt row carries the run
version it was last written at, so a reader holding a run's page built at version V reads back
only the rows written after V. A store made before these existed gets them, recounted from its
rows, in one transaction the first time a writer opens it (:func:`add_counts`).
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreError

# One statement each (executescript would commit the transaction they are made in).
_TABLES = (
    """create table if not exists run_stats (
        run_id text primary key,
        version integer not null default 0,  -- moved forward by every write of the run's rows
        cost_usd real,                        -- its attempts' cost_usd summed
        costed integer not null default 0     -- how many attempts reported a cost
    )""",
    """create table if not exists task_counts (
        run_id text not null,
        state text not null,
        n integer not null,
        primary key (run_id, state)
    )""",
)

_BUMP = (
    "insert into run_stats (run_id, version) values ({run}, 1) "
    "on conflict (run_id) do update set version = version + 1;"
)
_COUNT = (
    "insert into task_counts (run_id, state, n) values ({run}, {state}, {delta}) "
    "on conflict (run_id, state) do update set n = n + {delta};"
)
_STAMP = (  # the row remembers the version it was written at
    "update {table} set version = (select version from run_stats where run_id = new.run_id) "
    "where rowid = new.rowid;"
)
_COST = (
    "insert into run_stats (run_id, cost_usd, costed) values ({run}, {add}, {n}) "
    "on conflict (run_id) do update set cost_usd = case when costed + {n} = 0 then null "
    "else coalesce(cost_usd, 0) + {add} end, costed = costed + {n};"
)
_COST_IN = _COST.format(run="new.run_id", add="new.cost_usd", n="1")
_COST_OUT = _COST.format(run="old.run_id", add="-old.cost_usd", n="-1")
_COST_CHANGED = _COST.format(
    run="new.run_id",
    add="coalesce(new.cost_usd, 0) - coalesce(old.cost_usd, 0)",
    n="(new.cost_usd is not null) - (old.cost_usd is not null)",
)


def _bump(run: str = "new.run_id") -> str:
    return _BUMP.format(run=run)


# A stamping update changes only ``version``: ``when new.version is old.version`` keeps the
# triggers of an update from firing again for the update they make themselves.
_TRIGGERS = {
    "runs_added": f"after insert on runs begin {_bump('new.id')} end",
    "runs_written": f"after update on runs begin {_bump('new.id')} end",
    "tasks_added": (
        f"after insert on tasks begin {_bump()} "
        f"{_COUNT.format(run='new.run_id', state='new.state', delta=1)} "
        f"{_STAMP.format(table='tasks')} end"
    ),
    "tasks_written": (
        f"after update on tasks when new.version is old.version begin {_bump()} "
        f"{_STAMP.format(table='tasks')} end"
    ),
    "tasks_moved": (
        "after update of state on tasks when new.state is not old.state begin "
        f"{_COUNT.format(run='old.run_id', state='old.state', delta=-1)} "
        f"{_COUNT.format(run='new.run_id', state='new.state', delta=1)} end"
    ),
    "tasks_removed": (
        f"after delete on tasks begin {_bump('old.run_id')} "
        f"{_COUNT.format(run='old.run_id', state='old.state', delta=-1)} end"
    ),
    "attempts_added": (
        f"after insert on attempts begin {_bump()} {_STAMP.format(table='attempts')} end"
    ),
    "attempts_costed": (
        f"after insert on attempts when new.cost_usd is not null begin {_COST_IN} end"
    ),
    "attempts_written": (
        f"after update on attempts when new.version is old.version begin {_bump()} "
        f"{_STAMP.format(table='attempts')} end"
    ),
    "attempts_recosted": (
        "after update of cost_usd on attempts when new.cost_usd is not old.cost_usd "
        f"begin {_COST_CHANGED} end"
    ),
    "attempts_removed": f"after delete on attempts begin {_bump('old.run_id')} end",
    "attempts_uncosted": (
        f"after delete on attempts when old.cost_usd is not null begin {_COST_OUT} end"
    ),
    "events_added": f"after insert on events begin {_bump()} end",
    "reviews_added": f"after insert on reviews begin {_bump()} end",
    "reviews_written": f"after update on reviews begin {_bump()} end",
    "branch_commits_added": f"after insert on branch_commits begin {_bump()} end",
}
_LAST = "branch_commits_added"  # made last: once it exists, all of them do

_RECOUNT = (
    "insert into run_stats (run_id, version, cost_usd, costed) select id, 1, "
    "(select sum(cost_usd) from attempts a where a.run_id = runs.id), "
    "(select count(cost_usd) from attempts a where a.run_id = runs.id) from runs",
    "insert into task_counts (run_id, state, n) "
    "select run_id, state, count(*) from tasks group by run_id, state",
)


COUNTED = f"select 1 from sqlite_master where type = 'trigger' and name = '{_LAST}'"


def has_counts(conn: sqlite3.Connection) -> bool:
    """Whether the store keeps the counts (a store only older versions wrote does not)."""
    return conn.execute(COUNTED).fetchone() is not None


def add_counts(conn: sqlite3.Connection) -> None:
    """Give a store the counts, the versions and their triggers, recounted from its rows, in
    one immediate transaction: a crash leaves the store as it was, and of two processes
    opening it at once the second finds them made."""
    if has_counts(conn):  # the common case: no write lock taken to find out
        return
    conn.execute("begin immediate")
    try:
        if not has_counts(conn):
            _make(conn)
        conn.execute("commit")
    except sqlite3.Error as exc:
        conn.execute("rollback")
        raise StoreError(f"cannot add the run counts to the store: {exc}") from exc


def _make(conn: sqlite3.Connection) -> None:
    for table in ("tasks", "attempts"):
        have = {row[1] for row in conn.execute(f"pragma table_info({table})")}
        if "version" not in have:
            conn.execute(f"alter table {table} add column version integer not null default 0")
    for statement in _TABLES:
        conn.execute(statement)
    conn.execute("delete from run_stats")
    conn.execute("delete from task_counts")
    for statement in _RECOUNT:
        conn.execute(statement)
    for name, body in _TRIGGERS.items():
        conn.execute(f"create trigger {name} {body}")
