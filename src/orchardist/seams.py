"""The five seams: where orchardist meets the outside world, each a small Protocol.

Everything else (the scheduler's loop, candidate rounds, the merge train, budgets) is plain code
that talks to the world only through these. Each seam has real implementations and an
in-package fake that is a real implementation too, not a mock: the same contract tests
(``tests/contracts/``) run against every one of them, and mypy checks each against its
Protocol (``seams_check.py``).

- **Agent**: turn a task into changes in a worktree. Kinds in ``agents/*.py``, picked by name
  from ``agents.KINDS``. Fake: ``agents/scripted.py`` (ScriptedAgent: canned edits, sleeps,
  crashes, hangs).
- **Executor**: run an attempt (agent, verify, patch). ``executors/local.py``, picked by name
  from ``executors.EXECUTORS`` (``[run] executor``). Fake: ``executors/inline.py``
  (InlineExecutor: jobs take time on a ``clocks.FakeClock`` and change nothing).
- **Store**: durable state (runs, tasks, attempts, events, baselines). ``store.Store`` on a
  SQLite file. Fake: ``Store.in_memory()``, the same code on SQLite's ``:memory:``.
- **Verifier**: run commands, judge failures against the base's. ``verify.CommandVerifier``
  (``/bin/sh -c``). Fake: ``CommandVerifier(runner=PythonCommands(...))`` (commands as Python
  functions) with ``verify.MemoryBaselines``.
- **Integrator**: put a verified patch on the run branch. ``merge.GitIntegrator``. Fake:
  ``merge.MemoryIntegrator`` (the branch a variable, commits counters).

Agent and Executor are defined next to their implementations (``agents/__init__.py``,
``executors/__init__.py``) and re-exported here; the other three are defined here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, Unpack

from .agents import Agent
from .executors import Executor
from .state.eventlog import Event
from .state.records import (
    AttemptChanges,
    AttemptRecord,
    Run,
    RunChanges,
    StoredDecision,
    TaskChanges,
    TaskRecord,
)
from .verify.oracle import CommandOutcome
from .verify.verifier import Verdict, VerifyRequest

__all__ = [
    "Agent",
    "Executor",
    "Integrator",
    "Prepared",
    "Store",
    "Transaction",
    "Verifier",
]


@dataclass(frozen=True)
class Prepared:
    """A commit ready to become the branch tip, or the paths that conflict."""

    tip: str  # the branch tip it was prepared against
    commit: str | None  # None on conflict
    needs_verify: bool = False  # True when the tree differs from the verified one
    conflicts: tuple[str, ...] = ()


class Transaction(Protocol):
    """Writes that commit together or not at all; the events appended are kept for hooks."""

    events: list[Event]

    def add_run(self, run: Run) -> None:
        """Record a new run."""
        ...

    def set_run(self, run_id: str, **changes: Unpack[RunChanges]) -> None:
        """Change a run's columns (``state``, ``finished_at``, ``reason``)."""
        ...

    def add_task(self, task: TaskRecord) -> None:
        """Record a task of a run."""
        ...

    def set_task(self, run_id: str, task_id: str, **changes: Unpack[TaskChanges]) -> None:
        """Change a task's columns; a StoreError when there is no such task."""
        ...

    def add_attempt(self, attempt: AttemptRecord) -> None:
        """Record an attempt as it starts."""
        ...

    def set_attempt(
        self, run_id: str, task_id: str, n: int, **changes: Unpack[AttemptChanges]
    ) -> None:
        """Change an attempt's columns; a StoreError when there is no such attempt."""
        ...

    def intend_commit(self, run_id: str, commit: str, task_id: str, attempt: int) -> None:
        """Say, before the branch moves, that ``commit`` is orchardist's (resume trusts it)."""
        ...

    def apply_decision(self, run_id: str, task_id: str, attempt: int, now: float) -> bool:
        """Mark a review decision acted on; False when it already was."""
        ...

    def put_baseline(self, key: str, commit: str, outcome: CommandOutcome, now: float) -> None:
        """Keep a command's outcome on a base commit for every later candidate."""
        ...

    def emit(self, event: Event) -> None:
        """Append an event to the run's log."""
        ...


class Store(Protocol):
    """Durable state: what was planned, tried and merged, and the event log."""

    def transaction(self) -> AbstractContextManager[Transaction]:
        """An immediate transaction: committed on success, rolled back on any error."""
        ...

    def run(self, run_id: str) -> Run | None:
        """A run by its id."""
        ...

    def runs(self) -> list[Run]:
        """Every run, newest first."""
        ...

    def tasks(self, run_id: str) -> list[TaskRecord]:
        """A run's tasks, in plan order."""
        ...

    def attempts(self, run_id: str, task_id: str | None = None) -> list[AttemptRecord]:
        """A run's attempts (of one task), oldest first."""
        ...

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        """A run's events after sequence number ``after``, in order."""
        ...

    def decisions(self, run_id: str, task_id: str | None = None) -> list[StoredDecision]:
        """A run's review decisions (of one task, if given), oldest first."""
        ...

    def branch_commits(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``commit -> (task, attempt)`` for the commits orchardist meant to put on the branch."""
        ...

    def baseline(self, key: str) -> CommandOutcome | None:
        """A kept baseline outcome."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...


class Verifier(Protocol):
    """Runs a tree's verify commands and ``check``; failures the base shares do not count."""

    def verify(self, request: VerifyRequest) -> Verdict:
        """Every command must pass, or fail only where ``baseline`` already failed; the check
        must fail on ``check_baseline`` (default: ``baseline``) and pass here. ``keep`` hears
        each command's outcome on this tree (to serve as a later baseline)."""
        ...


class Integrator(Protocol):
    """Moves the run branch forward one verified patch at a time, with compare-and-swap."""

    def tip(self) -> str:
        """The branch's current commit."""
        ...

    def current(self) -> str | None:
        """The branch's current commit, or None when it was deleted under the run."""
        ...

    def recreate(self, tip: str) -> bool:
        """Make the deleted branch again at ``tip``; False if it exists by now."""
        ...

    def prepare(self, base: str, patch: str, message: str, tip: str | None = None) -> Prepared:
        """A commit of ``patch``'s changes (made on ``base``) on top of the tip."""
        ...

    def advance(self, prepared: Prepared) -> bool:
        """Move the branch onto the prepared commit if it is still at the prepared tip."""
        ...

    def reset(self, new_tip: str, old_tip: str) -> bool:
        """Move the branch to ``new_tip`` if it is still at ``old_tip`` (a rewind)."""
        ...

    def parent(self, commit: str) -> str:
        """A commit's first parent."""
        ...

    def first_parent_commits(self, since: str, until: str) -> list[str]:
        """Commits in ``since..until`` along first parents, oldest first."""
        ...

    def changed(self, old: str, new: str) -> frozenset[str]:
        """The paths whose content differs from ``old`` to ``new``."""
        ...

    def same_tree(self, one: str, other: str) -> bool:
        """Whether two commits hold the same tree (a merged tree that was verified as it is)."""
        ...
