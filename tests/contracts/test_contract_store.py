"""The Store seam's contract, run against a SQLite file and SQLite ``:memory:`` alike."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchardist.errors import StoreError
from orchardist.seams import Store
from orchardist.state.agentrecords import Failure
from orchardist.state.eventlog import Event
from orchardist.state.records import (
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
from orchardist.state.store import Store as SqliteStore
from orchardist.verify.oracle import CommandOutcome


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = (
        SqliteStore(tmp_path / "state.db") if request.param == "file" else SqliteStore.in_memory()
    )
    try:
        yield made
    finally:
        made.close()


def _run(run_id: str = "r1", created_at: float = 100.0) -> Run:
    return Run(
        run_id,
        "plan.toml",
        "digest",
        "/repo",
        "b" * 40,
        "orchardist/r1",
        RunState.RUNNING,
        created_at,
    )


def _seeded(store: Store) -> Run:
    run = _run()
    with store.transaction() as tx:
        tx.add_run(run)
        tx.add_task(TaskRecord(run.id, "a", TaskState.PENDING, 0))
        tx.add_task(TaskRecord(run.id, "b", TaskState.PENDING, 1))
    return run


def test_what_a_transaction_writes_reads_back_as_the_same_records(store: Store) -> None:
    # Given: a run with two tasks and an attempt
    run = _seeded(store)
    attempt = AttemptRecord(run.id, "a", 1, 0, "sh", AttemptState.RUNNING, "b" * 40, 101.0)
    with store.transaction() as tx:
        tx.add_attempt(attempt)
    # Then: the records read back equal what was written, tasks in plan order
    assert store.run(run.id) == run
    assert store.runs() == [run]
    assert [t.task_id for t in store.tasks(run.id)] == ["a", "b"]
    assert store.attempts(run.id) == [attempt]
    assert store.attempts(run.id, "b") == []


def test_updates_change_only_the_named_columns(store: Store) -> None:
    # Given: a run with a running attempt
    run = _seeded(store)
    with store.transaction() as tx:
        tx.add_attempt(AttemptRecord(run.id, "a", 1, 0, "sh", AttemptState.RUNNING, "b" * 40, 1.0))
    # When: the attempt fails (after winning a round), the task is done and the run ends
    with store.transaction() as tx:
        tx.set_attempt(run.id, "a", 1, won=True, selection="won: only passing candidate")
        tx.set_attempt(run.id, "a", 1, state=AttemptState.FAILED, failure=Failure.TIMEOUT)
        tx.set_task(run.id, "a", state=TaskState.DONE, commit="c" * 40)
        tx.set_run(run.id, state=RunState.DONE, finished_at=200.0)
    # Then: each record shows its new values, with enums intact, and nothing else changed
    (attempt,) = store.attempts(run.id)
    assert attempt.won is True and attempt.selection == "won: only passing candidate"
    assert (attempt.state, attempt.failure, attempt.agent) == (
        AttemptState.FAILED,
        Failure.TIMEOUT,
        "sh",
    )
    task = store.tasks(run.id)[0]
    assert (task.state, task.commit, task.index) == (TaskState.DONE, "c" * 40, 0)
    ended = store.run(run.id)
    assert ended is not None and (ended.state, ended.finished_at) == (RunState.DONE, 200.0)


def test_a_failed_transaction_leaves_nothing_behind(store: Store) -> None:
    # Given: a run
    run = _seeded(store)
    # When: a transaction writes, then fails
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.set_task(run.id, "a", state=TaskState.DONE)
        tx.emit(Event(run.id, "task", 5.0, "a", data={"state": "done"}))
        raise RuntimeError("crash between two writes")
    # Then: neither write is there
    assert store.tasks(run.id)[0].state is TaskState.PENDING
    assert store.events(run.id) == []


def test_updating_a_record_that_does_not_exist_is_a_store_error(store: Store) -> None:
    run = _seeded(store)
    with pytest.raises(StoreError, match="no task"), store.transaction() as tx:
        tx.set_task(run.id, "nope", state=TaskState.DONE)
    with pytest.raises(StoreError, match="no attempt"), store.transaction() as tx:
        tx.set_attempt(run.id, "a", 9, state=AttemptState.FAILED)


def test_events_come_back_in_order_with_increasing_sequence_numbers(store: Store) -> None:
    # Given: events emitted over two transactions
    run = _seeded(store)
    with store.transaction() as tx:
        tx.emit(Event(run.id, "run", 1.0, data={"state": "created"}))
        tx.emit(Event(run.id, "task", 2.0, "a", data={"state": "running"}))
    with store.transaction() as tx:
        tx.emit(Event(run.id, "attempt", 3.0, "a", 1, data={"state": "passed", "n": [1, 2]}))
    # Then: they read back in order, data intact, and ``after`` skips what was seen
    events = store.events(run.id)
    assert [e.kind for e in events] == ["run", "task", "attempt"]
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert events[2].data == {"state": "passed", "n": [1, 2]} and events[2].attempt == 1
    assert [e.kind for e in store.events(run.id, after=events[1].seq)] == ["attempt"]
    # And: the transaction kept the events it appended, for hooks
    assert [e.kind for e in tx.events] == ["attempt"]


def test_intended_commits_and_baselines_are_kept(store: Store) -> None:
    run = _seeded(store)
    outcome = CommandOutcome("pytest -q", 1, False, None)
    with store.transaction() as tx:
        tx.intend_commit(run.id, "c" * 40, "a", 2)
        tx.put_baseline("key1", "b" * 40, outcome, 10.0)
    assert store.branch_commits(run.id) == {"c" * 40: ("a", 2)}
    assert store.baseline("key1") == outcome
    assert store.baseline("key2") is None


def test_two_in_memory_stores_share_nothing() -> None:
    # The fake is private: a second in-memory store does not see the first one's runs.
    first, second = SqliteStore.in_memory(), SqliteStore.in_memory()
    with first.transaction() as tx:
        tx.add_run(_run())
    assert [r.id for r in first.runs()] == ["r1"] and second.runs() == []
    assert not Path(":memory:").exists()


def test_a_store_from_before_winners_were_data_learns_them_from_the_selection(
    tmp_path: Path,
) -> None:
    # Given: a store whose attempts table has no ``won`` column, with a winner and a loser
    store = SqliteStore(tmp_path / "state.db")
    run = _seeded(store)
    with store.transaction() as tx:
        for n, selection in ((1, "won: smallest passing diff"), (2, "lost to candidate 0: x")):
            tx.add_attempt(
                AttemptRecord(run.id, "a", n, n - 1, "sh", AttemptState.PASSED, "b" * 40, 1.0)
            )
            tx.set_attempt(run.id, "a", n, selection=selection)
    store.close()
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("alter table attempts drop column won")
    conn.commit()
    conn.close()
    # When: a newer orchardist opens it
    reopened = SqliteStore(tmp_path / "state.db")
    # Then: the winner is known as data, and only the winner
    assert [(a.n, a.won) for a in reopened.attempts(run.id)] == [(1, True), (2, False)]
    reopened.close()


def test_a_review_decision_is_recorded_once_per_attempt_and_applied_once(store: Store) -> None:
    # Given: a change request with a line comment on attempt 1 of a
    run = _seeded(store)
    comment = LineComment("a.py", 3, "why?", quote="> 3 | x = 1")
    decision = ReviewDecision(Verdict.CHANGES, "use y", (comment,), who="ann")
    stored = StoredDecision(run.id, "a", 1, decision, 5.0, diff="+x = 1")
    # When: it is recorded, then recorded again (a second reviewer, a double click)
    with store.transaction() as tx:
        first = tx.add_decision(stored)
    with store.transaction() as tx:
        again = tx.add_decision(
            StoredDecision(run.id, "a", 1, ReviewDecision(Verdict.APPROVE), 6.0)
        )
    # Then: the first one stands, read back as written
    assert (first, again) == (True, False)
    assert store.decisions(run.id) == [stored]
    # When: it is applied twice
    with store.transaction() as tx:
        applied = [tx.apply_decision(run.id, "a", 1, 7.0), tx.apply_decision(run.id, "a", 1, 8.0)]
    # Then: only the first takes, and a decision never made cannot be applied
    assert applied == [True, False]
    assert [d.applied_at for d in store.decisions(run.id, "a")] == [7.0]
    with store.transaction() as tx:
        assert not tx.apply_decision(run.id, "b", 1, 9.0)
    assert store.decisions(run.id, "b") == []
