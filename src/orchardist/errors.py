"""The exception tree.

::

    OrchardistError            anything orchardist raises on purpose
    ├── PlanError              a plan that cannot run; carries every Problem found
    ├── UsageError             a command line or run id that makes no sense
    │   ├── IsolationError     [run] isolation = "required" where namespaces cannot be made
    │   └── ReviewError        a review decision that cannot be taken (docs/review.md)
    ├── GitError               a git command failed (translated where git is called)
    ├── StoreError             the SQLite store failed or holds something unexpected
    ├── TransitionError        a state moved where its transition table does not allow (a bug)
    ├── AgentError             an agent could not be built or started
    └── RunLockedError         another orchestrator is driving the run

The CLI maps PlanError, UsageError and RunLockedError to exit code 2, the others to 1, and
prints them without a traceback (:func:`reported`, shared by the whole command line and the
plain scan's, which does not import it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# the command line's exit codes (3, a run awaiting review, is cli.options.EXIT_REVIEW)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class OrchardistError(Exception):
    """Root of every error orchardist raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a plan, located as precisely as we can."""

    file: str
    message: str
    task: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.task is not None:
            where += f": task {self.task!r}"
        if self.field is not None:
            where += f": {self.field}"
        return f"{where}: {self.message}"


class PlanError(OrchardistError):
    """A plan failed validation; ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(OrchardistError):
    """Bad command-line usage: an unknown run, a missing file, conflicting flags."""


class IsolationError(UsageError):
    """Namespaces were required but cannot be created here (no bwrap, no user namespaces)."""


class ReviewError(UsageError):
    """A review decision that cannot be taken: an unknown run or task, a task that does not
    await review, a line comment on a file or line the pending patch does not have."""


class GitError(OrchardistError):
    """A git command failed; the message holds the command and git's own words."""


class StoreError(OrchardistError):
    """The state store failed."""


class TransitionError(OrchardistError):
    """A run, task or attempt was about to move between states its table (records.py) does not
    join: a bug in orchardist, refused before it is stored."""


class AgentError(OrchardistError):
    """An agent could not be constructed or launched."""


class RunLockedError(OrchardistError):
    """Another live orchestrator holds the run's lock."""


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    """The message for a key a table does not take, with a "did you mean" when one is close."""
    import difflib  # only when a key is wrong: every command imports this module

    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r}{hint}"


def reported(call: Callable[[], int]) -> int:
    """``call``'s exit code; an error it raises on purpose printed on stderr, without a
    traceback, and turned into its exit code (see the module's docstring)."""
    try:
        return call()
    except BrokenPipeError:  # `orchardist status | head`: the reader left; so do we, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except PlanError as exc:
        from .terminal import visible

        print(f"error: the plan has {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:  # a key may hold escape sequences: shown, never obeyed
            print(f"  {visible(str(problem))}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, RunLockedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OrchardistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
