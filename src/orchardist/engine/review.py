"""Review gates, the engine's side: a reviewed task's winner waits for a person instead of the
merge train, and the person's decision (recorded by :mod:`orchardist.runs.review`, from any
process) is acted on exactly once: its ``applied_at`` is set in the transaction of the task's
move (merging, a new round, failed).

What a change request's next attempt is told is built here, by :func:`change_request_message`:
the reviewer's words are the instruction, under orchardist's header, in a block no line of them
can close; the lines they commented on and the previous diff were written by an agent, and are
quoted as data (:mod:`orchardist.quoting`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..executors import AttemptJob, Outcome
from ..quoting import fence_for, inline, quoted
from ..specs import Review, TaskSpec
from ..state.records import AttemptRecord, ReviewDecision, StoredDecision, TaskState, Verdict
from ..terminal import plain

DIFF_CHARS = 16000  # the previous diff a change request's prompt quotes (its start)


@dataclass(frozen=True)
class ReviewWake:
    """A decision was recorded from another process: read the store (a scheduler message)."""


@dataclass(frozen=True)
class ChangeRequest:
    """What a task's next attempts are told, and where they start, after a change request."""

    message: str  # the prompt's section (change_request_message)
    agent: str  # the reviewed attempt's profile: the same agent goes on
    base_commit: str  # the reviewed patch was taken against this commit
    patch_commit: str | None  # the reviewed patch


def change_request_message(decision: ReviewDecision, previous_diff: str) -> str:
    """The prompt section of a change request: the reviewer's text, each line comment with the
    lines it is about (``LineComment.quote``), and the previous diff."""
    who = inline(decision.who) or "a reviewer"
    parts = [
        "## A reviewer asked for changes to your previous patch",
        f"The patch below was verified, then reviewed by {who}, who asks for the changes that"
        " follow. The worktree starts from that patch where it still applies; make the"
        " requested changes on top of it.",
    ]
    if decision.text.strip():
        parts.append(_reviewer_block(decision.text, "What the reviewer asks"))
    for comment in decision.lines:
        where = f"{inline(comment.path)}:{comment.line}"
        parts.append(f"### On {where}")
        if comment.quote:
            parts.append(quoted(comment.quote, f"The lines around {where} in the patch"))
        parts.append(_reviewer_block(comment.text, f"The reviewer's comment on {where}"))
    if previous_diff.strip():
        diff = previous_diff[:DIFF_CHARS]
        label = "The previous patch (its diff), written by the agent"
        parts.append(quoted(diff, label, info="diff"))
    return "\n\n".join(parts) + "\n"


def _reviewer_block(text: str, label: str) -> str:
    """A person's words, to be followed, in a fence none of their lines can close."""
    clean = plain(text).rstrip("\n")
    fence = fence_for(clean)
    return f"{inline(label)}:\n\n{fence}text\n{clean}\n{fence}"


def quote_lines(text: str, line: int, context: int = 2) -> str:
    """Lines ``line - context`` to ``line + context`` of ``text``, numbered, the commented line
    marked with ``>``."""
    lines = text.splitlines()
    first, last = max(1, line - context), min(len(lines), line + context)
    width = len(str(last))
    return "\n".join(
        f"{'>' if n == line else ' '} {n:>{width}} | {lines[n - 1]}" for n in range(first, last + 1)
    )


class Gate:
    """Which tasks wait for a person, the winners that wait, and the change requests their
    next attempts carry."""

    def __init__(
        self,
        specs: Mapping[str, TaskSpec],
        lands: Callable[[str], bool],
        start_on: Callable[[str, str, str, str], str | None],
    ) -> None:
        self.specs, self.lands = specs, lands
        self.start_on = start_on  # (base, patch, message, tip) → the patch on tip; None: conflict
        self.awaiting: dict[str, Outcome] = {}  # task -> its winner, waiting for a decision
        self.requests: dict[str, ChangeRequest] = {}  # task -> what its next attempts are told

    def hold(self, task_id: str, winner: Outcome) -> None:
        """The task's winner waits for a person's decision."""
        self.awaiting[task_id] = winner

    def settle(self, task_id: str) -> None:
        """An approval or a rejection ended the task's review: nothing of it is kept."""
        self.awaiting.pop(task_id, None)
        self.requests.pop(task_id, None)

    def wants(self, task_id: str) -> bool:
        """Whether the task's winner waits for a person (a pipeline's earlier stages do not:
        they land nothing)."""
        return self.specs[task_id].review is Review.HUMAN and self.lands(task_id)

    def requested(self, stored: StoredDecision, patch_commit: str | None, agent: str) -> None:
        """A change request was applied: the task's next attempts carry it."""
        message = change_request_message(stored.decision, stored.diff)
        base = self.awaiting.pop(stored.task_id).job.base_commit
        self.requests[stored.task_id] = ChangeRequest(message, agent, base, patch_commit)

    def applicable(
        self, decisions: list[StoredDecision], states: Mapping[str, TaskState]
    ) -> list[StoredDecision]:
        """The decisions not acted on yet whose task still awaits review of that attempt."""
        return [
            d
            for d in decisions
            if d.applied_at is None
            and states.get(d.task_id) is TaskState.AWAITING_REVIEW
            and d.task_id in self.awaiting
            and self.awaiting[d.task_id].job.attempt == d.attempt
        ]

    def agent(self, task_id: str, planned: str) -> str:
        """The profile of a task's next attempt: after a change request, the reviewed one."""
        request = self.requests.get(task_id)
        return request.agent if request is not None and request.agent else planned

    def restore(self, decisions: list[StoredDecision], attempts: list[AttemptRecord]) -> None:
        """The change requests still in force after a restart: a task's last applied decision,
        when it asked for changes."""
        by_key = {(a.task_id, a.n): a for a in attempts}
        for stored in decisions:  # oldest first: the last one stays
            reviewed = by_key.get((stored.task_id, stored.attempt))
            if stored.applied_at is None or reviewed is None:
                continue
            if stored.decision.verdict is not Verdict.CHANGES:
                self.requests.pop(stored.task_id, None)
                continue
            message = change_request_message(stored.decision, stored.diff)
            self.requests[stored.task_id] = ChangeRequest(
                message, reviewed.agent, reviewed.base_commit, reviewed.patch_commit
            )

    def shape(self, job: AttemptJob) -> AttemptJob:
        """An attempt after a change request: its prompt holds the request, and its worktree
        starts from the reviewed patch put on the job's base (where it conflicts with what
        landed since, from the base: the prompt's diff is then all the agent has)."""
        request = self.requests.get(job.task_id)
        if request is None:
            return job
        prompt = job.prompt.rstrip("\n") + "\n\n" + request.message
        start = None
        if request.patch_commit is not None:
            base, patch = request.base_commit, request.patch_commit
            start = self.start_on(base, patch, "the reviewed patch", job.base_commit)
        # An agent that continues its own session (agents/sessions.py) is told only the request.
        return replace(job, prompt=prompt, followup=request.message, start_commit=start)
