"""The event log's vocabulary: every kind of event, and the states each kind reports.

An event is one row of the store's append-only log (:class:`~orchardist.state.eventlog.Event`): a
``kind``, an optional task and attempt, and ``data`` whose ``state`` says what happened. The
names live here, once, as string enums, so they compare equal to what the store holds and to
what older runs wrote; the writers (the scheduler, ``runs``), the readers (the progress
display, ``report``, ``stats``, the dashboard) and the event table of docs/state.md all use these,
and ``tests/state/test_events.py`` checks that each one does.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .records import AttemptState, RunState, TaskState


class Kind(enum.StrEnum):
    """What an event is about."""

    RUN = "run"  # the run as a whole
    TASK = "task"  # a task changed state
    ATTEMPT = "attempt"  # an attempt started, verified, ended or was requeued
    ROUND = "round"  # a round of candidates picked its winner
    MERGE = "merge"  # a verified patch on its way onto the run branch
    BREAKER = "breaker"  # an agent profile's circuit breaker opened
    REGRESSION = "regression"  # the run branch's regression check, bisect and rewind
    ESCALATION = "escalation"  # a fix pipeline's shot handed the bug to the debug stages
    USAGE_IGNORED = "usage_ignored"  # an agent reported usage figures that make no sense
    NOTIFY = "notify"  # ``[run] notify`` was told that the run ended or needs review
    REVIEW = "review"  # a patch awaits a person's review; their decision, and its effect


class RunEvent(enum.StrEnum):
    """``run`` states besides the run's final :class:`RunState`."""

    CREATED = "created"  # branch, base, tasks
    RESUMED = "resumed"  # killed, worktrees_removed, fixed
    RETRY = "retry"  # tasks
    STOPPING = "stopping"  # reason: launch nothing more


class AttemptEvent(enum.StrEnum):
    """``attempt`` states besides how an attempt ended (an :class:`AttemptState`)."""

    VERIFYING = "verifying"  # the agent is done; verify commands run (running, passed, ...: the
    # attempt's own states)
    REQUEUED = "requeued"  # a rate limit or an infrastructure error: tried again, not counted


class RoundEvent(enum.StrEnum):
    WON = "won"  # candidate, reason


class MergeEvent(enum.StrEnum):
    VERIFYING = "verifying"  # tip, batch: the merged tree is verified again (the tip moved)
    BISECTING = "bisecting"  # detail, sizes: its batch failed; verified again in smaller ones
    CONFLICT = "conflict"  # paths
    FAILED = "failed"  # the merged tree failed verification
    CANCELLED = "cancelled"  # its verification was cancelled
    BRANCH_MOVED = "branch_moved"  # found, restored: someone else moved the run branch
    BRANCH_DELETED = "branch_deleted"  # tip, restored
    MERGED = "merged"  # commit


class BreakerEvent(enum.StrEnum):
    OPEN = "open"  # agent, until


class RegressionEvent(enum.StrEnum):
    CHECKING = "checking"  # commit
    PASSED = "passed"
    FAILED = "failed"  # commit, detail
    NOT_RUN = "not run"  # detail: the check could not run (infrastructure)
    OFF = "off"  # the check keeps failing for reasons of its own: no more checks
    CULPRIT = "culprit"  # commit, probes, reason
    UNRESOLVED = "unresolved"  # commit


class NotifyEvent(enum.StrEnum):
    SENT = "sent"  # notice, target, detail, duration_s
    FAILED = "failed"  # notice, target, detail (exit code, timeout, HTTP status): the run goes on


class ReviewEvent(enum.StrEnum):
    REQUESTED = "review_requested"  # agent, diffstat: the winner waits for a person
    DECIDED = "decided"  # verdict, who, text: a decision was recorded (by any process)
    APPLIED = "applied"  # verdict, who: the orchestrator acted on it (merge, new round, fail)


class EscalationEvent(enum.StrEnum):
    ESCALATED = "escalated"  # to, shot, detail, output


_MERGED = AttemptState.MERGED  # an attempt's merge is told by a ``merge`` event

# Every state each kind may report; ``usage_ignored`` has none (it names the ``fields``).
STATES: Mapping[Kind, frozenset[str]] = {
    Kind.RUN: frozenset({*RunEvent, *(s for s in RunState if s is not RunState.RUNNING)}),
    Kind.TASK: frozenset(TaskState),
    Kind.ATTEMPT: frozenset(
        {*AttemptEvent, *(s for s in AttemptState if s != AttemptState.MERGED)}
    ),
    Kind.ROUND: frozenset(RoundEvent),
    Kind.MERGE: frozenset(MergeEvent),
    Kind.BREAKER: frozenset(BreakerEvent),
    Kind.REGRESSION: frozenset(RegressionEvent),
    Kind.ESCALATION: frozenset(EscalationEvent),
    Kind.USAGE_IGNORED: frozenset(),
    Kind.NOTIFY: frozenset(NotifyEvent),
    Kind.REVIEW: frozenset(ReviewEvent),
}


def known(kind: str, state: str | None) -> bool:
    """Whether ``kind`` reports ``state`` (None: an event without a state)."""
    try:
        states = STATES[Kind(kind)]
    except ValueError:
        return False
    return state in states if state is not None else not states
