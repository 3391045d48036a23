"""Verification: run a task's commands on a tree and say, with evidence, whether it passed."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .procs import CancelToken, run_process

FEEDBACK_BYTES = 4000


@dataclass(frozen=True)
class CommandResult:
    """One verify command's run."""

    command: str
    exit_code: int
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False

    @property
    def passed(self) -> bool:
        """Exit code 0, not timed out or cancelled."""
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


@dataclass(frozen=True)
class VerifyResult:
    """All commands' results; ``passed`` only if every one passed."""

    commands: tuple[CommandResult, ...]
    feedback: str = ""  # the tail of the failing command's output, for the next attempt

    @property
    def passed(self) -> bool:
        """Whether every command passed (vacuously true for no commands)."""
        return all(c.passed for c in self.commands)

    @property
    def failed(self) -> CommandResult | None:
        """The first command that did not pass."""
        return next((c for c in self.commands if not c.passed), None)

    @property
    def timed_out(self) -> bool:
        """Whether a command ran into the deadline."""
        return any(c.timed_out for c in self.commands)

    @property
    def cancelled(self) -> bool:
        """Whether a command was cancelled."""
        return any(c.cancelled for c in self.commands)

    def describe(self) -> str:
        """One line for people."""
        bad = self.failed
        if bad is None:
            return f"{len(self.commands)} verify command(s) passed"
        if bad.timed_out:
            return f"verify command timed out: {bad.command}"
        if bad.cancelled:
            return "verify cancelled"
        return f"verify command failed ({bad.exit_code}): {bad.command}"


def run_commands(
    commands: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    deadline: float | None,
    cancel: CancelToken | None = None,
    marker: str | None = None,
) -> VerifyResult:
    """Run commands in order with ``/bin/sh -c``, stopping at the first failure.

    ``deadline`` is a ``time.monotonic()`` instant shared by all the commands.
    """
    results: list[CommandResult] = []
    for command in commands:
        with log.open("ab") as fh:
            fh.write(f"$ {command}\n".encode())
        offset = log.stat().st_size
        left = None if deadline is None else max(0.01, deadline - time.monotonic())
        proc = run_process(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=env,
            log=log,
            timeout_s=left,
            cancel=cancel,
            marker=marker,
        )
        result = CommandResult(
            command, proc.exit_code, proc.duration_s, proc.timed_out, proc.cancelled
        )
        results.append(result)
        if not result.passed:
            return VerifyResult(tuple(results), tail_of(log, offset))
    return VerifyResult(tuple(results))


def tail_of(log: Path, offset: int = 0) -> str:
    """The last bytes of a log written after ``offset``, decoded leniently."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(offset, log.stat().st_size - FEEDBACK_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
