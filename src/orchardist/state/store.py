"""Durable state in SQLite: runs, tasks, attempts and an append-only event log.

One database per repository, under the git common directory, so nothing appears in the working
tree. WAL mode with a busy timeout lets ``orchardist status`` read while a run writes. Every
state change goes through :meth:`Store.transaction`, which opens an immediate transaction and
rolls back on error, so a crash at any instant leaves the last committed step, never half of one.
A run's, task's or attempt's state changes only along its transition table (records.py).
The tables are :mod:`.dbschema`'s; the records and how rows become them (:mod:`.tables`) are
imported by the methods that read or write runs: a scan, which opens the store to log its events
and use its cache, never does (six dataclasses, the states and their transition tables: ~8 ms).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ..errors import StoreError
from . import counts
from .dbschema import SCHEMA, migrate
from .eventlog import Event

if TYPE_CHECKING:  # verification's records: imported by the code that verifies, not by readers
    from ..verify.oracle import CommandOutcome
    from .records import (
        AttemptChanges,
        AttemptRecord,
        Run,
        RunChanges,
        StoredDecision,
        TaskChanges,
        TaskRecord,
    )
    from .runcounts import RunCounts

MEMORY = ":memory:"  # the path of an in-memory store
BELL_SUFFIX = "-bell"  # the file whose times each commit touches (see Store.transaction)


class Transaction:
    """Writes inside one immediate transaction; events it appends are kept for dispatch."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.events: list[Event] = []

    def add_run(self, run: Run) -> None:
        """Insert a run."""
        self._conn.execute(
            "insert into runs values (?,?,?,?,?,?,?,?,?,?)",
            (
                run.id,
                run.plan_path,
                run.plan_digest,
                run.repo,
                run.base_commit,
                run.branch,
                run.state.value,
                run.created_at,
                run.finished_at,
                run.reason,
            ),
        )

    def set_run(self, run_id: str, **changes: Unpack[RunChanges]) -> None:
        """Update columns of a run (``state`` may be a RunState)."""
        self._update("runs", {"id": run_id}, changes)

    def add_task(self, task: TaskRecord) -> None:
        """Insert a task."""
        self._conn.execute(
            "insert into tasks (run_id, task_id, state, idx, commit_sha, reason, failures, "
            "reruns, stage, pipeline_task) values (?,?,?,?,?,?,?,?,?,?)",
            (
                task.run_id,
                task.task_id,
                task.state.value,
                task.index,
                task.commit,
                task.reason,
                task.failures,
                task.reruns,
                task.stage,
                task.pipeline_task,
            ),
        )

    def set_task(self, run_id: str, task_id: str, **changes: Unpack[TaskChanges]) -> None:
        """Update columns of a task; ``commit`` maps to the ``commit_sha`` column."""
        columns: dict[str, Any] = dict(changes)
        if "commit" in columns:
            columns["commit_sha"] = columns.pop("commit")
        self._update("tasks", {"run_id": run_id, "task_id": task_id}, columns)

    def add_attempt(self, attempt: AttemptRecord) -> None:
        """Insert an attempt."""
        from . import tables

        row = tables.attempt_row(attempt)
        marks = ",".join("?" * len(row))
        self._conn.execute(
            f"insert into attempts ({','.join(row)}) values ({marks})", tuple(row.values())
        )

    def set_attempt(
        self, run_id: str, task_id: str, n: int, **changes: Unpack[AttemptChanges]
    ) -> None:
        """Update columns of an attempt; a ``usage`` value is spread over its columns."""
        from . import tables, usage  # (a scan's store writes no attempt)

        columns: dict[str, Any] = dict(changes)
        used = columns.pop("usage", None)
        if isinstance(used, usage.Usage):
            columns.update({k: getattr(used, k) for k in tables.USAGE_FIELDS})
        self._update("attempts", {"run_id": run_id, "task_id": task_id, "n": n}, columns)

    def put_baseline(self, key: str, commit: str, outcome: CommandOutcome, now: float) -> None:
        """Cache a command's outcome on a base commit."""
        report = None
        if outcome.report is not None:
            r = outcome.report
            report = json.dumps(
                {
                    "passed": sorted(r.passed),
                    "failed": sorted(r.failed),
                    "skipped": sorted(r.skipped),
                }
            )
        self._conn.execute(
            "insert or replace into baselines values (?,?,?,?,?,?,?)",
            (key, commit, outcome.command, outcome.exit_code, int(outcome.timed_out), report, now),
        )

    def intend_commit(self, run_id: str, commit: str, task_id: str, attempt: int) -> None:
        """Record that orchardist is about to put ``commit`` (a task's merge) on the run branch."""
        self._conn.execute(
            "insert or replace into branch_commits values (?,?,?,?)",
            (run_id, commit, task_id, attempt),
        )

    def add_decision(self, decision: StoredDecision) -> bool:
        """Record a review decision; False when the attempt has one already (decided twice)."""
        from . import tables

        cur = self._conn.execute(
            "insert or ignore into reviews values (?,?,?,?,?,?,?,?,?,?)",
            tables.decision_row(decision),
        )
        return cur.rowcount == 1

    def apply_decision(self, run_id: str, task_id: str, attempt: int, now: float) -> bool:
        """Mark a decision acted on; False when it already was (or never existed)."""
        cur = self._conn.execute(
            "update reviews set applied_at = ? where run_id = ? and task_id = ? and attempt = ?"
            " and applied_at is null",
            (now, run_id, task_id, attempt),
        )
        return cur.rowcount == 1

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        """One statement inside the transaction."""
        return self._conn.execute(sql, tuple(args))

    def execute_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run one statement for many rows (maintenance only)."""
        self._conn.executemany(sql, rows)

    def emit(self, event: Event) -> None:
        """Append an event to the log."""
        cur = self._conn.execute(
            "insert into events (run_id, ts, kind, task_id, attempt, data) values (?,?,?,?,?,?)",
            (
                event.run_id,
                event.ts,
                event.kind,
                event.task_id,
                event.attempt,
                json.dumps(dict(event.data), default=str),
            ),
        )
        self.events.append(replace(event, seq=cur.lastrowid or 0))

    def _update(self, table: str, key: Mapping[str, Any], changes: Mapping[str, Any]) -> None:
        if not changes:
            return
        where = " and ".join(f"{c} = ?" for c in key)
        if "state" in changes:
            self._check_move(table, key, where, changes["state"])
        values = [v.value if hasattr(v, "value") else v for v in changes.values()]
        sets = ", ".join(f"{c} = ?" for c in changes)
        cur = self._conn.execute(
            f"update {table} set {sets} where {where}", (*values, *key.values())
        )
        if cur.rowcount != 1:
            raise StoreError(f"no {table[:-1]} {dict(key)} to update")

    def _check_move(self, table: str, key: Mapping[str, Any], where: str, new: str) -> None:
        """Refuse a state change the transition table does not allow (records.moved)."""
        sql = f"select state from {table} where {where}"
        row = self._conn.execute(sql, tuple(key.values())).fetchone()
        if row is not None:  # (no row: the update that follows says so)
            from . import records

            states = {"runs": records.RunState, "tasks": records.TaskState}
            kind = states.get(table, records.AttemptState)  # (the attempts table)
            what = f"{table[:-1]} {'/'.join(str(v) for v in key.values())}"
            records.moved(kind(row[0]), kind(new), what)


class Store:
    """The SQLite store. Safe to share between threads; each write is one transaction."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._counted = False  # whether the store keeps the run counts (counts.py)
        self._bell: int | None = None  # the bell's fd: a writer's file-backed store only
        if read_only:  # readers (the dashboard) never create or change anything
            try:
                self._conn = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?mode=ro",
                    uri=True,
                    timeout=30.0,
                    isolation_level=None,
                    check_same_thread=False,
                )
                self._conn.execute("select 1 from runs limit 1")
                self._counted = counts.has_counts(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read the store at {self.path}: {exc}") from exc
            return
        if str(self.path) != MEMORY:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("pragma journal_mode=wal")
            self._conn.execute("pragma synchronous=normal")
            self._conn.execute("pragma foreign_keys=on")
            self._conn.executescript(SCHEMA)
            migrate(self._conn)
            counts.add_counts(self._conn)
            self._counted = True
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
        if str(self.path) != MEMORY:
            self._bell = _open_bell(self.path)

    @classmethod
    def in_memory(cls) -> Store:
        """A private store that lives while it is open (SQLite's ``:memory:``): the Store
        seam's fake, the same code on a database no other process can see."""
        return cls(Path(MEMORY))

    @classmethod
    def for_repo(cls, common_dir: Path) -> Store:
        """The store of the repository whose git common directory is ``common_dir``."""
        return cls(Path(common_dir) / "orchardist" / "state.db")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()
            if self._bell is not None:
                os.close(self._bell)
                self._bell = None

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """An immediate transaction: committed on success, rolled back on any error.

        A commit then rings the bell: it touches the times of ``state.db-bell``. Watchers
        (web/watch.py, runs/follow.py) wake on the WAL's writes too, but SQLite writes a
        commit's last frame before it makes the commit visible (the WAL index, in shared
        memory, which inotify does not see): a reader woken by that write could read the
        state before it, and the next change might come much later. The bell rings after.
        """
        with self._lock:
            try:
                self._conn.execute("begin immediate")
            except sqlite3.Error as exc:
                raise StoreError(f"store is unavailable: {exc}") from exc
            tx = Transaction(self._conn)
            try:
                yield tx
                self._conn.execute("commit")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("rollback")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"store write failed: {exc}") from exc
                raise
            if self._bell is not None:
                with contextlib.suppress(OSError):
                    os.utime(self._bell)

    # -- reads ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            self._conn.row_factory = sqlite3.Row
            try:
                return list(self._conn.execute(sql, tuple(args)))
            except sqlite3.Error as exc:
                raise StoreError(f"store read failed: {exc}") from exc

    def run(self, run_id: str) -> Run | None:
        """A run by id, or None."""
        from . import tables

        rows = self._rows("select * from runs where id = ?", (run_id,))
        return tables.run_of(rows[0]) if rows else None

    def runs(self) -> list[Run]:
        """All runs, newest first."""
        from . import tables

        rows = self._rows("select * from runs order by created_at desc, id desc")
        return [tables.run_of(r) for r in rows]

    def task(self, run_id: str, task_id: str) -> TaskRecord | None:
        """One task of a run, or None."""
        from . import tables

        rows = self._rows("select * from tasks where run_id = ? and task_id = ?", (run_id, task_id))
        return tables.task_of(rows[0]) if rows else None

    def tasks(self, run_id: str, written_after: int | None = None) -> list[TaskRecord]:
        """A run's tasks in plan order (a pipeline's stages share their task's ``idx``: they
        come in the order they were added, the pipeline's, not by name); only those written
        after run version ``written_after``, if given (see :meth:`run_version`)."""
        from . import tables

        sql, args = "select * from tasks where run_id = ?", list[Any]([run_id])
        if written_after is not None:
            sql, args = sql + " and version > ?", [run_id, written_after]
        return [tables.task_of(r) for r in self._rows(sql + " order by idx, rowid", args)]

    def attempts(
        self, run_id: str, task_id: str | None = None, written_after: int | None = None
    ) -> list[AttemptRecord]:
        """A run's attempts (of one task, if given; written after run version
        ``written_after``, if given), oldest first."""
        from . import tables

        sql = "select * from attempts where run_id = ?"
        args: list[Any] = [run_id]
        if task_id is not None:
            sql += " and task_id = ?"
            args.append(task_id)
        if written_after is not None:
            sql += " and version > ?"
            args.append(written_after)
        return tables.attempts_of(self._rows(sql + " order by started_at, n", args))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block see one state of the store, however others write meanwhile
        (a read transaction; in WAL mode writers do not wait for it)."""
        with self._lock:
            self._rows("begin")
            try:
                yield
            finally:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("commit")

    def run_counts(self) -> dict[str, RunCounts]:
        """Every run's tasks by state and its attempts' total cost, as the store keeps them
        (counts.py): two queries over a row a run and state, no task or attempt read
        (counted from the rows in a store only older versions wrote)."""
        from . import runcounts  # (a scan's store reads no run: runcounts.py)

        if not self._keeps_counts():
            return runcounts.counted(self._rows(runcounts.RECOUNT))
        return runcounts.kept(self._rows(runcounts.KEPT_TASKS), self._rows(runcounts.KEPT_RUNS))

    def _keeps_counts(self) -> bool:
        """Whether the store keeps run counts and versions (a writer of this version opened
        it once): once it does, it always will."""
        self._counted = self._counted or bool(self._rows(counts.COUNTED))
        return self._counted

    def run_version(self, run_id: str) -> int | None:
        """A number every write of the run's rows (itself, its tasks, attempts, events,
        reviews) moves forward, in the write's transaction; None when the store keeps none."""
        if not self._keeps_counts():
            return None
        rows = self._rows("select version from run_stats where run_id = ?", (run_id,))
        return int(rows[0]["version"]) if rows else 0

    def data_version(self) -> int:
        """A number that changes whenever another connection commits to the database (SQLite's
        ``data_version``): while it stays the same, everything read before is still current."""
        return int(self._rows("pragma data_version")[0][0])

    def last_seq(self, run_id: str) -> int:
        """The seq of a run's newest event (0 if none): where a live event stream starts."""
        rows = self._rows("select max(seq) as seq from events where run_id = ?", (run_id,))
        return int(rows[0]["seq"] or 0)

    def branch_commits(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{commit: (task, attempt)}`` orchardist recorded before putting them on the branch."""
        rows = self._rows("select * from branch_commits where run_id = ?", (run_id,))
        return {r["commit_sha"]: (r["task_id"], r["attempt"]) for r in rows}

    def decisions(self, run_id: str, task_id: str | None = None) -> list[StoredDecision]:
        """A run's review decisions (of one task, if given), oldest first."""
        from . import tables

        sql, args = "select * from reviews where run_id = ?", [run_id]
        if task_id is not None:
            sql, args = sql + " and task_id = ?", [run_id, task_id]
        return [
            tables.decision_of(r) for r in self._rows(sql + " order by decided_at, attempt", args)
        ]

    def baseline(self, key: str) -> CommandOutcome | None:
        """A cached baseline outcome, or None."""
        from ..verify.oracle import CommandOutcome, TestReport

        rows = self._rows("select * from baselines where key = ?", (key,))
        if not rows:
            return None
        r = rows[0]
        report = None
        if r["report"]:
            data = json.loads(r["report"])
            report = TestReport(
                frozenset(data["passed"]), frozenset(data["failed"]), frozenset(data["skipped"])
            )
        return CommandOutcome(r["command"], r["exit_code"], bool(r["timed_out"]), report)

    def old_baselines(self, before: float) -> list[str]:
        """Keys of baselines cached before ``before``."""
        rows = self._rows("select key from baselines where created_at < ?", (before,))
        return [r["key"] for r in rows]

    def forget_baselines(self, keys: list[str]) -> None:
        """Drop cached baselines."""
        with self.transaction() as tx:
            tx.execute_many("delete from baselines where key = ?", [(k,) for k in keys])

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        """A run's events with ``seq > after``, in order."""
        rows = self._rows(
            "select * from events where run_id = ? and seq > ? order by seq", (run_id, after)
        )
        return self._events(rows)

    def last_events(
        self, run_id: str, kind: str, state: str | None = None, task_id: str | None = None
    ) -> list[Event]:
        """Each task's latest event of ``kind`` (and ``state``, if given) in a run, in order
        (one query, not the log); only ``task_id``'s, if given."""
        where, args = "", [run_id, kind]
        if state is not None:
            where, args = " and json_extract(data, '$.state') = ?", [*args, state]
        if task_id is not None:
            where, args = where + " and task_id = ?", [*args, task_id]
        rows = self._rows(
            "select * from events where seq in (select max(seq) from events where run_id = ?"
            f" and kind = ?{where} and task_id is not null group by task_id) order by seq",
            args,
        )
        return self._events(rows)

    @staticmethod
    def _events(rows: list[sqlite3.Row]) -> list[Event]:
        return [
            Event(
                run_id=r["run_id"],
                kind=r["kind"],
                ts=r["ts"],
                task_id=r["task_id"],
                attempt=r["attempt"],
                data=json.loads(r["data"]),
                seq=r["seq"],
            )
            for r in rows
        ]


def _open_bell(path: Path) -> int | None:
    """The bell beside the store at ``path``, opened for its commits to touch (None where it
    cannot be: watchers then wake on the WAL's writes alone)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(f"{path}{BELL_SUFFIX}", flags, 0o600)
    except OSError:
        return None
