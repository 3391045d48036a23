"""The status document's view of rate-limited tasks: when each may run again."""

from __future__ import annotations

from typing import Any

import pytest

from orchardist.cli.summary import print_summary, rate_limit_wait, when
from orchardist.state.eventlog import Event
from orchardist.state.records import Run, RunState, TaskRecord, TaskState
from orchardist.state.report import status_document
from orchardist.state.store import Store

BASE = "b" * 40


def _store(states: dict[str, TaskState], events: list[tuple[float, str, dict[str, Any]]]) -> Store:
    store = Store.in_memory()
    run = Run("r1", "plan.toml", "", "/nonexistent", BASE, "orchardist/r1", RunState.RUNNING, 0.0)
    with store.transaction() as tx:
        tx.add_run(run)
        for i, (task, state) in enumerate(states.items()):
            tx.add_task(TaskRecord(run.id, task, state, i))
        for ts, task, data in events:
            tx.emit(Event(run.id, "attempt", ts, task, 1, data))
    return store


def _doc(store: Store) -> dict[str, Any]:
    run = store.run("r1")
    assert run is not None
    return status_document(store, run)


def _tasks(store: Store) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in _doc(store)["tasks"]}


LIMITED = {"state": "requeued", "failure": "rate_limited"}


def test_a_rate_limited_task_says_when_it_may_run_again() -> None:
    # Given tasks requeued by rate limits: with a reported reset, without one, and one relaunched
    store = _store(
        {"reset": TaskState.READY, "backoff": TaskState.READY, "again": TaskState.RUNNING},
        [
            (1000.0, "reset", {"state": "running"}),
            (1010.0, "reset", {**LIMITED, "retry_after_s": 600.0}),
            (1020.0, "backoff", LIMITED),
            (1030.0, "again", {**LIMITED, "retry_after_s": 5.0}),
            (1040.0, "again", {"state": "running"}),
        ],
    )
    # When status reads them
    tasks = _tasks(store)
    # Then the one with a reset may run again at the requeue's time plus the reset
    assert tasks["reset"]["rate_limited"] == {
        "since": 1010.0,
        "retry_after_s": 600.0,
        "retry_at": 1610.0,
    }
    # And the back-off one has no time; the relaunched one is no longer waiting
    assert tasks["backoff"]["rate_limited"]["retry_at"] is None
    assert tasks["again"]["rate_limited"] is None


def test_an_infra_requeue_or_a_finished_task_is_not_rate_limited() -> None:
    store = _store(
        {"infra": TaskState.READY, "over": TaskState.FAILED},
        [
            (1.0, "infra", {"state": "requeued", "failure": "infra_error"}),
            (2.0, "over", {**LIMITED, "retry_after_s": 60.0}),
        ],
    )
    tasks = _tasks(store)
    assert tasks["infra"]["rate_limited"] is None
    assert tasks["over"]["rate_limited"] is None


def test_the_human_status_prints_the_time_and_how_long_is_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wait = {"since": 1010.0, "retry_after_s": 600.0, "retry_at": 1610.0}
    assert rate_limit_wait(wait, now=1010.0) == (
        f"rate limited: may run again at {when(1610.0)} (in 10m00s)"
    )
    assert rate_limit_wait(wait, now=2000.0).endswith("(now)")
    assert "back-off decides" in rate_limit_wait({**wait, "retry_at": None})
    limited = {**LIMITED, "retry_after_s": 600.0}
    store = _store({"reset": TaskState.READY}, [(1010.0, "reset", limited)])
    print_summary(_doc(store), attempts=True)
    assert f"rate limited: may run again at {when(1610.0)}" in capsys.readouterr().out
