"""Records and states: frozen dataclasses the store persists and nobody mutates in place."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from ..errors import TransitionError
from .agentrecords import Failure
from .usage import Usage


class RunState(enum.StrEnum):
    RUNNING = "running"  # an orchestrator is (or was, until it died) driving it
    DONE = "done"  # every task done
    FAILED = "failed"  # ended with some task failed or blocked
    INTERRUPTED = "interrupted"  # stopped by a signal; resumable
    STOPPED = "stopped"  # stopped by a budget or deadline; resumable
    CANCELLED = "cancelled"  # ended by ``orchardist cancel``; its failed tasks may be retried
    AWAITING_REVIEW = "awaiting_review"  # only reviews were left; resumed to act on decisions


# may be resumed
UNFINISHED = (RunState.RUNNING, RunState.INTERRUPTED, RunState.STOPPED, RunState.AWAITING_REVIEW)

RUN_START = RunState.RUNNING  # a run is created running
RUN_MOVES: Mapping[RunState, frozenset[RunState]] = {
    # the loop ends it one of six ways
    RunState.RUNNING: frozenset(
        {
            RunState.DONE,
            RunState.FAILED,
            RunState.INTERRUPTED,
            RunState.STOPPED,
            RunState.CANCELLED,
            RunState.AWAITING_REVIEW,
        }
    ),
    RunState.DONE: frozenset(),
    RunState.FAILED: frozenset({RunState.RUNNING}),  # retried
    RunState.INTERRUPTED: frozenset({RunState.RUNNING, RunState.CANCELLED}),  # resumed, cancelled
    RunState.STOPPED: frozenset({RunState.RUNNING, RunState.CANCELLED}),  # resumed, cancelled
    RunState.CANCELLED: frozenset({RunState.RUNNING}),  # retried
    # resumed (to act on the decisions), cancelled
    RunState.AWAITING_REVIEW: frozenset({RunState.RUNNING, RunState.CANCELLED}),
}


class TaskState(enum.StrEnum):
    PENDING = "pending"  # waiting for dependencies
    READY = "ready"  # dependencies done; waiting for a slot
    RUNNING = "running"  # an agent is working on it
    VERIFYING = "verifying"  # its verify commands are running
    AWAITING_REVIEW = "awaiting_review"  # verified; waits for a person's decision to merge
    MERGING = "merging"  # verified; being put onto the run branch
    DONE = "done"  # committed on the run branch
    FAILED = "failed"  # out of attempts
    BLOCKED = "blocked"  # a dependency failed
    CANCELLED = "cancelled"  # the run was cancelled or failed fast before it could finish
    SKIPPED = "skipped"  # left out by --skip/--only, or depends on a task left out

    @property
    def terminal(self) -> bool:
        """Whether the task will not change any more in this run."""
        return self in _TERMINAL_TASK


_TERMINAL_TASK = {
    TaskState.DONE,
    TaskState.FAILED,
    TaskState.BLOCKED,
    TaskState.CANCELLED,
    TaskState.SKIPPED,
}

TASK_START = TaskState.PENDING  # every task of a new run
_T = TaskState
# Any task may become done: a resume trusts the run branch over the store (runs.reconcile),
# and a fix pipeline's owner is done when its shot lands.
_SETTLE = frozenset({_T.BLOCKED, _T.CANCELLED, _T.SKIPPED, _T.DONE})  # what an open task may end as
# A fix pipeline's escalated shot, retried by name, lands: its debug stages are skipped, whatever
# they had reached (pipeline.Pipelines.landed).
_SHOT_LANDED = frozenset({_T.SKIPPED})
TASK_MOVES: Mapping[TaskState, frozenset[TaskState]] = {
    _T.PENDING: _SETTLE | {_T.READY, _T.MERGING},  # released (a parked patch merges at once)
    # the round's attempts start; a rewind makes it wait again; a hold or decision ends a round
    _T.READY: _SETTLE | {_T.PENDING, _T.RUNNING, _T.MERGING, _T.AWAITING_REVIEW, _T.FAILED},
    _T.RUNNING: _SETTLE
    | {_T.PENDING, _T.READY, _T.VERIFYING, _T.MERGING, _T.AWAITING_REVIEW, _T.FAILED},
    _T.VERIFYING: _SETTLE
    | {_T.PENDING, _T.READY, _T.RUNNING, _T.MERGING, _T.AWAITING_REVIEW, _T.FAILED},
    # a person's decision: approved (merged), changes asked for (a new round), rejected
    _T.AWAITING_REVIEW: _SETTLE | {_T.PENDING, _T.READY, _T.MERGING, _T.FAILED},
    # landed; re-run (conflict, moved branch, merged tree failed) or failed for good
    _T.MERGING: _SETTLE | {_T.PENDING, _T.READY, _T.FAILED},
    # a regression rewind takes it off the branch: re-run (or failed), waits, or merges again;
    # a resume that does not find its commit on the branch runs it again
    _T.DONE: _SHOT_LANDED | {_T.PENDING, _T.READY, _T.MERGING, _T.FAILED},
    _T.FAILED: _SHOT_LANDED | {_T.PENDING, _T.DONE},  # retried
    _T.BLOCKED: _SHOT_LANDED | {_T.PENDING, _T.DONE},  # retried
    _T.CANCELLED: _SHOT_LANDED | {_T.PENDING, _T.READY, _T.MERGING, _T.DONE},  # retried, restored
    _T.SKIPPED: frozenset({_T.PENDING, _T.DONE}),  # retried by name
}


class AttemptState(enum.StrEnum):
    RUNNING = "running"  # agent or verify in progress
    PASSED = "passed"  # agent exited 0 and every verify command passed
    FAILED = "failed"  # see the attempt's failure class
    CANCELLED = "cancelled"  # stopped because it was no longer needed
    INTERRUPTED = "interrupted"  # the orchestrator died or was stopped while it ran
    MERGED = "merged"  # its patch is the task's commit


ATTEMPT_START = AttemptState.RUNNING  # an attempt is recorded as it starts
_A = AttemptState
ATTEMPT_MOVES: Mapping[AttemptState, frozenset[AttemptState]] = {
    _A.RUNNING: frozenset({_A.PASSED, _A.FAILED, _A.CANCELLED, _A.INTERRUPTED}),
    _A.PASSED: frozenset({_A.MERGED, _A.FAILED}),  # landed, or conflicted on the way
    # taken off the branch by a rewind, as the culprit or replayed into a conflict
    _A.MERGED: frozenset({_A.FAILED}),
    _A.FAILED: frozenset({_A.MERGED}),  # a resume found its commit still on the branch
    _A.CANCELLED: frozenset(),
    _A.INTERRUPTED: frozenset(),
}

State = TypeVar("State", bound=enum.StrEnum)
_MOVES: Mapping[type[enum.StrEnum], Mapping[Any, frozenset[Any]]] = {
    RunState: RUN_MOVES,
    TaskState: TASK_MOVES,
    AttemptState: ATTEMPT_MOVES,
}


def moved(old: State, new: State, what: str) -> State:
    """``new`` if its table lets ``old`` become it (staying is no move); every stored change of
    a run's, task's or attempt's state passes here, so an illegal move is a bug that raises
    :class:`TransitionError` naming ``what`` moved, and the transaction rolls back."""
    if old is not new and new not in _MOVES[type(old)][old]:
        name = type(old).__name__
        raise TransitionError(f"{what}: {name} {old.value} -> {new.value} is not allowed")
    return new


@dataclass(frozen=True)
class Run:
    id: str
    plan_path: str
    plan_digest: str
    repo: str
    base_commit: str
    branch: str
    state: RunState
    created_at: float
    finished_at: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class TaskRecord:
    run_id: str
    task_id: str
    state: TaskState
    index: int
    commit: str | None = None
    reason: str = ""
    failures: int = 0  # failed attempts that count against ``retries``
    reruns: int = 0  # re-runs not counted as failures: conflicts, merge re-verify, regressions
    stage: str = ""  # a pipeline's stage (shot, reproduce, audit, localize, fix); "" otherwise
    pipeline_task: str = ""  # the pipeline task a stage belongs to; "" otherwise


@dataclass(frozen=True)
class AttemptRecord:
    run_id: str
    task_id: str
    n: int  # 1-based, per task
    candidate: int
    agent: str
    state: AttemptState
    base_commit: str
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    detail: str = ""
    patch_commit: str | None = None
    changed_lines: int | None = None
    log_path: str = ""
    marker: str = ""
    usage: Usage = field(default_factory=Usage)
    verdict: str = ""  # verified | unverified | failed
    selection: str = ""  # why this candidate won or lost, in words (for people)
    handoff: str = ""  # a pipeline stage's handoff, as JSON text ("" when none)
    won: bool = False  # its round's rule picked it (the fact resume and pipelines read)

    @property
    def duration_s(self) -> float | None:
        """Wall time, once ended."""
        return None if self.ended_at is None else self.ended_at - self.started_at


class Verdict(enum.StrEnum):
    """What a person decided about a patch that awaits review (docs/review.md)."""

    APPROVE = "approve"  # merge it through the merge train
    CHANGES = "changes"  # a new attempt of the same agent, told what to change
    REJECT = "reject"  # the task fails


@dataclass(frozen=True)
class LineComment:
    """A reviewer's comment on one line of a file of the pending patch; ``quote`` holds the
    lines around it as the patch has them (filled when the decision is recorded)."""

    path: str
    line: int  # 1-based, in the file as the patch leaves it
    text: str
    quote: str = ""


@dataclass(frozen=True)
class ReviewDecision:
    """A person's decision on a task's pending patch; ``who`` is filled from the OS user when
    empty."""

    verdict: Verdict
    text: str = ""  # the change request, the approval's note or the rejection's reason
    lines: tuple[LineComment, ...] = ()  # line comments (change requests)
    who: str = ""


@dataclass(frozen=True)
class StoredDecision:
    """A decision as the store keeps it: on which attempt, when, and whether it was acted on
    (``applied_at``: set in the transaction of the move it caused, so it is acted on once)."""

    run_id: str
    task_id: str
    attempt: int  # the attempt whose patch was reviewed
    decision: ReviewDecision
    decided_at: float
    diff: str = ""  # the pending diff as it was reviewed (a change request quotes it)
    applied_at: float | None = None


# The columns a store write may change, by record, with their types: mypy checks every caller of
# Transaction.set_run, set_task and set_attempt against them (``**changes`` of these types).
class RunChanges(TypedDict, total=False):
    state: RunState
    finished_at: float | None
    reason: str


class TaskChanges(TypedDict, total=False):
    state: TaskState
    commit: str | None  # stored in the ``commit_sha`` column
    reason: str
    failures: int
    reruns: int
    stage: str
    pipeline_task: str


class AttemptChanges(TypedDict, total=False):
    state: AttemptState
    ended_at: float | None
    exit_code: int | None
    failure: Failure | None
    detail: str
    patch_commit: str | None
    changed_lines: int | None
    log_path: str
    usage: Usage  # spread over its columns
    verdict: str
    selection: str
    handoff: str
    won: bool
