"""The dashboard's fixed costs, counted rather than timed: the runs list reads the store in a
fixed number of queries however many runs there are, and a run's page loads its plan once per
version of the plan file and never reads the whole event log. (The times, before and after:
``python benchmarks/dashboard_load.py --pages``.)"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchardist.plan import loading as plan_module
from orchardist.state import tables as tables_module
from orchardist.state.eventlog import Event
from orchardist.state.records import (
    AttemptRecord,
    AttemptState,
    Run,
    RunState,
    TaskRecord,
    TaskState,
)
from orchardist.state.report import status_document
from orchardist.state.store import Store
from orchardist.state.usage import Usage
from orchardist.web.reads import Reads, Settings
from support import Finished, make_repo
from web.test_api import finished_plan

STATES = [TaskState.DONE, TaskState.FAILED, TaskState.BLOCKED]


def dashboard_data(repo: Path) -> Reads:
    """The dashboard's read side over the store of ``repo``, in this process."""
    store = repo / ".git" / "orchardist" / "state.db"
    return Reads(Settings(repo, store, "token", frozenset()))


@contextmanager
def statements(data: Reads) -> Iterator[list[str]]:
    """The SQL statements the dashboard's store connection runs inside the block."""
    seen: list[str] = []
    conn = data.store._conn
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def add_runs(store: Store, first: int, count: int) -> None:
    """Runs ``first`` .. ``first + count - 1``: run k has k % 4 tasks in varied states and one
    attempt each, which cost 0.25 $ except in odd runs (the agent reported no cost)."""
    for k in range(first, first + count):
        run_id = f"r{k:03d}"
        with store.transaction() as tx:
            tx.add_run(Run(run_id, "plan.toml", "d", "repo", "0" * 40, "b", RunState.DONE, k))
            for i in range(k % 4):
                tx.add_task(TaskRecord(run_id, f"t{i}", STATES[(k + i) % 3], i))
                cost = None if k % 2 else 0.25
                tx.add_attempt(
                    AttemptRecord(
                        run_id, f"t{i}", 1, 0, "a", AttemptState.PASSED, "0" * 40, k,
                        usage=Usage(cost_usd=cost),
                    )
                )  # fmt: skip
                tx.emit(Event(run_id, "task", k, f"t{i}", None, {"state": "done"}))


def test_the_runs_list_takes_a_fixed_number_of_queries_however_many_runs(tmp_path: Path) -> None:
    # Given: a store with 4 runs
    repo = make_repo(tmp_path / "repo")
    store = Store.for_repo(repo / ".git")
    add_runs(store, 0, 4)
    data = dashboard_data(repo)
    with statements(data) as few:
        small = data.runs()
    # When: 40 more runs are added
    add_runs(store, 4, 40)
    with statements(data) as many:
        rows = data.runs()
    # Then: the same number of queries reads 11 times as many runs
    assert len(small) == 4 and len(rows) == 44
    assert len(many) == len(few) <= 3, many
    # and each row counts what the run's status document counts
    for row in rows:
        doc = status_document(store, store.run(row["run"]))  # type: ignore[arg-type]
        assert row["summary"] == doc["summary"], row["run"]
        assert (row["tasks"], row["cost_usd"]) == (len(doc["tasks"]), doc["totals"]["cost_usd"])
    store.close()


def test_a_run_page_loads_its_plan_once_per_version_and_reads_no_event_log(
    repo: Path, run_plan: Callable[..., Finished], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a finished run of a plan, and a count of the plan loads the dashboard makes
    plan = finished_plan(repo)
    done = run_plan(plan)
    loads: list[str] = []
    real_load = plan_module.load_plan

    def counting_load(path: Path | str, *args: object, **kwargs: object) -> object:
        loads.append(str(path))
        return real_load(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plan_module, "load_plan", counting_load)
    data = dashboard_data(repo)
    run = data.run(done.run.id)
    assert run is not None
    # When: the run's page is viewed three times
    with statements(data) as seen:
        docs = [data.run_doc(run) for _ in range(3)]
    # Then: the plan was loaded and forecast once; the event log was not read, only its end
    assert loads == [str(plan)]
    assert docs[0] == docs[2] and ("base", "left") in map(tuple, docs[0]["graph"]["edges"])
    assert not [s for s in seen if "from events" in s and "max(seq)" not in s], seen
    assert docs[0]["last_seq"] == max(e.seq for e in done.ws.store.events(run.id))
    # When: the plan file changes (``top`` now depends on ``left`` only)
    text = plan.read_text().replace('depends_on = ["left", "right"]', 'depends_on = ["left"]')
    plan.write_text(text)
    os.utime(plan, ns=(1, 1))
    # Then: the next view loads it again and shows the new graph
    edges = {tuple(e) for e in data.run_doc(run)["graph"]["edges"]}
    assert len(loads) == 2 and ("right", "top") not in edges and ("left", "top") in edges


def test_a_run_page_is_built_again_only_after_the_store_changed(
    repo: Path, run_plan: Callable[..., Finished]
) -> None:
    # Given: a finished run whose page was viewed once
    done = run_plan(finished_plan(repo))
    data = dashboard_data(repo)
    run = data.run(done.run.id)
    assert run is not None
    first = data.run_doc(run)
    # When: it is viewed again with nothing written in between
    with statements(data) as seen:
        again = data.run_doc(run)
    # Then: no task, attempt or event was read
    assert again == first
    assert not [s for s in seen if "from tasks" in s or "from attempts" in s], seen
    # When: the orchestrator's connection (another one) commits a change to the run
    with done.ws.store.transaction() as tx:
        tx.set_task(run.id, "left", reason="edited by another process")
    # Then: the next view reads it
    tasks = {t["id"]: t for t in data.run_doc(run)["tasks"]}
    assert tasks["left"]["reason"] == "edited by another process"


def test_the_runs_list_reads_no_task_or_attempt(tmp_path: Path) -> None:
    # Given: a store with 50 runs
    repo = make_repo(tmp_path / "repo")
    store = Store.for_repo(repo / ".git")
    add_runs(store, 0, 50)
    data = dashboard_data(repo)
    # When: the runs list is read
    with statements(data) as seen:
        rows = data.runs()
    # Then: no statement read the tasks or attempts tables, and the counts are right
    assert len(rows) == 50
    assert not [s for s in seen if ROWS.search(s)], seen
    assert {r["run"]: r["tasks"] for r in rows} == {f"r{k:03d}": k % 4 for k in range(50)}
    store.close()


ROWS = re.compile(r"\b(tasks|attempts)\b")  # a statement that reads task or attempt rows


def one_run(store: Store, run_id: str, tasks: int) -> None:
    """A running run of ``tasks`` pending tasks, each with a first attempt."""
    with store.transaction() as tx:
        tx.add_run(Run(run_id, "plan.toml", "d", "repo", "0" * 40, "b", RunState.RUNNING, 1.0))
        for i in range(tasks):
            tx.add_task(TaskRecord(run_id, f"t{i:03d}", TaskState.PENDING, i))
            tx.add_attempt(
                AttemptRecord(
                    run_id, f"t{i:03d}", 1, 0, "a", AttemptState.RUNNING, "0" * 40, 1.0 + i,
                    usage=Usage(cost_usd=0.01),
                )
            )  # fmt: skip


@contextmanager
def records_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The task and attempt records the store makes from its rows inside the block."""
    made: list[str] = []
    real_task, real_attempts = tables_module.task_of, tables_module.attempts_of

    def task_of(row: Any) -> Any:
        made.append("task")
        return real_task(row)

    def attempts_of(rows: Any) -> Any:
        made.extend("attempt" for _ in rows)
        return real_attempts(rows)

    with monkeypatch.context() as patch:
        patch.setattr(tables_module, "task_of", task_of)
        patch.setattr(tables_module, "attempts_of", attempts_of)
        yield made


def test_a_run_page_reads_again_only_the_rows_its_run_wrote_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a 200-task run and another run, and the big run's page viewed once
    repo = make_repo(tmp_path / "repo")
    store = Store.for_repo(repo / ".git")
    one_run(store, "big", 200)
    one_run(store, "other", 2)
    data = dashboard_data(repo)
    run = data.run("big")
    assert run is not None
    data.run_page(run)
    # When: the other run is written
    with store.transaction() as tx:
        tx.set_task("other", "t000", state=TaskState.READY)
        tx.emit(Event("other", "task", 2.0, "t000", None, {"state": "ready"}))
    # Then: the big run's page is the one built before, nothing read
    with statements(data) as seen, records_read(monkeypatch) as made:
        data.run_page(run)
    assert made == [] and len(seen) <= 2, seen
    # When: one task of the big run moves and its attempt ends
    with store.transaction() as tx:
        tx.set_task("big", "t007", state=TaskState.READY, reason="moved")
        tx.set_attempt("big", "t007", 1, state=AttemptState.PASSED, ended_at=9.0)
    # Then: the page shows it, having read that task and that attempt only
    with records_read(monkeypatch) as made:
        page = json.loads(data.run_page(run))
    assert sorted(made) == ["attempt", "task"]
    task = next(t for t in page["tasks"] if t["id"] == "t007")
    assert (task["state"], task["reason"]) == ("ready", "moved")
    assert task["attempts"][0]["state"] == "passed" and task["attempts"][0]["ended_at"] == 9.0
    assert page == dashboard_data(repo).run_doc(run)  # what a page built whole shows
    store.close()


def test_a_run_page_brought_up_to_date_is_the_page_built_whole(tmp_path: Path) -> None:
    # Given: a 20-task run whose page is viewed after each write below
    repo = make_repo(tmp_path / "repo")
    store = Store.for_repo(repo / ".git")
    one_run(store, "r", 20)
    data = dashboard_data(repo)
    run = data.run("r")
    assert run is not None
    data.run_page(run)
    limited = {"state": "requeued", "failure": "rate_limited", "retry_after_s": 30}
    writes = [
        lambda tx: tx.set_task("r", "t001", state=TaskState.READY),
        lambda tx: tx.set_attempt("r", "t001", 1, usage=Usage(cost_usd=2.5), verdict="verified"),
        lambda tx: tx.set_attempt("r", "t002", 1, state=AttemptState.PASSED),
        lambda tx: tx.set_attempt("r", "t002", 1, state=AttemptState.MERGED),
        lambda tx: tx.set_task("r", "t002", state=TaskState.DONE, commit="c" * 40),
        lambda tx: tx.emit(Event("r", "attempt", 5.0, "t003", 1, limited)),  # no row written
        lambda tx: tx.add_attempt(
            AttemptRecord("r", "t003", 2, 0, "a", AttemptState.RUNNING, "0" * 40, 6.0)
        ),
        lambda tx: tx.emit(Event("r", "attempt", 7.0, "t003", 2, {"state": "running"})),
        lambda tx: tx.add_task(TaskRecord("r", "late", TaskState.PENDING, 99)),  # a new task
        lambda tx: tx.set_run("r", state=RunState.DONE, finished_at=9.0),
    ]
    for i, write in enumerate(writes):
        # When: the run is written (by another connection, as the orchestrator does)
        with store.transaction() as tx:
            write(tx)
        # Then: its page is the one a dashboard that never saw it builds, as served
        fresh = dashboard_data(repo)
        assert data.run_doc(run) == fresh.run_doc(run), i
        assert json.loads(data.run_page(run)) == fresh.run_doc(run), i
    limited_task = next(t for t in data.run_doc(run)["tasks"] if t["id"] == "t003")
    assert [a["n"] for a in limited_task["attempts"]] == [1, 2]
    store.close()


def test_a_task_page_reads_only_its_own_task_and_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a running 200-task run where one task waits on a rate limit and has two attempts
    repo = make_repo(tmp_path / "repo")
    store = Store.for_repo(repo / ".git")
    one_run(store, "big", 200)
    limited = {"state": "requeued", "failure": "rate_limited", "retry_after_s": 30}
    with store.transaction() as tx:
        tx.emit(Event("big", "attempt", 5.0, "t007", 1, limited))
        tx.emit(Event("big", "attempt", 6.0, "t008", 1, limited))
        tx.add_attempt(AttemptRecord("big", "t007", 2, 1, "b", AttemptState.FAILED, "0" * 40, 7.0))
    data = dashboard_data(repo)
    run = data.run("big")
    assert run is not None
    # When: the task's page is read
    with records_read(monkeypatch) as made:
        task = data.task_doc(run, "t007")
    # Then: it read that task and its two attempts, none of the other 199 tasks' rows
    assert sorted(made) == ["attempt", "attempt", "task"]
    # and its entry is the status document's, with its own wait and no other task's
    assert task is not None
    entry = next(t for t in status_document(store, run)["tasks"] if t["id"] == "t007")
    assert task["rate_limited"] == entry["rate_limited"] == {
        "since": 5.0, "retry_after_s": 30, "retry_at": 35.0,
    }  # fmt: skip
    shown = ("id", "state", "commit", "reason", "winner", "cost_usd", "input_tokens")
    assert {k: task[k] for k in shown} == {k: entry[k] for k in shown}
    assert sorted(a["n"] for a in task["attempts"]) == [a["n"] for a in entry["attempts"]] == [1, 2]
    assert data.task_doc(run, "nope") is None
    store.close()
