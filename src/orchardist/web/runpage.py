"""A run's page as the dashboard serves it, kept built per run and brought up to date from the
rows written since it was built.

The store stamps each task and attempt row with the run version it was written at
(state/counts.py), so the page of a live 500-task run after one task moved reads that task's
rows, builds and encodes that task's entry, and joins it with the other 499 encoded before;
a page whose run did not change is sent as the bytes it was. A store that keeps no versions
(only older orchardist versions wrote it) gets the page built whole whenever it changed.
orchardist never deletes a run's tasks or attempts: a page brought up to date would not see it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..state.records import AttemptRecord, Run, TaskRecord
from ..state.report import by_task, rate_limit_waits, run_entry, task_entry
from ..state.store import Store
from .taskdoc import finding, winner_first

Graph = Callable[[Run, list[str]], dict[str, Any]]  # the plan's edges among these tasks


@dataclass(frozen=True)
class Version:
    """What a page was built from: its run's version in the store (or, in a store that keeps
    none, the store's ``data_version``) and its plan file's mtime and size."""

    run: int | None
    store: int | None
    plan: tuple[int, int] | None


@dataclass(frozen=True)
class RunPage:
    """A run's page at one version: its document, its JSON, and the parts they were made of."""

    version: Version
    tasks: dict[str, TaskRecord]  # by id, in plan order
    attempts: dict[str, list[AttemptRecord]]  # by task id, each task's by number
    entries: dict[str, dict[str, Any]]  # each task's entry, by task id
    fragments: dict[str, bytes]  # each task's entry, encoded
    doc: dict[str, Any]
    body: bytes


def current(store: Store, run_id: str, plan: tuple[int, int] | None) -> Version:
    """The version a page of ``run_id`` built now would have (one query, no rows read)."""
    version = store.run_version(run_id)
    return Version(version, store.data_version() if version is None else None, plan)


def build(
    store: Store, run: Run, plan: tuple[int, int] | None, graph: Graph, old: RunPage | None
) -> RunPage:
    """The page of ``run`` as the store holds it now: from ``old`` and the rows written since
    it was built when it can, else from all the run's rows; all read in one snapshot."""
    with store.snapshot():
        version = current(store, run.id, plan)
        run = store.run(run.id) or run
        tasks, attempts, dirty = _rows(store, run.id, version, old)
        waits = rate_limit_waits(store, run.id, list(tasks.values()))
        last_seq = store.last_seq(run.id)
    entries: dict[str, dict[str, Any]] = {}
    fragments: dict[str, bytes] = {}
    for task_id, task in tasks.items():
        wait = None if task.state.terminal else waits.get(task_id)
        if (
            old is not None
            and task_id not in dirty
            and old.entries[task_id]["rate_limited"] == wait
        ):
            entries[task_id], fragments[task_id] = old.entries[task_id], old.fragments[task_id]
        else:
            entries[task_id] = _entry(task, attempts.get(task_id, []), wait)
            fragments[task_id] = _encode(entries[task_id])
    doc = run_entry(run, list(entries.values()), [a for mine in attempts.values() for a in mine])
    same = old is not None and old.version.plan == plan and list(old.tasks) == list(tasks)
    doc["graph"] = old.doc["graph"] if old is not None and same else graph(run, list(tasks))
    doc["last_seq"] = last_seq
    return RunPage(version, tasks, attempts, entries, fragments, doc, _body(doc, fragments))


def _rows(
    store: Store, run_id: str, version: Version, old: RunPage | None
) -> tuple[dict[str, TaskRecord], dict[str, list[AttemptRecord]], set[str]]:
    """The run's tasks and attempts, and the ids of tasks that changed since ``old`` (all of
    them when ``old`` cannot be brought up to date: it is None, the store keeps no versions,
    or a task was added)."""
    if old is not None and old.version.run is not None and version.run is not None:
        changed = store.tasks(run_id, written_after=old.version.run)
        if all(t.task_id in old.tasks for t in changed):
            return _merged(old, changed, store.attempts(run_id, written_after=old.version.run))
    tasks = {t.task_id: t for t in store.tasks(run_id)}
    return tasks, by_task(store.attempts(run_id)), set(tasks)


def _merged(
    old: RunPage, tasks: list[TaskRecord], attempts: list[AttemptRecord]
) -> tuple[dict[str, TaskRecord], dict[str, list[AttemptRecord]], set[str]]:
    """``old``'s rows with the rows written since put in their places."""
    merged_tasks = dict(old.tasks)
    merged_tasks.update((t.task_id, t) for t in tasks)
    merged_attempts = dict(old.attempts)
    for task_id, written in by_task(attempts).items():
        mine = {a.n: a for a in merged_attempts.get(task_id, [])}
        mine.update((a.n, a) for a in written)
        merged_attempts[task_id] = [mine[n] for n in sorted(mine)]
    return merged_tasks, merged_attempts, {t.task_id for t in tasks} | {a.task_id for a in attempts}


def _entry(
    task: TaskRecord, mine: list[AttemptRecord], wait: dict[str, Any] | None
) -> dict[str, Any]:
    """A task's entry on the run's page: the status document's, with its attempts' times, the
    winner first, and its reason as a person reads it."""
    entry = task_entry(task, mine, wait)
    for attempt, record in zip(entry["attempts"], mine, strict=True):
        attempt["started_at"] = record.started_at
        attempt["ended_at"] = record.ended_at
        attempt.pop("log", None)
    entry["attempts"] = winner_first(entry["attempts"])
    entry["finding"] = finding(task.reason)
    return entry


def _encode(value: Any) -> bytes:
    """JSON as the dashboard's responses write it (Starlette's JSONResponse)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode()


def _body(doc: dict[str, Any], fragments: dict[str, bytes]) -> bytes:
    """The page's JSON: its fields around the tasks' entries encoded before."""
    names = list(doc)
    cut = names.index("tasks")
    head = _encode({name: doc[name] for name in names[:cut]})
    tail = _encode({name: doc[name] for name in names[cut + 1 :]})
    tasks = b",".join(fragments.values())
    return head[:-1] + b',"tasks":[' + tasks + b"]," + tail[1:]
