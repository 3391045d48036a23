"""Candidate rounds: a task is attempted in rounds of ``candidates`` attempts, one winner each.

A round puts one :class:`Unit` per candidate in the ready set (so each waits for its own slot),
and ends when the task's rule picks a winner (``first`` to pass, or the ``smallest`` passing
diff once all finished) or when every candidate failed. :class:`Rounds` owns the ready set, the
rounds and the attempt numbers; it says how a round ended as a :class:`Decision`, and the loop
records it and acts on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..executors import Job, Outcome
from ..plan.graph import Rank, ReadySet
from ..specs import TaskSpec
from ..state.agentrecords import Failure
from ..state.records import AttemptState
from ..verify.oracle import CHECK_DOES_NOT_REPRODUCE


@dataclass(frozen=True, order=True)
class Unit:
    """One candidate of a task: what the ready set orders and a slot runs."""

    task_id: str
    candidate: int


@dataclass
class Round:
    """One round of candidates for a task."""

    size: int
    pending: set[int]  # candidates not finished yet (queued or running)
    after: int = 0  # attempts numbered up to this belong to earlier rounds
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    decided: bool = False


@dataclass(frozen=True)
class Decision:
    """How a round ended: its winner, or why no candidate passed."""

    task_id: str
    winner: Outcome | None
    why: str  # why the winner won ("" without one)
    selections: tuple[tuple[Outcome, str], ...]  # each finished candidate, and why it won or lost
    failure: Failure | None = None  # without a winner: the last failure's
    detail: str = ""
    feedback: str = ""
    final: bool = False  # no new round can change it (the check passes on the base)


class Rounds:
    """The ready set of candidates, each task's current round, and its attempt numbers."""

    def __init__(self, specs: Mapping[str, TaskSpec], ranks: Mapping[str, Rank]) -> None:
        self.specs = specs
        units = {Unit(t.id, k): ranks[t.id] for t in specs.values() for k in range(t.candidates)}
        self.ready: ReadySet[Unit] = ReadySet(
            units, lambda u: specs[u.task_id].agent_for(u.candidate)
        )
        self.rounds: dict[str, Round] = {}
        self.attempts: Counter[str] = Counter()  # the last attempt number per task

    def units(self, task_id: str) -> list[Unit]:
        """Every candidate of a task."""
        return [Unit(task_id, k) for k in range(self.specs[task_id].candidates)]

    def start(self, task_id: str, size: int | None = None) -> None:
        """A fresh round: every candidate becomes ready (the first ``size`` only, if given: a
        change request's round is its reviewed agent's alone)."""
        size = self.specs[task_id].candidates if size is None else size
        self.rounds[task_id] = Round(size, set(range(size)), after=self.attempts[task_id])
        self.ready.extend(self.units(task_id)[:size])

    def next_attempt(self, task_id: str) -> int:
        """Number the task's next attempt."""
        self.attempts[task_id] += 1
        return self.attempts[task_id]

    def seen(self, task_id: str, n: int) -> None:
        """Attempt ``n`` of the task exists already (a resumed run numbers on from it)."""
        self.attempts[task_id] = max(self.attempts[task_id], n)

    def unready(self, task_id: str) -> None:
        """No candidate of the task may start (its round, if any, stays)."""
        for unit in self.units(task_id):
            self.ready.discard(unit)

    def drop(self, task_id: str) -> None:
        """Forget the task's round: it waits for its dependencies again."""
        self.unready(task_id)
        self.rounds.pop(task_id, None)

    def requeue(self, job: Job) -> None:
        """The candidate runs again in the same round (an ending that did not count)."""
        self.ready.push(Unit(job.task_id, job.candidate))

    def current(self, job: Job) -> Round | None:
        """The undecided round the job belongs to; None for a loser still running when the
        winner was picked, or for work a rewind dropped."""
        round_ = self.rounds.get(job.task_id)
        if round_ is None or round_.decided or job.attempt <= round_.after:
            return None
        return round_

    def record(self, outcome: Outcome) -> Decision | None:
        """A candidate of the current round finished; the decision when that ends the round."""
        job = outcome.job
        round_ = self.rounds[job.task_id]
        round_.outcomes[job.candidate] = outcome
        round_.pending.discard(job.candidate)
        passed = outcome.state is AttemptState.PASSED
        if passed and self.specs[job.task_id].select == "first":
            return self.decide(job.task_id, outcome, "first candidate to pass")
        if not round_.pending:
            return self.decide(job.task_id)
        return None

    def hold(self, task_id: str, running: Iterable[int]) -> Decision | None:
        """The task may start nothing more: candidates not running are out of the round, which
        ends with the others (at once, when none runs and one passed)."""
        self.unready(task_id)
        round_ = self.rounds.get(task_id)
        if round_ is None or round_.decided:
            return None
        round_.pending &= set(running)
        passed = any(o.state is AttemptState.PASSED for o in round_.outcomes.values())
        return self.decide(task_id) if not round_.pending and passed else None

    def decide(self, task_id: str, winner: Outcome | None = None, why: str = "") -> Decision:
        """End the round: pick the winner by rule, say why each candidate won or lost."""
        round_ = self.rounds[task_id]
        round_.decided = True
        for k in round_.pending:
            self.ready.discard(Unit(task_id, k))
        outcomes = list(round_.outcomes.values())
        passing = [o for o in outcomes if o.state is AttemptState.PASSED]
        if winner is None and passing:
            winner = min(passing, key=_smallest)
            why = "only passing candidate" if len(passing) == 1 else "smallest passing diff"
        selections = tuple((o, _selection(o, winner, why)) for o in outcomes)
        if winner is not None:
            return Decision(task_id, winner, why, selections)
        failed = [o for o in outcomes if o.state is AttemptState.FAILED]
        last = max(failed, key=lambda o: o.ended_at) if failed else None
        detail = last.detail if last else "no candidate finished"
        if len(outcomes) > 1:
            detail = f"no candidate passed ({len(outcomes)} tried); last: {detail}"
        return Decision(
            task_id,
            None,
            "",
            selections,
            failure=last.failure if last else Failure.AGENT_ERROR,
            detail=detail,
            feedback=last.feedback if last else "",
            # A check that passes on the base needs a person: no new candidate can change that.
            final=bool(failed) and all(o.flag == CHECK_DOES_NOT_REPRODUCE for o in failed),
        )


def _selection(outcome: Outcome, winner: Outcome | None, why: str) -> str:
    if outcome is winner:
        return f"won: {why}"
    if outcome.state is AttemptState.PASSED and winner is not None:
        return f"lost to candidate {winner.job.candidate}: " + _lost_because(outcome, winner)
    return "failed"


def _smallest(outcome: Outcome) -> tuple[int, float, int]:
    """The ``smallest`` rule: fewest changed lines, then shortest duration, then lowest index."""
    duration = outcome.ended_at - outcome.started_at
    return (outcome.changed_lines or 0, duration, outcome.job.candidate)


def _lost_because(loser: Outcome, winner: Outcome) -> str:
    if (loser.changed_lines or 0) != (winner.changed_lines or 0):
        return f"larger diff ({loser.changed_lines} vs {winner.changed_lines} lines)"
    if loser.ended_at - loser.started_at != winner.ended_at - winner.started_at:
        return "same diff size, slower"
    return "same diff size and duration, higher index"
