"""Verification: run a task's commands on a tree and say, with evidence, whether it passed."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..confine.procs import CancelToken, ProcessRequest, run_process
from ..confine.spec import Spec
from ..safeio import fresh_folder, open_folder, read_tail
from .oracle import (
    CHECK_DOES_NOT_REPRODUCE,
    DOES_NOT_REPRODUCE_REASON,
    CommandOutcome,
    TestReport,
    judge,
    judge_check,
    looks_like_pytest,
    parse_junit,
    pytest_env,
    reproduces,
)

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


@dataclass(frozen=True)
class CommandRequest:
    """One command to run on a tree (what a :class:`Runner` is given)."""

    command: str
    cwd: Path
    env: Mapping[str, str]
    log: Path  # appended to: ``$ command``, then what it printed
    deadline: float | None  # a time.monotonic() instant; None: no limit
    cancel: CancelToken | None = None
    marker: str | None = None  # the attempt's process marker (a fresh one if None)
    junit: Path | None = None  # where a pytest run writes its per-test report
    writable: Sequence[Path] | None = None
    confine: Spec | None = None  # how it is isolated (None: not at all)


def run_one(request: CommandRequest) -> tuple[CommandResult, TestReport | None, str]:
    """Run one command with ``/bin/sh -c``; with ``junit``, pytest runs report per test.

    Returns the result, the per-test report (None when not pytest or unreadable) and the
    tail of what the command printed. The command (the agent's code) can write ``junit``'s
    folder: it is used only through a descriptor opened without following links (see safeio),
    so a symlink put there makes orchardist neither remove nor read a file elsewhere.
    """
    command, log, env, junit = request.command, request.log, request.env, request.junit
    with log.open("ab") as fh:
        fh.write(f"$ {command}\n".encode())
    offset = log.stat().st_size
    folder, name = None, ""
    if junit is not None and looks_like_pytest(command):
        folder, name = open_folder(junit.parent), junit.name  # None: not a real folder
        env = {**env, **pytest_env(junit, env)}
    try:
        if folder is not None:
            # a stale report is not this run's; one that cannot go (a folder an earlier
            # command made there) is no regular file either, so it is never read as a report
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
        deadline = request.deadline
        left = None if deadline is None else max(0.01, deadline - time.monotonic())
        proc = run_process(
            ProcessRequest(
                argv=["/bin/sh", "-c", command],
                cwd=request.cwd,
                env=env,
                log=log,
                timeout_s=left,
                cancel=request.cancel,
                marker=request.marker,
                writable=request.writable,
                confine=request.confine,
            )
        )
        report = None if folder is None else parse_junit(name, folder)
    finally:
        if folder is not None:
            os.close(folder)
    result = CommandResult(command, proc.exit_code, proc.duration_s, proc.timed_out, proc.cancelled)
    return result, report, read_tail(log, offset, FEEDBACK_BYTES, last=True).text()


class Baselines(Protocol):
    """Results of a command on a base commit, run once and reused by every candidate."""

    def outcome(
        self,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str = "",
        cancel: CancelToken | None = None,
        network: bool = False,
    ) -> CommandOutcome:
        """The command's outcome on ``commit`` (run now if not cached)."""
        ...


@dataclass(frozen=True)
class Verdict:
    """Whether a tree passed its verification, judged against the base where it can be."""

    passed: bool
    verdict: str  # verified | unverified | failed | cancelled
    detail: str
    feedback: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    flag: str = ""


@dataclass(frozen=True)
class VerifyRequest:
    """A tree to verify: its commands and check, the base to judge them against, and where
    and how the commands run (what :meth:`Verifier.verify` is given)."""

    commands: Sequence[str]
    check: str | None
    baseline: str | None  # the base commit whose results failures are compared with
    workdir: str  # the commands' folder, relative to the tree
    cwd: Path
    env: Mapping[str, str]
    log: Path
    scratch: Path  # a folder of orchardist's for the per-test reports
    deadline: float  # a time.monotonic() instant shared by every command
    timeout_s: float  # for the base's run of a command
    cancel: CancelToken | None = None
    marker: str | None = None
    writable: Sequence[Path] | None = None
    confine: Spec | None = None
    check_baseline: str | None = None  # where the check must fail (default: ``baseline``)
    network: bool = False  # the base's runs get the network the tree's did
    keep: Callable[[CommandOutcome], None] | None = None  # hears each outcome on this tree

    @property
    def run_id(self) -> str:
        """The run, from the environment: it tags baseline processes for crash cleanup."""
        return self.env.get("ORCHARDIST_RUN", "")

    def command(self, command: str, junit: Path) -> CommandRequest:
        """How one of the commands (or the check) runs on the tree."""
        return CommandRequest(
            command,
            self.cwd,
            self.env,
            self.log,
            self.deadline,
            cancel=self.cancel,
            marker=self.marker,
            junit=junit,
            writable=self.writable,
            confine=self.confine,
        )


class Runner(Protocol):
    """Runs one command on a tree, as :func:`run_one` does (the shape a fake runner keeps)."""

    def __call__(self, request: CommandRequest) -> tuple[CommandResult, TestReport | None, str]:
        """Run the request's command: its result, its per-test report, its output's tail."""
        ...


@dataclass
class CommandVerifier:
    """Runs a task's commands and its ``check``, comparing failures with the base's results
    (the Verifier seam, see seams.py). Commands run through ``runner``: ``/bin/sh -c`` by
    default, Python functions with :class:`PythonCommands`."""

    baselines: Baselines | None = None
    runner: Runner = run_one

    def verify(self, request: VerifyRequest) -> Verdict:
        """Every command must pass, or fail only where the base already failed; the check must
        fail on ``check_baseline`` (default: ``baseline``) and pass here. ``confine`` isolates
        each command (see isolation.py); the base is run with the same ``network``. ``keep``
        hears each command's outcome on this tree, ended neither cancelled nor timed out."""
        commands, check, scratch = request.commands, request.check, request.scratch
        keep = request.keep
        if not commands and check is None:
            return Verdict(True, "unverified", "no verify commands: merged unchecked")
        scratch.parent.mkdir(parents=True, exist_ok=True)
        fresh_folder(scratch)  # the agent may have left a symlink there (see run_one)
        notes: list[str] = []
        for i, command in enumerate(commands):
            result, report, tail = self.runner(request.command(command, scratch / f"{i}.xml"))
            if result.cancelled:
                return Verdict(False, "cancelled", "verify cancelled")
            outcome = CommandOutcome(command, result.exit_code, result.timed_out, report)
            if keep is not None and not result.timed_out:
                keep(outcome)
            if result.passed:
                continue
            judged = _judged(outcome, self._base(outcome, request), tail)
            if isinstance(judged, Verdict):
                return judged
            notes.append(judged)
        if check is not None:
            verdict = self._check(check, request)
            if verdict is not None:
                return verdict
        detail = f"{len(commands)} verify command(s) passed" + (" and the check" if check else "")
        return Verdict(True, "verified", "; ".join([detail, *notes]), exit_code=0)

    def _base(self, outcome: CommandOutcome, request: VerifyRequest) -> CommandOutcome | None:
        """The base's outcome of a command that failed here (None: unknown, it timed out, or
        it cannot count). Without per-test results on either tree (a command that runs no
        pytest) a failure fails whatever the base did: running it there would only cost a
        checkout and a run."""
        if self.baselines is None or request.baseline is None or outcome.timed_out:
            return None
        if outcome.report is None and not looks_like_pytest(outcome.command):
            return None
        return self._on_base(request.baseline, outcome.command, request)

    def _on_base(self, commit: str, command: str, request: VerifyRequest) -> CommandOutcome:
        assert self.baselines is not None
        return self.baselines.outcome(
            commit,
            command,
            request.workdir,
            request.timeout_s,
            request.run_id,
            request.cancel,
            network=request.network,
        )

    def _check(self, check: str, request: VerifyRequest) -> Verdict | None:
        """The check on the base first (cached): one that passes there fails whatever the
        candidate does, so it is not run here."""
        baseline = request.check_baseline or request.baseline
        on_base = None
        if self.baselines is not None and baseline is not None:
            on_base = self._on_base(baseline, check, request)
        if on_base is not None and not reproduces(on_base):
            reason = f"check: {DOES_NOT_REPRODUCE_REASON}"
            return Verdict(False, "failed", reason, flag=CHECK_DOES_NOT_REPRODUCE)
        result, report, tail = self.runner(request.command(check, request.scratch / "check.xml"))
        if result.cancelled:
            return Verdict(False, "cancelled", "verify cancelled")
        here = CommandOutcome(check, result.exit_code, result.timed_out, report)
        if on_base is None:
            if result.passed:
                return None
            return Verdict(
                False,
                "failed",
                f"check failed ({result.exit_code}): {check}",
                tail,
                result.exit_code,
                result.timed_out,
            )
        judgement = judge_check(on_base, here)
        if judgement.passed:
            return None
        return Verdict(
            False,
            "failed",
            f"check: {judgement.reason}",
            tail,
            result.exit_code,
            result.timed_out,
            judgement.flag or "",
        )


CommandFunction = Callable[[Path], tuple[int, str]]  # cwd -> (exit code, output)


@dataclass(frozen=True)
class PythonCommands:
    """A :class:`Runner` whose commands are Python functions, looked up by the command's text.

    A command that is not in the table exits 127, as ``sh`` says for a command not found. The
    output goes to the log as a real command's would; cancellation and the deadline are
    honoured before the function runs.
    """

    table: Mapping[str, CommandFunction]

    def __call__(self, request: CommandRequest) -> tuple[CommandResult, TestReport | None, str]:
        """Run the command's function in ``cwd``; no per-test report."""
        command, cancel, deadline = request.command, request.cancel, request.deadline
        if cancel is not None and cancel.cancelled:
            return CommandResult(command, -1, 0.0, cancelled=True), None, ""
        if deadline is not None and time.monotonic() >= deadline:
            return CommandResult(command, -1, 0.0, timed_out=True), None, ""
        started = time.monotonic()
        function = self.table.get(command)
        code, output = (
            (127, f"{command}: not found\n") if function is None else function(request.cwd)
        )
        with request.log.open("a", encoding="utf-8") as fh:
            fh.write(f"$ {command}\n{output}")
        result = CommandResult(command, code, time.monotonic() - started)
        return result, None, output[-FEEDBACK_BYTES:]


@dataclass
class MemoryBaselines:
    """Baselines given up front: ``(commit, command) -> outcome``; a missing one passed."""

    outcomes: dict[tuple[str, str], CommandOutcome]
    asked: list[tuple[str, str]] = field(default_factory=list)  # (commit, command), in order

    def outcome(
        self,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str = "",
        cancel: CancelToken | None = None,
        network: bool = False,
    ) -> CommandOutcome:
        """The given outcome, or a pass."""
        self.asked.append((commit, command))
        return self.outcomes.get((commit, command), CommandOutcome(command, 0, False, None))


def _judged(outcome: CommandOutcome, base: CommandOutcome | None, tail: str) -> Verdict | str:
    """A command that did not pass, against the base's outcome of it: a failed Verdict, or
    the note saying why its failures do not count."""
    command = outcome.command
    judgement = judge(outcome, base)
    if judgement.passed:
        return f"{command}: {judgement.reason}"
    what = "timed out" if outcome.timed_out else f"failed ({outcome.exit_code})"
    # The judgement names the command and the exit code too: say each once.
    why = judgement.reason.removesuffix(f": {command}")
    why = "" if why in (f"exit {outcome.exit_code}", "timed out") else f": {why}"
    return Verdict(
        False,
        "failed",
        f"verify command {what}: {command}{why}",
        tail,
        outcome.exit_code,
        outcome.timed_out,
    )
