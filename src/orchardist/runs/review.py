"""Review gates, the front ends' side: what awaits review, its diff, and recording a decision.

The one home of the logic ``orchardist review`` and the dashboard share. A decision is
validated (the task awaits review; each line comment names a file of the pending patch and a
line it has), recorded in the store in one transaction with its ``decided`` event (who: the OS
user; when), and the live orchestrator, if any, is woken with :data:`REVIEW_SIGNAL` (as
``cancel`` does with SIGUSR1): its handler posts a message to the scheduler's queue, which reads
the store. With no orchestrator, ``orchardist resume RUN`` acts on it. The engine applies each
decision once (see :mod:`orchardist.engine.review`).
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine.review import quote_lines
from ..errors import ReviewError
from ..git.repo import Repo
from ..state.eventlog import Event
from ..state.events import Kind, ReviewEvent
from ..state.records import (
    UNFINISHED,
    AttemptRecord,
    AttemptState,
    LineComment,
    ReviewDecision,
    Run,
    StoredDecision,
    TaskState,
    Verdict,
)
from ..state.store import Store
from .control import REVIEW_SIGNAL, Orchestrator

DIFF_CHARS = 64000  # the pending diff kept with a change request (its prompt quotes less)


@dataclass(frozen=True)
class PendingReview:
    """One task's verified patch waiting for a person."""

    run_id: str
    task_id: str
    title: str
    agent: str
    attempt: int
    since: float  # when it started waiting (epoch seconds)
    diffstat: str  # git's --shortstat of the patch, e.g. "1 file changed, 2 insertions(+)"
    verify: str  # what verification found, e.g. "verified: pytest -q"
    cost_usd: float | None  # the task's attempts so far (None: no agent reported one)
    tokens: int | None  # their input and output tokens
    decided: str = ""  # a decision recorded and not acted on yet ("approve by ann"), else ""


def pending(store: Store, run_id: str | None = None) -> list[PendingReview]:
    """What awaits review, in one run or in every unfinished run, oldest first."""
    runs = [_run(store, run_id)] if run_id is not None else store.runs()
    found = []
    for run in runs:
        if run.state not in UNFINISHED:
            continue
        waiting = [t for t in store.tasks(run.id) if t.state is TaskState.AWAITING_REVIEW]
        if not waiting:
            continue
        requested = store.last_events(run.id, Kind.REVIEW, ReviewEvent.REQUESTED)
        asked = {e.task_id: e for e in requested}
        open_ = {(d.task_id, d.attempt): d for d in store.decisions(run.id) if d.applied_at is None}
        repo = reader(Path(run.repo))
        for task in waiting:
            attempts = store.attempts(run.id, task.task_id)
            reviewed = _reviewed(attempts)
            if reviewed is None:
                continue
            item = _pending(run, repo, attempts, reviewed, asked.get(task.task_id))
            if (decided := open_.get((task.task_id, reviewed.n))) is not None:
                verdict = decided.decision.verdict.value
                item = replace(item, decided=f"{verdict} by {decided.decision.who}")
            found.append(item)
    return sorted(found, key=lambda p: (p.since, p.run_id, p.task_id))


def reader(root: Path) -> Repo:
    """The repository as review reads it: diffs and files of commits, nothing committed and no
    untracked file listed, so neither the user's identity nor their excludes file is asked of
    git (three processes fewer per ``orchardist review`` command)."""
    return Repo(root, identity=False, untracked=False)


def pending_diff(store: Store, repo: Repo, run_id: str, task_id: str) -> str:
    """The diff of the patch that awaits review (``git diff`` of base and patch)."""
    run = _run(store, run_id)
    attempt = _awaiting(store, run, task_id)
    return _diff(repo, attempt)


def decide(
    store: Store,
    state_dir: Path,
    run_id: str,
    task_id: str,
    decision: ReviewDecision,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Validate and record ``decision`` on the task's pending patch, then wake the run's live
    orchestrator; True when one was woken (False: ``orchardist resume`` will act on it).
    A ReviewError (exit 2) says what is wrong."""
    run = _run(store, run_id)
    attempt = _awaiting(store, run, task_id)
    repo = reader(Path(run.repo))
    decision = _checked(repo, attempt, decision)
    diff = _diff(repo, attempt)[:DIFF_CHARS] if decision.verdict is Verdict.CHANGES else ""
    now = clock()
    stored = StoredDecision(run.id, task_id, attempt.n, decision, now, diff)
    with store.transaction() as tx:
        row = tx.execute(
            "select state from tasks where run_id = ? and task_id = ?", (run.id, task_id)
        ).fetchone()
        if row is None or row[0] != TaskState.AWAITING_REVIEW:  # moved since it was read
            raise ReviewError(f"run {run.id}: task {task_id!r} no longer awaits review")
        if not tx.add_decision(stored):
            raise ReviewError(_decided_already(store, run.id, task_id, attempt.n))
        said: dict[str, object] = {"state": ReviewEvent.DECIDED, "who": decision.who}
        said |= {"verdict": decision.verdict, "text": decision.text, "lines": len(decision.lines)}
        tx.emit(Event(run.id, Kind.REVIEW, now, task_id, attempt.n, said))
    return _wake(state_dir, run.id)


def _run(store: Store, run_id: str) -> Run:
    """A run by id or unique prefix; a ReviewError otherwise."""
    runs = store.runs()
    matches = [r for r in runs if r.id == run_id] or [r for r in runs if r.id.startswith(run_id)]
    if len(matches) != 1:
        what = "no run" if not matches else "more than one run"
        known = ", ".join(r.id for r in runs[:5]) or "none"
        raise ReviewError(f"{what} matches {run_id!r} (recent runs: {known})")
    return matches[0]


def _awaiting(store: Store, run: Run, task_id: str) -> AttemptRecord:
    """The attempt whose patch awaits review in the task; a ReviewError when none does."""
    tasks = {t.task_id: t for t in store.tasks(run.id)}
    if task_id not in tasks:
        known = ", ".join(sorted(tasks)[:10])
        raise ReviewError(f"run {run.id} has no task {task_id!r} (tasks: {known})")
    state = tasks[task_id].state
    reviewed = _reviewed(store.attempts(run.id, task_id))
    if state is not TaskState.AWAITING_REVIEW or reviewed is None:
        waiting = [t for t, r in tasks.items() if r.state is TaskState.AWAITING_REVIEW]
        awaiting = f"; awaiting review: {', '.join(waiting)}" if waiting else ""
        raise ReviewError(
            f"run {run.id}: task {task_id!r} is {state.value}, not awaiting review{awaiting}"
        )
    return reviewed


def _reviewed(attempts: list[AttemptRecord]) -> AttemptRecord | None:
    """The task's winner not merged yet: the patch under review."""
    won = [a for a in attempts if a.state is AttemptState.PASSED and a.won and a.patch_commit]
    return won[-1] if won else None


def _checked(repo: Repo, attempt: AttemptRecord, decision: ReviewDecision) -> ReviewDecision:
    """The decision with its who filled and each line comment's quote; a ReviewError naming
    what does not fit."""
    if decision.lines and decision.verdict is not Verdict.CHANGES:
        raise ReviewError("line comments go with a change request (--changes)")
    if decision.verdict is Verdict.CHANGES and not (decision.text.strip() or decision.lines):
        raise ReviewError("a change request needs a text saying what to change")
    files = set(repo.git("diff", "--name-only", attempt.base_commit, _patch(attempt)).split())
    lines = tuple(_quoted(repo, attempt, files, c) for c in decision.lines)
    return replace(decision, who=decision.who or getpass.getuser(), lines=lines)


def _quoted(repo: Repo, attempt: AttemptRecord, files: set[str], c: LineComment) -> LineComment:
    if c.path not in files:
        listed = ", ".join(sorted(files)[:10]) or "none"
        raise ReviewError(f"{c.path}:{c.line}: the patch changes no file {c.path!r} ({listed})")
    found = repo.run_git("show", f"{_patch(attempt)}:{c.path}")
    if found.returncode != 0:
        raise ReviewError(f"{c.path}:{c.line}: the patch deletes {c.path!r}")
    count = len(found.stdout.splitlines())
    if not 1 <= c.line <= count:
        raise ReviewError(f"{c.path}:{c.line}: line out of range ({c.path} has {count} lines)")
    return replace(c, quote=quote_lines(found.stdout, c.line))


def _decided_already(store: Store, run_id: str, task_id: str, n: int) -> str:
    (old,) = [d for d in store.decisions(run_id, task_id) if d.attempt == n]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(old.decided_at))
    return (
        f"run {run_id}: task {task_id!r} was decided already ({old.decision.verdict.value} by "
        f"{old.decision.who} at {when}); it is acted on when the run goes on"
    )


def _wake(state_dir: Path, run_id: str) -> bool:
    orchestrator = Orchestrator.find(state_dir, run_id)
    if orchestrator is None:
        return False
    with orchestrator:
        return orchestrator.signal(REVIEW_SIGNAL)


def _pending(
    run: Run,
    repo: Repo,
    attempts: list[AttemptRecord],
    reviewed: AttemptRecord,
    asked: Event | None,
) -> PendingReview:
    data = asked.data if asked is not None and asked.attempt == reviewed.n else {}
    costs = [a.usage.cost_usd for a in attempts if a.usage.cost_usd is not None]
    tokens = [
        (a.usage.input_tokens or 0) + (a.usage.output_tokens or 0)
        for a in attempts
        if a.usage.input_tokens is not None or a.usage.output_tokens is not None
    ]
    commands = data.get("commands") or []
    verify = f"{reviewed.verdict or 'passed'}: " + ("; ".join(commands) or "no verify commands")
    return PendingReview(
        run_id=run.id,
        task_id=reviewed.task_id,
        title=str(data.get("title", reviewed.task_id)),
        agent=reviewed.agent,
        attempt=reviewed.n,
        since=asked.ts if asked is not None else reviewed.ended_at or reviewed.started_at,
        diffstat=repo.git("diff", "--shortstat", reviewed.base_commit, _patch(reviewed)).strip(),
        verify=verify,
        cost_usd=round(sum(costs), 6) if costs else None,
        tokens=sum(tokens) if tokens else None,
    )


def _diff(repo: Repo, attempt: AttemptRecord) -> str:
    return repo.git("diff", attempt.base_commit, _patch(attempt))


def _patch(attempt: AttemptRecord) -> str:
    assert attempt.patch_commit is not None  # (an attempt under review has its patch)
    return attempt.patch_commit
