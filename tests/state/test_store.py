"""The SQLite store: records round-trip, failed transactions leave nothing, readers see commits."""

from __future__ import annotations

import contextlib
import os
import select
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist.errors import StoreError, TransitionError
from orchardist.runs.follow import Watch
from orchardist.state import scancache
from orchardist.state.agentrecords import Failure
from orchardist.state.eventlog import Event
from orchardist.state.records import (
    AttemptChanges,
    AttemptRecord,
    AttemptState,
    Run,
    RunChanges,
    RunState,
    TaskChanges,
    TaskRecord,
    TaskState,
)
from orchardist.state.store import Store
from orchardist.state.tables import USAGE_FIELDS
from orchardist.state.usage import Usage


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "state" / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def reader(store: Store) -> Iterator[Store]:
    """A second Store on the same file, as ``orchardist status`` would open it."""
    other = Store(store.path)
    yield other
    other.close()


def a_run(run_id: str = "r1", created_at: float = 100.0) -> Run:
    return Run(
        id=run_id,
        plan_path="/repo/plan.toml",
        plan_digest="d" * 64,
        repo="/repo",
        base_commit="b" * 40,
        branch=f"orchardist/{run_id}",
        state=RunState.RUNNING,
        created_at=created_at,
    )


def an_attempt(task_id: str = "parse", n: int = 1, started_at: float = 110.0) -> AttemptRecord:
    return AttemptRecord(
        run_id="r1",
        task_id=task_id,
        n=n,
        candidate=0,
        agent="bot",
        state=AttemptState.RUNNING,
        base_commit="b" * 40,
        started_at=started_at,
        log_path="/logs/r1/parse-1.log",
        marker="m-1",
    )


# -- round trips -------------------------------------------------------------------------


def test_a_run_round_trips_and_its_updates_stick(store: Store) -> None:
    # Given a stored run
    with store.transaction() as tx:
        tx.add_run(a_run())
    assert store.run("r1") == a_run()

    # When it finishes
    with store.transaction() as tx:
        tx.set_run("r1", state=RunState.DONE, finished_at=200.0, reason="all done")

    # Then the change is read back, typed
    run = store.run("r1")
    assert run is not None
    assert (run.state, run.finished_at, run.reason) == (RunState.DONE, 200.0, "all done")
    assert isinstance(run.state, RunState)
    assert store.run("missing") is None


def test_runs_are_listed_newest_first(store: Store) -> None:
    with store.transaction() as tx:
        tx.add_run(a_run("old", created_at=1.0))
        tx.add_run(a_run("new", created_at=3.0))
        tx.add_run(a_run("mid", created_at=2.0))
    assert [r.id for r in store.runs()] == ["new", "mid", "old"]


def test_tasks_round_trip_in_plan_order(store: Store) -> None:
    # Given tasks added out of plan order
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.add_task(TaskRecord("r1", "docs", TaskState.PENDING, index=1))
        tx.add_task(TaskRecord("r1", "parse", TaskState.READY, index=0))

    # When one is done
    with store.transaction() as tx:
        tx.set_task("r1", "parse", state=TaskState.DONE, commit="c" * 40, failures=1, reruns=2)

    # Then they come back in plan order with every field
    assert store.tasks("r1") == [
        TaskRecord("r1", "parse", TaskState.DONE, 0, "c" * 40, "", failures=1, reruns=2),
        TaskRecord("r1", "docs", TaskState.PENDING, 1),
    ]
    assert store.tasks("other-run") == []


def test_attempts_round_trip_with_failure_and_usage(store: Store) -> None:
    # Given two attempts of one task and one of another
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.add_attempt(an_attempt("parse", 1, started_at=110.0))
        tx.add_attempt(an_attempt("docs", 1, started_at=105.0))
        tx.add_attempt(an_attempt("parse", 2, started_at=120.0))

    # When the first ends in a verify failure, with usage reported
    usage = Usage(cost_usd=0.25, input_tokens=1000, output_tokens=200, turns=3, session_id="s")
    with store.transaction() as tx:
        tx.set_attempt(
            "r1",
            "parse",
            1,
            state=AttemptState.FAILED,
            failure=Failure.VERIFY_FAILED,
            ended_at=115.0,
            exit_code=0,
            detail="verify command failed (1): pytest",
            patch_commit="p" * 40,
            changed_lines=12,
            usage=usage,
        )

    # Then it reads back whole, and attempts come oldest first
    first = store.attempts("r1", "parse")[0]
    assert first == AttemptRecord(
        run_id="r1",
        task_id="parse",
        n=1,
        candidate=0,
        agent="bot",
        state=AttemptState.FAILED,
        base_commit="b" * 40,
        started_at=110.0,
        ended_at=115.0,
        exit_code=0,
        failure=Failure.VERIFY_FAILED,
        detail="verify command failed (1): pytest",
        patch_commit="p" * 40,
        changed_lines=12,
        log_path="/logs/r1/parse-1.log",
        marker="m-1",
        usage=usage,
    )
    assert first.duration_s == 5.0
    assert [(a.task_id, a.n) for a in store.attempts("r1")] == [
        ("docs", 1),
        ("parse", 1),
        ("parse", 2),
    ]
    assert [a.n for a in store.attempts("r1", "parse")] == [1, 2]
    assert store.attempts("r1", "parse")[1].usage == Usage()


def test_events_get_increasing_sequence_numbers_and_can_be_read_after_one(store: Store) -> None:
    # Given events appended over two transactions
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.emit(Event("r1", "run_started", ts=1.0))
        tx.emit(Event("r1", "attempt_started", ts=2.0, task_id="parse", attempt=1))
        first_batch = list(tx.events)
    with store.transaction() as tx:
        tx.emit(Event("r1", "attempt_ended", ts=3.0, task_id="parse", attempt=1, data={"ok": 1}))
        tx.emit(Event("other", "run_started", ts=4.0))

    # Then the transaction handed them back numbered, and the log reads back in order
    assert [e.seq for e in first_batch] == [1, 2]
    events = store.events("r1")
    assert [(e.seq, e.kind, e.task_id, e.attempt) for e in events] == [
        (1, "run_started", None, None),
        (2, "attempt_started", "parse", 1),
        (3, "attempt_ended", "parse", 1),
    ]
    assert events[2].data == {"ok": 1}
    assert events[2].ts == 3.0
    assert [e.seq for e in store.events("r1", after=2)] == [3]


def test_event_data_that_json_cannot_hold_is_stored_as_text(store: Store) -> None:
    with store.transaction() as tx:
        tx.emit(Event("r1", "note", ts=1.0, data={"path": Path("/x/y"), "n": [1, 2]}))
    (event,) = store.events("r1")
    assert event.data == {"path": "/x/y", "n": [1, 2]}


def test_the_store_for_a_repository_lives_under_its_git_common_dir(tmp_path: Path) -> None:
    store = Store.for_repo(tmp_path / ".git")
    try:
        assert store.path == tmp_path / ".git" / "orchardist" / "state.db"
        assert store.path.exists()
    finally:
        store.close()


def test_reopening_a_store_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = Store(path)
    with first.transaction() as tx:
        tx.add_run(a_run())
    first.close()
    second = Store(path)
    try:
        assert second.run("r1") == a_run()
    finally:
        second.close()


# -- transactions ------------------------------------------------------------------------


def test_a_transaction_that_raises_is_rolled_back_entirely(store: Store) -> None:
    # Given a run with one task
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.add_task(TaskRecord("r1", "parse", TaskState.READY, index=0))

    # When a transaction changes the run, the task, an attempt and the log, then fails
    with pytest.raises(RuntimeError, match="crash"), store.transaction() as tx:
        tx.set_run("r1", state=RunState.FAILED)
        tx.set_task("r1", "parse", state=TaskState.RUNNING)
        tx.add_task(TaskRecord("r1", "docs", TaskState.PENDING, index=1))
        tx.add_attempt(an_attempt())
        tx.emit(Event("r1", "attempt_started", ts=1.0))
        raise RuntimeError("crash")

    # Then none of it happened
    run = store.run("r1")
    assert run is not None and run.state == RunState.RUNNING
    assert store.tasks("r1") == [TaskRecord("r1", "parse", TaskState.READY, index=0)]
    assert store.attempts("r1") == []
    assert store.events("r1") == []

    # and the store still takes writes
    with store.transaction() as tx:
        tx.set_task("r1", "parse", state=TaskState.RUNNING)
    assert store.tasks("r1")[0].state == TaskState.RUNNING


def test_updating_a_missing_row_raises_and_rolls_back(store: Store) -> None:
    with store.transaction() as tx:
        tx.add_run(a_run())
    with pytest.raises(StoreError, match="no task"), store.transaction() as tx:
        tx.set_run("r1", reason="half done")
        tx.set_task("r1", "ghost", state=TaskState.DONE)
    run = store.run("r1")
    assert run is not None and run.reason == ""


def test_a_duplicate_insert_fails_the_whole_transaction(store: Store) -> None:
    with store.transaction() as tx:
        tx.add_run(a_run())
    with pytest.raises(StoreError, match="UNIQUE"), store.transaction() as tx:
        tx.add_task(TaskRecord("r1", "parse", TaskState.READY, index=0))
        tx.add_run(a_run())
    assert store.tasks("r1") == []


def test_a_state_move_its_table_lacks_is_refused_and_rolls_back_the_transaction(
    store: Store,
) -> None:
    # Given a run whose task is done and whose attempt merged
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.add_task(TaskRecord("r1", "parse", TaskState.DONE, index=0, commit="c" * 40))
        tx.add_attempt(an_attempt())
        tx.set_attempt("r1", "parse", 1, state=AttemptState.PASSED)
        tx.set_attempt("r1", "parse", 1, state=AttemptState.MERGED)

    # When one transaction notes a reason, then moves the merged attempt back to running
    with (
        pytest.raises(TransitionError, match=r"attempt r1/parse/1: .* merged -> running"),
        store.transaction() as tx,
    ):
        tx.set_run("r1", reason="half done")
        tx.set_attempt("r1", "parse", 1, state=AttemptState.RUNNING)
    # or the done task to running, or the finished run back to running
    with (
        pytest.raises(TransitionError, match=r"task r1/parse: .* done -> running"),
        store.transaction() as tx,
    ):
        tx.set_task("r1", "parse", state=TaskState.RUNNING)
    with store.transaction() as tx:
        tx.set_run("r1", state=RunState.DONE)
    with (
        pytest.raises(TransitionError, match=r"run r1: .* done -> running"),
        store.transaction() as tx,
    ):
        tx.set_run("r1", state=RunState.RUNNING)

    # Then none of it was stored
    run = store.run("r1")
    assert run is not None and (run.state, run.reason) == (RunState.DONE, "")
    assert store.tasks("r1")[0].state is TaskState.DONE
    assert store.attempts("r1")[0].state is AttemptState.MERGED


def test_an_empty_update_changes_nothing(store: Store) -> None:
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.set_run("r1")
        tx.set_task("r1", "not-even-there")  # no columns: nothing to check
    assert store.run("r1") == a_run()


# -- concurrency -------------------------------------------------------------------------


def test_a_second_store_on_the_same_file_sees_committed_data_only(
    store: Store, reader: Store
) -> None:
    # Given a writer in the middle of a transaction
    with store.transaction() as tx:
        tx.add_run(a_run())
        tx.emit(Event("r1", "run_started", ts=1.0))

        # Then a reader sees nothing of it yet, and is not blocked
        assert reader.run("r1") is None
        assert reader.events("r1") == []

    # When it commits, the reader sees all of it
    assert reader.run("r1") == a_run()
    assert [e.kind for e in reader.events("r1")] == ["run_started"]


def test_a_reader_keeps_seeing_new_commits(store: Store, reader: Store) -> None:
    with store.transaction() as tx:
        tx.add_run(a_run())
    assert reader.run("r1") == a_run()
    with store.transaction() as tx:
        tx.set_run("r1", state=RunState.DONE)
    run = reader.run("r1")
    assert run is not None and run.state == RunState.DONE


def test_writers_on_two_stores_wait_for_each_other_instead_of_failing(
    store: Store, reader: Store
) -> None:
    # Given two stores on one file, each written by its own thread, started together
    with store.transaction() as tx:
        tx.add_run(a_run())
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def write(target: Store, prefix: str) -> None:
        try:
            start.wait(timeout=30)
            for i in range(50):
                with target.transaction() as tx:
                    tx.emit(Event("r1", f"{prefix}-{i}", ts=float(i)))
        except BaseException as exc:  # collected for the main thread to report
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(store, "a")),
        threading.Thread(target=write, args=(reader, "b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then every write landed, in one gap-free sequence
    assert errors == []
    events = store.events("r1")
    assert len(events) == 100
    assert [e.seq for e in events] == list(range(1, 101))


def test_threads_sharing_one_store_each_get_whole_transactions(store: Store) -> None:
    # Given one store shared by four threads, each writing task rows in its own transactions
    with store.transaction() as tx:
        tx.add_run(a_run())
    start = threading.Barrier(4)

    def write(worker: int) -> None:
        start.wait(timeout=30)
        for i in range(25):
            with store.transaction() as tx:
                tx.add_task(TaskRecord("r1", f"w{worker}-{i}", TaskState.PENDING, index=i))
                tx.emit(Event("r1", "task_added", ts=0.0, task_id=f"w{worker}-{i}"))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then each task came with its event: no transaction was split or lost
    assert len(store.tasks("r1")) == 100
    assert sorted(e.task_id or "" for e in store.events("r1")) == sorted(
        t.task_id for t in store.tasks("r1")
    )


def test_the_scan_cache_finds_more_keys_than_one_query_may_bind_in_the_order_asked(
    store: Store,
) -> None:
    # Given 1,500 cached results, 2,000 keys asked for in an order of their own (SQLite binds
    # at most 999 variables in one query on older builds)
    scancache.put(store, [(f"k{i}", "s", f"v{i}") for i in range(1500)], 1.0, 10_000)
    asked = [f"k{i}" for i in reversed(range(2000))]

    # When they are looked up, SQLite telling each statement it runs
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    found = scancache.get(store, asked, 2.0)
    store._conn.set_trace_callback(None)

    # Then every cached one is found, in the order asked, and none that is not
    assert list(found) == [key for key in asked if int(key[1:]) < 1500]
    assert found["k1499"] == "v1499"
    # and with one query for each 500 keys, not one a key (a cached scan of 1,000 files)
    assert sum(s.lstrip().lower().startswith("select") for s in statements) == 4


@pytest.mark.parametrize(
    ("table", "changes"),
    [("runs", RunChanges), ("tasks", TaskChanges), ("attempts", AttemptChanges)],
)
def test_every_typed_change_names_a_column_of_its_table(
    tmp_path: Path, table: str, changes: type
) -> None:
    # Given: a store's tables as SQLite made them
    Store(tmp_path / "state.db").close()
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        columns = {row[1] for row in conn.execute(f"pragma table_info({table})")}
    # Then: each key a write may change is a column (a task's commit is commit_sha, an
    # attempt's usage spreads over the usage columns)
    renamed = {"commit": "commit_sha"}
    keys = {renamed.get(k, k) for k in changes.__annotations__} - {"usage"}
    assert keys <= columns, keys - columns
    if "usage" in changes.__annotations__:
        assert set(USAGE_FIELDS) <= columns


def test_a_watcher_that_saw_every_write_up_to_a_commit_is_woken_again_once_it_is_visible(
    store: Store, reader: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a watch on the store's folder, as the dashboard and `follow` keep
    watch = Watch(None)
    watch.add(store.path.parent)
    assert store.path.parent in watch.folders
    # and a reader that drains the watch and reads at the instant the commit returns: SQLite
    # writes a commit's last WAL frame before it makes the commit visible, so a reader woken
    # by that write may have read the state before it (under load the dashboard's stream then
    # waited its 15 s keep-alive for the run's last event)
    real_utime, seen = os.utime, list[int]()

    def read_at_the_commit(*args: Any, **kwargs: Any) -> None:
        drain(watch)
        seen.append(len(reader.runs()))
        real_utime(*args, **kwargs)

    monkeypatch.setattr(os, "utime", read_at_the_commit)
    # When: a run is written
    with store.transaction() as tx:
        tx.add_run(a_run())
    if not seen:  # (nothing ran at the commit: the reader looks right after it instead)
        drain(watch)
        seen.append(len(reader.runs()))
    # Then: the reader saw the commit, and the watch wakes once more, after it
    assert seen == [1]
    readable, _, _ = select.select([watch.fd], [], [], 10.0)
    assert readable, "no change after the commit was visible: a watcher would sleep on"
    watch.close()


def drain(watch: Watch) -> None:
    """Read every change queued on ``watch`` (what a woken watcher does)."""
    with contextlib.suppress(BlockingIOError):
        while os.read(watch.fd, 65536):
            pass
