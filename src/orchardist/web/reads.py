"""What the dashboard shows, read from the store (read-only) and the repository: the runs list,
a run's page, a task's page. These are its fixed costs, so they are kept flat: the runs list
counts tasks in one query, a run's page is built again only when the store or the plan file
changed, and the plan is loaded and forecast once per version of its file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OrchardistError, StoreError
from ..git.repo import Repo
from ..safeio import read_tail
from ..state.records import Run
from ..state.report import rate_limit_wait, task_entry
from ..state.runcounts import RunCounts
from ..state.store import Store
from .runpage import RunPage, build, current
from .taskdoc import attempt_extras, finding, review_history, winner_first

LOG_TAIL_BYTES = 256 * 1024
DIFF_MAX_BYTES = 512 * 1024
RUN_DOCS_KEPT = 16  # run pages kept built (a 500-task run's is ~0.3 MB)


@dataclass(frozen=True)
class Settings:
    """What the app serves and whom it lets in."""

    repo_root: Path
    store_path: Path
    token: str
    allowed_hosts: frozenset[str]  # "host:port" values the Host header may carry


class Reads:
    """Read-side queries over the store and the repository: the documents the pages show."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        # diffs of commits only: no identity or excludes file asked of git (3 processes)
        self.repo = Repo(settings.repo_root, identity=False, untracked=False)
        # run id -> (plan file version, (edges, critical path)): see _graph
        self._graphs: dict[str, tuple[tuple[int, int] | None, Any]] = {}
        self._docs: dict[str, RunPage] = {}  # run id -> its page: see run_page
        self._docs_lock = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:  # a repository without runs yet has no store: open it late
            self._store = Store(self.settings.store_path, read_only=True)
        return self._store

    def log_folder(self) -> Path:
        """Where commands the dashboard starts write their output."""
        return self.settings.store_path.parent / "web"

    def has_store(self) -> bool:
        """Whether there is a store to read (a first run may be creating it right now)."""
        if self._store is None and self.settings.store_path.exists():
            with contextlib.suppress(StoreError):
                self._store = Store(self.settings.store_path, read_only=True)
        return self._store is not None

    def run(self, run_id: str) -> Run | None:
        return self.store.run(run_id) if self.has_store() else None

    def runs(self) -> list[dict[str, Any]]:
        if not self.has_store():
            return []
        counts = self.store.run_counts()
        rows = []
        for run in self.store.runs():
            mine = counts.get(run.id, RunCounts({}, None))
            rows.append(
                {
                    "run": run.id,
                    "state": run.state.value,
                    "branch": run.branch,
                    "plan": run.plan_path,
                    "plan_name": Path(run.plan_path).name,
                    "created_at": run.created_at,
                    "finished_at": run.finished_at,
                    "duration_s": (run.finished_at or time.time()) - run.created_at,
                    "cost_usd": mine.cost_usd,
                    "tasks": sum(mine.tasks.values()),
                    "summary": dict(mine.tasks),
                }
            )
        return rows

    def run_doc(self, run: Run) -> dict[str, Any]:
        """A run's page (see :meth:`run_page`)."""
        return self._page(run).doc

    def run_page(self, run: Run) -> bytes:
        """A run's page as JSON, built again only when its run or its plan file changed since
        the last view, and then only the entries of the tasks written since (runpage.py): an
        unchanged run's page is one query, one stat and the bytes sent before."""
        return self._page(run).body

    def _page(self, run: Run) -> RunPage:
        plan = _plan_version(run.plan_path)
        old = self._docs.get(run.id)
        if old is not None and old.version == current(self.store, run.id, plan):
            return old
        page = build(self.store, run, plan, self._graph, old)
        with self._docs_lock:  # requests run in threads: evict and insert as one step
            if run.id not in self._docs and len(self._docs) >= RUN_DOCS_KEPT:
                self._docs.pop(next(iter(self._docs)))
            self._docs[run.id] = page
        return page

    def _graph(self, run: Run, task_ids: list[str]) -> dict[str, Any]:
        """Dependencies and the critical path, from the run's plan if it still loads; the plan
        is loaded and forecast once per run and version of the plan file (its mtime and size),
        not on every page view (two thirds of a 500-task run's page)."""
        version = _plan_version(run.plan_path)
        cached = self._graphs.get(run.id)
        if cached is None or cached[0] != version:
            cached = (version, _plan_graph(run.plan_path))
            self._graphs[run.id] = cached
        edges, critical = cached[1]
        if edges is None:
            return {"edges": [], "critical_path": [], "from_plan": False}
        known = set(task_ids)
        return {
            "edges": [list(e) for e in edges if e[1] in known],
            "critical_path": [t for t in critical if t in known],
            "from_plan": True,
        }

    def task_doc(self, run: Run, task_id: str) -> dict[str, Any] | None:
        """A task's page: its status entry with its attempts' logs, diffs and reviews (None
        when the run has no such task), reading only that task's rows."""
        found = self.store.task(run.id, task_id)
        if found is None:
            return None
        mine = sorted(self.store.attempts(run.id, task_id), key=lambda a: a.n)
        task = task_entry(found, mine, rate_limit_wait(self.store, found))
        records = {a.n: a for a in mine}
        for attempt in task["attempts"]:
            record = records[attempt["n"]]
            attempt["started_at"] = record.started_at
            attempt["ended_at"] = record.ended_at
            attempt["log_tail"] = _tail(attempt.pop("log", "") or "")
            attempt["diff"] = self._diff(record.base_commit, record.patch_commit)
            attempt.update(attempt_extras(record.log_path), finding=finding(record.detail))
        task["attempts"] = winner_first(task["attempts"])
        task["finding"] = finding(task["reason"])
        task["reviews"] = review_history(self.store, run.id, task_id)
        task["run"] = run.id
        task["run_state"] = run.state.value
        return task

    def _diff(self, base: str, patch: str | None) -> str | None:
        if not patch:
            return None
        try:
            text = self.repo.git("diff", "--stat", "--patch", base, patch)
        except OrchardistError as exc:
            return f"(diff not available: {exc})"
        if len(text) > DIFF_MAX_BYTES:
            return text[:DIFF_MAX_BYTES] + "\n(diff cut here)\n"
        return text


def _plan_version(plan_path: str) -> tuple[int, int] | None:
    """The plan file's modification time and size (None when it is gone)."""
    try:
        st = os.stat(plan_path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _plan_graph(
    plan_path: str,
) -> tuple[tuple[tuple[str, str], ...] | None, tuple[str, ...]]:
    """A plan's dependency edges and critical path; (None, ()) when it no longer loads."""
    from ..plan.forecast import forecast
    from ..plan.loading import load_plan

    try:
        plan = load_plan(plan_path)
    except (OrchardistError, OSError):
        return None, ()
    edges = tuple((dep, task.id) for task in plan.tasks for dep in task.depends_on)
    return edges, tuple(forecast(plan).critical_path)


def _tail(path: str) -> dict[str, Any]:
    """The end of a log file, decoded leniently, and whether it was cut."""
    if not path:
        return {"text": "", "cut": False, "size": 0}
    tail = read_tail(Path(path), 0, LOG_TAIL_BYTES, last=True)
    if not tail.found:
        return {"text": "(log not available)", "cut": False, "size": 0}
    return {"text": tail.text(), "cut": tail.start > 0, "size": tail.size}
