"""Starting a run: the repository's workspace, the run branch, and the run's first records."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PlanError, Problem, RunLockedError, UsageError
from ..git.where import locate
from ..state.eventlog import Event
from ..state.events import Kind, RunEvent
from ..state.records import (
    RUN_START,
    TASK_START,
    UNFINISHED,
    AttemptState,
    Run,
    RunState,
    TaskRecord,
    TaskState,
)
from ..state.store import Store, Transaction
from .control import lock_path

if TYPE_CHECKING:  # the loop's parts load when a run is driven, not for commands that read
    from ..engine.hooks import Hooks
    from ..engine.scheduler import Scheduler
    from ..executors import Executor
    from ..git.repo import Repo
    from ..plan.graph import Graph
    from ..specs import Plan


@dataclass(frozen=True)
class Workspace:
    """A repository with orchardist's state directory under its git common directory."""

    root: Path
    store: Store
    state_dir: Path

    @functools.cached_property
    def repo(self) -> Repo:
        """The repository's git, set up on first use (or by ``run``'s checks): commands that
        only read the store (status, runs) never start the git processes of its set-up."""
        from ..git.repo import Repo

        return Repo(self.root)

    @classmethod
    def open(cls, path: Path, create: bool = True) -> Workspace:
        """The workspace of the repository containing ``path``. With ``create=False`` (commands
        that only read) nothing is written: a repository without a store (no runs yet) is a
        UsageError."""
        found = cls._located(path, create)
        if found is None:
            raise UsageError("no runs yet in this repository")
        return found

    @classmethod
    def existing(cls, path: Path) -> Workspace | None:
        """The workspace of the repository containing ``path`` if it has a store, else None
        (for ``runs``, no runs yet is an answer): nothing is written, and git is asked once."""
        return cls._located(path, create=False)

    @classmethod
    def _located(cls, path: Path, create: bool) -> Workspace | None:
        found = cls.locate(path)
        if not create and not cls.stored(found):
            return None
        return cls.in_repo(found)

    @staticmethod
    def locate(path: Path) -> tuple[Path, Path]:
        """``(root, common_dir)`` of the repository containing ``path``, asked of git once."""
        found = locate(Path(path))
        if found is None:
            raise UsageError(f"{path} is not inside a git repository")
        return found

    @staticmethod
    def stored(found: tuple[Path, Path]) -> bool:
        """Whether the repository :meth:`locate` found has a store (runs were made there)."""
        return (found[1] / "orchardist" / "state.db").exists()

    @classmethod
    def in_repo(cls, found: tuple[Path, Path], repo: Repo | None = None) -> Workspace:
        """The workspace of the repository :meth:`locate` found; its store made if need be;
        its git, :attr:`repo`, is ``repo`` where one is set up already (by ``run``'s checks)."""
        ws = cls(found[0], Store.for_repo(found[1]), found[1] / "orchardist")
        if repo is not None:
            vars(ws)["repo"] = repo  # where the cached property keeps what it makes
        return ws

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


@contextlib.contextmanager
def run_lock(ws: Workspace, run_id: str) -> Iterator[None]:
    """Hold the run's lock: one orchestrator per run. The kernel drops it when we die."""
    path = lock_path(ws.state_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunLockedError(
                f"run {run_id} is being driven by another orchardist process (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def unfinished_runs(ws: Workspace, plan: Plan) -> list[Run]:
    """Runs of this plan file that did not finish, newest first."""
    return [r for r in ws.store.runs() if r.plan_path == str(plan.path) and r.state in UNFINISHED]


def _trusted_tip(ws: Workspace, run: Run, ref: str, tip: str) -> str:
    """The run branch's newest commit that orchardist put there; commits anyone else put on
    top (forged trailers included) are taken off the branch."""
    recorded = set(ws.store.branch_commits(run.id))
    recorded |= {t.commit for t in ws.store.tasks(run.id) if t.commit}
    for commit in [tip, *reversed(ws.repo.first_parents(run.base_commit, tip))]:
        if commit in recorded or commit == run.base_commit:
            if commit != tip:
                ws.repo.update_ref(ref, commit, tip)
            return commit
    ws.repo.update_ref(ref, run.base_commit, tip)
    return run.base_commit


def _last_merge(ws: Workspace, run: Run) -> str:
    """Where a deleted run branch is made again: the newest merge of a done task whose line
    down to the base (first parents) holds merges of done tasks only, else the base."""
    merges = {t.commit for t in ws.store.tasks(run.id) if t.state is TaskState.DONE and t.commit}
    best, depth = run.base_commit, 0
    for commit in sorted(merges):
        if ws.repo.try_rev_parse(commit) is None:
            continue
        if not ws.repo.is_ancestor(run.base_commit, commit):
            continue
        line = ws.repo.first_parents(run.base_commit, commit)
        if len(line) > depth and set(line) <= merges:
            best, depth = commit, len(line)
    return best


def reconcile(ws: Workspace, run: Run, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Make a run's state match the world after a crash; call with the run's lock held.

    Kills processes left by a dead orchestrator, removes its worktrees, marks attempts that
    were running as interrupted, and trusts the run branch over the store for what is merged:
    a task whose commit is on the branch is done (never merged twice); a task the store calls
    done whose commit is not on the branch is run again.
    """
    from ..confine.procs import kill_by_env  # the sandbox's parts: not for commands that read

    killed = kill_by_env("ORCHARDIST_RUN", run.id, grace_s=1.0)
    removed = _remove_worktrees(ws, run.id)
    merged = _merged_on_branch(ws, run)
    now = clock()
    fixed: list[str] = []
    with ws.store.transaction() as tx:
        for attempt in ws.store.attempts(run.id):
            if attempt.state is AttemptState.RUNNING:
                tx.set_attempt(
                    run.id,
                    attempt.task_id,
                    attempt.n,
                    state=AttemptState.INTERRUPTED,
                    ended_at=now,
                    detail="the orchestrator stopped while it ran",
                )
        for task in ws.store.tasks(run.id):
            fixed += _reconcile_task(tx, run.id, task, merged.get(task.task_id))
        summary = {"killed": killed, "worktrees_removed": removed, "fixed": fixed}
        tx.emit(Event(run.id, Kind.RUN, now, data={"state": RunEvent.RESUMED, **summary}))
    return summary


def _merged_on_branch(ws: Workspace, run: Run) -> dict[str, tuple[str, int]]:
    """The tasks whose commits are on the run branch, as far as orchardist wrote them there:
    task id -> (commit, attempt number or 0). A branch deleted meanwhile is made again (see
    _last_merge)."""
    ref = f"refs/heads/{run.branch}"
    (ws.repo.common_dir / f"{ref}.lock").unlink(missing_ok=True)
    tip = ws.repo.try_rev_parse(ref)
    if tip is None:  # deleted while no orchestrator ran
        tip = _last_merge(ws, run)
        ws.repo.update_ref(ref, tip, None)
    tip = _trusted_tip(ws, run, ref, tip)
    recorded = ws.store.branch_commits(run.id)
    recorded.update({t.commit: (t.task_id, 0) for t in ws.store.tasks(run.id) if t.commit})
    return {
        recorded[commit][0]: (commit, recorded[commit][1])
        for commit in ws.repo.first_parents(run.base_commit, tip)
        if commit in recorded
    }


def _reconcile_task(
    tx: Transaction, run_id: str, task: TaskRecord, on_branch: tuple[str, int] | None
) -> list[str]:
    """Make one task's state match the branch: what was fixed, said for the user."""
    if on_branch is not None and (task.state is not TaskState.DONE or task.commit != on_branch[0]):
        tx.set_task(run_id, task.task_id, state=TaskState.DONE, commit=on_branch[0], reason="")
        if on_branch[1]:
            with contextlib.suppress(Exception):
                tx.set_attempt(run_id, task.task_id, on_branch[1], state=AttemptState.MERGED)
        return [f"{task.task_id}: done (commit found on the run branch)"]
    elif on_branch is None and task.state is TaskState.DONE and task.commit:
        tx.set_task(
            run_id,
            task.task_id,
            state=TaskState.READY,
            commit=None,
            reason="its commit is not on the run branch",
        )
        return [f"{task.task_id}: re-run (commit not on the run branch)"]
    elif task.state in (TaskState.RUNNING, TaskState.VERIFYING):
        tx.set_task(run_id, task.task_id, state=TaskState.READY, reason="interrupted")
    return []


def _remove_worktrees(ws: Workspace, run_id: str) -> int:
    from .folders import remove_run_folder

    removed = remove_run_folder(ws.state_dir, run_id)
    # Runs begun by an orchardist that kept its worktrees under the git directory.
    root = ws.state_dir / "worktrees" / run_id
    for path in ws.repo.worktrees():
        if path.resolve().is_relative_to(root.resolve()):
            ws.repo.remove_worktree(path)
            removed += 1
    if root.exists():
        import shutil  # (not for the commands that only read: see git.which)

        removed += sum(1 for _ in root.iterdir())
        shutil.rmtree(root, ignore_errors=True)
    ws.repo.prune_worktrees()
    return removed


def new_run_id(clock: Callable[[], float] = time.time) -> str:
    """A sortable, unique-enough id such as ``20261129-193012-4f2a``."""
    import secrets  # (and hashlib, random): not for the commands that only read

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock()))
    return f"{stamp}-{secrets.token_hex(2)}"


def create_run(
    ws: Workspace, plan: Plan, clock: Callable[[], float] = time.time, run_id: str | None = None
) -> Run:
    """Resolve the base, create the run branch, and record the run with its tasks pending."""
    run_id = run_id or new_run_id(clock)
    shown = str(plan.path)
    base = ws.repo.commit_of(plan.run.base)
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
        state=RUN_START,
        created_at=clock(),
    )
    with ws.store.transaction() as tx:
        tx.add_run(run)
        for task in plan.tasks:
            tx.add_task(
                TaskRecord(
                    run_id,
                    task.id,
                    TASK_START,
                    task.index,
                    stage=task.stage,
                    pipeline_task=task.pipeline_task,
                )
            )
        tx.emit(
            Event(
                run_id,
                Kind.RUN,
                clock(),
                data={
                    "state": RunEvent.CREATED,
                    "branch": branch,
                    "base": base,
                    "tasks": len(plan.tasks),
                },
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
    monotonic: Callable[[], float] = time.monotonic,
    fail_fast: bool = False,
) -> RunState:
    """Drive ``run`` to its end with the plan's executor (``[run] executor``, by default the
    local one) unless another is given."""
    from ..engine.integrators import GitIntegrator
    from ..engine.scheduler import Scheduler
    from ..executors import executor_class

    own_executor = executor is None
    if executor is None:
        factory = executor_class(plan.run.executor)
        executor = factory.for_run(ws.repo, ws.state_dir, ws.store, plan.run, clock)
    scheduler = Scheduler(
        plan,
        run,
        ws.store,
        executor,
        GitIntegrator(ws.repo, run.branch),
        hooks,
        clock,
        max_parallel,
        monotonic=monotonic,
        fail_fast=fail_fast,
        # Everything the attempts left on disk is gone before the run is recorded as ended:
        # an orchestrator killed in between resumes a run that is still running, and tidies.
        before_finish=executor.close if own_executor else None,
    )
    if on_scheduler is not None:
        on_scheduler(scheduler)
    try:
        return scheduler.run()
    except BaseException:
        scheduler.abandon()
        raise
    finally:
        if own_executor:
            executor.close()


def select_tasks(
    ws: Workspace,
    plan: Plan,
    run: Run,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    clock: Callable[[], float] = time.time,
) -> list[Event]:
    """Mark ``skipped`` the unfinished tasks outside ``only`` (with its dependencies) and the
    tasks in ``skip`` (with their dependents); return the committed events, for hooks.

    Done tasks stay done: a task that merged is reused, never skipped after the fact.
    """
    check_known(plan, [*only, *skip])
    why = _graph_of(plan).left_out(only, skip)
    now = clock()
    with ws.store.transaction() as tx:
        for record in ws.store.tasks(run.id):
            reason = why.get(record.task_id)
            if reason is None or record.state.terminal:
                continue
            tx.set_task(run.id, record.task_id, state=TaskState.SKIPPED, reason=reason)
            tx.emit(
                Event(
                    run.id,
                    Kind.TASK,
                    now,
                    record.task_id,
                    data={"state": TaskState.SKIPPED, "reason": reason},
                )
            )
    return tx.events


RETRYABLE = (TaskState.FAILED, TaskState.BLOCKED, TaskState.CANCELLED)


def prepare_retry(
    ws: Workspace,
    plan: Plan,
    run: Run,
    tasks: Sequence[str] = (),
    clock: Callable[[], float] = time.time,
) -> list[Event]:
    """Make the failed, blocked and cancelled tasks of an ended run pending again, with their
    failure counts reset; with ``tasks``, only those and their unfinished dependencies.

    Call with the run's lock held, after :func:`reconcile`. Merged work stays on the branch.
    """
    graph = _graph_of(plan)
    check_known(plan, tasks)
    records = {r.task_id: r for r in ws.store.tasks(run.id)}
    if tasks:
        wanted = set(tasks)
        for task in tasks:
            wanted.update(graph.ancestors(task))
        chosen = [t for t in graph.ids if t in wanted and records[t].state is not TaskState.DONE]
        settled = [t for t in tasks if records[t].state is TaskState.DONE]
        if settled:
            raise UsageError(f"already done in run {run.id}: {', '.join(settled)}")
    else:
        chosen = [t for t in graph.ids if records[t].state in RETRYABLE]
    if not chosen:
        raise UsageError(f"run {run.id} has no failed, blocked or cancelled task to retry")
    now = clock()
    with ws.store.transaction() as tx:
        for task in chosen:
            tx.set_task(run.id, task, state=TaskState.PENDING, reason="retry", failures=0, reruns=0)
            tx.emit(
                Event(
                    run.id,
                    Kind.TASK,
                    now,
                    task,
                    data={"state": TaskState.PENDING, "reason": "retry"},
                )
            )
        tx.emit(Event(run.id, Kind.RUN, now, data={"state": RunEvent.RETRY, "tasks": chosen}))
    return tx.events


def cancel_abandoned(ws: Workspace, run: Run, clock: Callable[[], float] = time.time) -> None:
    """Cancel a run no orchestrator drives (it died): clean up as a resume would, then end it.

    Call with the run's lock held.
    """
    reconcile(ws, run, clock)
    reason = "cancelled by orchardist cancel"
    now = clock()
    with ws.store.transaction() as tx:
        for record in ws.store.tasks(run.id):
            if not record.state.terminal:
                tx.set_task(run.id, record.task_id, state=TaskState.CANCELLED, reason=reason)
                tx.emit(
                    Event(
                        run.id, Kind.TASK, now, record.task_id, data={"state": TaskState.CANCELLED}
                    )
                )
        tx.set_run(run.id, state=RunState.CANCELLED, finished_at=now, reason=reason)
        tx.emit(Event(run.id, Kind.RUN, now, data={"state": RunState.CANCELLED, "reason": reason}))


def _graph_of(plan: Plan) -> Graph:
    from ..plan.graph import Graph

    return Graph([t.id for t in plan.tasks], {t.id: t.depends_on for t in plan.tasks})


def check_known(plan: Plan, tasks: Sequence[str]) -> None:
    """A usage error naming the ids in ``tasks`` that the plan does not have."""
    known = {t.id for t in plan.tasks}
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UsageError(
            f"no task {', '.join(map(repr, unknown))} in {plan.path} "
            f"(tasks: {', '.join(sorted(known)[:10])})"
        )
