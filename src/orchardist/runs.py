"""Starting a run: the repository's workspace, the run branch, and the run's first records."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import PlanError, Problem, UsageError
from .executors import Executor
from .executors.local import LocalExecutor
from .gitrepo import Repo, find_toplevel
from .hooks import Hooks
from .merge import Integrator
from .plan import Plan
from .records import Event, Run, RunState, TaskRecord, TaskState
from .scheduler import Scheduler
from .store import Store


@dataclass(frozen=True)
class Workspace:
    """A repository with orchardist's state directory under its git common directory."""

    repo: Repo
    store: Store
    state_dir: Path

    @classmethod
    def open(cls, path: Path) -> Workspace:
        """The workspace of the repository containing ``path``."""
        root = find_toplevel(Path(path))
        if root is None:
            raise UsageError(f"{path} is not inside a git repository")
        repo = Repo(root)
        state_dir = repo.common_dir / "orchardist"
        return cls(repo, Store(state_dir / "state.db"), state_dir)

    def resolve_run(self, run_id: str | None) -> Run:
        """A run by id (or unique prefix), or the newest run when None."""
        runs = self.store.runs()
        if not runs:
            raise UsageError("no runs yet in this repository")
        if run_id is None:
            return runs[0]
        matches = [r for r in runs if r.id == run_id] or [
            r for r in runs if r.id.startswith(run_id)
        ]
        if len(matches) != 1:
            known = ", ".join(r.id for r in runs[:5])
            what = "no run" if not matches else "more than one run"
            raise UsageError(f"{what} matches {run_id!r} (recent runs: {known})")
        return matches[0]


def new_run_id(clock: Callable[[], float] = time.time) -> str:
    """A sortable, unique-enough id such as ``20261129-193012-4f2a``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock()))
    return f"{stamp}-{secrets.token_hex(2)}"


def create_run(
    ws: Workspace, plan: Plan, clock: Callable[[], float] = time.time, run_id: str | None = None
) -> Run:
    """Resolve the base, create the run branch, and record the run with its tasks pending."""
    run_id = run_id or new_run_id(clock)
    shown = str(plan.path)
    base = ws.repo.try_rev_parse(plan.run.base)
    if base is None:
        problem = f"{plan.run.base!r} does not name a commit in {ws.repo.root}"
        raise PlanError([Problem(shown, problem, field="run.base")])
    branch = plan.run.branch.replace("{run}", run_id)
    if ws.repo.run_git("check-ref-format", "--branch", branch).returncode != 0:
        raise PlanError(
            [Problem(shown, f"{branch!r} is not a valid branch name", field="run.branch")]
        )
    if not ws.repo.update_ref(f"refs/heads/{branch}", base, None):
        raise PlanError([Problem(shown, f"branch {branch!r} already exists", field="run.branch")])
    run = Run(
        id=run_id,
        plan_path=str(plan.path),
        plan_digest=plan.digest,
        repo=str(ws.repo.root),
        base_commit=base,
        branch=branch,
        state=RunState.RUNNING,
        created_at=clock(),
    )
    with ws.store.transaction() as tx:
        tx.add_run(run)
        for task in plan.tasks:
            tx.add_task(TaskRecord(run_id, task.id, TaskState.PENDING, task.index))
        tx.emit(
            Event(
                run_id,
                "run",
                clock(),
                data={"state": "created", "branch": branch, "base": base, "tasks": len(plan.tasks)},
            )
        )
    return run


def execute(
    ws: Workspace,
    plan: Plan,
    run: Run,
    hooks: Hooks | None = None,
    executor: Executor | None = None,
    max_parallel: int | None = None,
    clock: Callable[[], float] = time.time,
    on_scheduler: Callable[[Scheduler], None] | None = None,
) -> RunState:
    """Drive ``run`` to its end with the local executor (unless another is given)."""
    own_executor = executor is None
    executor = executor or LocalExecutor(ws.repo, ws.state_dir, clock=clock)
    scheduler = Scheduler(
        plan, run, ws.store, executor, Integrator(ws.repo, run.branch), hooks, clock, max_parallel
    )
    if on_scheduler is not None:
        on_scheduler(scheduler)
    try:
        return scheduler.run()
    finally:
        if own_executor:
            executor.close()
