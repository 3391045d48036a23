"""The oracle: decide from real runs whether a candidate passes, compared with its base.

Each verify command runs once on the base tree (cached under ``baseline_key``) and once on the
candidate's tree. For pytest, ``pytest_env`` makes the run write JUnit XML, ``parse_junit`` turns
it into a ``TestReport``, and ``judge`` applies the rule:

    every test that passed on the base still passes on the candidate, and the exit code is 0
    or the only failing tests are tests that already failed on the base.

Without per-test reports the rule is the exit code alone: non-zero fails. A timeout always
fails. A ``check`` is a reproduction, judged by ``judge_check``: it must fail on the base and
pass on the candidate; one that passes on the base is flagged rather than trusted.

Everything here is pure except ``parse_junit``, which reads one file.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..safeio import read_capped

__all__ = [
    "CHECK_DOES_NOT_REPRODUCE",
    "DOES_NOT_REPRODUCE_REASON",
    "CommandOutcome",
    "Judgement",
    "TestReport",
    "baseline_key",
    "judge",
    "judge_check",
    "looks_like_pytest",
    "parse_junit",
    "pytest_env",
    "reproduces",
]

ADDOPTS_VAR = "PYTEST_ADDOPTS"
CHECK_DOES_NOT_REPRODUCE = "check_does_not_reproduce"
DOES_NOT_REPRODUCE_REASON = "check does not reproduce"
BASELINE_KEY_VERSION = "1"  # bump when the way baselines are run changes, to retire old entries
MAX_NAMES_IN_REASON = 5
MAX_JUNIT_BYTES = 64 * 1024 * 1024  # a larger report is not read: per-command verdicts apply
_PYTEST_PROGRAMS = frozenset({"pytest", "py.test", "pytest-3"})
_WHERE = "commands run in the task's workdir, by default the plan's folder"
PYTEST_EXITS = {  # what pytest's own exit codes mean, for the exits no failing test explains
    4: f"pytest's usage error: a path or option it could not use ({_WHERE})",
    5: f"pytest collected no tests: is the path right? ({_WHERE})",
}


@dataclass(frozen=True)
class TestReport:
    """Per-test results of one run; test ids are ``classname::name`` (or ``file::name``)."""

    __test__ = False  # not a pytest test class, despite the name

    passed: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()  # failures and errors, including collection errors
    skipped: frozenset[str] = frozenset()  # skipped and xfailed

    @property
    def ran(self) -> frozenset[str]:
        """Every test id the run reported."""
        return self.passed | self.failed | self.skipped


@dataclass(frozen=True)
class CommandOutcome:
    """One verify command's run on one tree, as the oracle sees it."""

    command: str
    exit_code: int
    timed_out: bool = False
    report: TestReport | None = None  # None: not pytest, or no readable JUnit XML


@dataclass(frozen=True)
class Judgement:
    """The oracle's verdict on one command, with the tests that decided it."""

    passed: bool
    reason: str
    newly_failed: tuple[str, ...] = ()  # failing now, not failing on the base
    preexisting: tuple[str, ...] = ()  # failing now and already failing on the base
    missing: tuple[str, ...] = ()  # passed on the base, now absent or skipped
    flag: str | None = None  # e.g. CHECK_DOES_NOT_REPRODUCE: needs a person, not a retry


# --- pytest per-test results -------------------------------------------------------------------


def pytest_env(junit_path: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment overrides that make any pytest run inside a command write JUnit XML.

    Returns ``{"PYTEST_ADDOPTS": ...}`` to merge over ``env`` (default: ``os.environ``), keeping
    options already there. pytest reads the variable with ``shlex.split``, so the path is quoted.
    ``--continue-on-collection-errors`` keeps one broken test module from hiding every other
    test's result; the exit code stays non-zero, so nothing that failed before now passes.

    Remove ``junit_path`` before each run: a stale file would be read as this run's report.
    If the command runs pytest several times, the file holds the last run only.
    """
    source = os.environ if env is None else env
    ours = f"--junitxml={shlex.quote(str(junit_path.absolute()))} --continue-on-collection-errors"
    existing = source.get(ADDOPTS_VAR, "").strip()
    return {ADDOPTS_VAR: f"{existing} {ours}" if existing else ours}


def looks_like_pytest(command: str) -> bool:
    """Whether a shell command appears to run pytest (``pytest``, ``python -m pytest``, ...)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: fall back to plain words
        tokens = command.split()
    for token in tokens:
        if PurePosixPath(token).name in _PYTEST_PROGRAMS:
            return True
        if token == "-mpytest":  # "-m pytest" is two tokens, the second a program name
            return True
    return False


def parse_junit(path: Path | str, dir_fd: int | None = None) -> TestReport | None:
    """Read a JUnit XML file (``path`` relative to ``dir_fd`` when given, see safeio) into a
    TestReport; None if it is missing, truncated or not JUnit.

    Accepts a ``<testsuites>`` or ``<testsuite>`` root and any number of suites. A test reported
    more than once counts as failed if any entry failed, else skipped if any was skipped.
    """
    raw = read_capped(path, MAX_JUNIT_BYTES, dir_fd)
    if raw is None:
        return None
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        return None
    if root.tag not in ("testsuites", "testsuite"):
        return None
    passed: set[str] = set()
    failed: set[str] = set()
    skipped: set[str] = set()
    for case in root.iter("testcase"):
        test_id = _test_id(case)
        if test_id is None:
            continue
        children = {child.tag for child in case}
        if children & {"failure", "error"}:
            failed.add(test_id)
        elif "skipped" in children:
            skipped.add(test_id)
        else:
            passed.add(test_id)
    skipped -= failed
    passed -= failed | skipped
    return TestReport(frozenset(passed), frozenset(failed), frozenset(skipped))


def _test_id(case: ET.Element) -> str | None:
    """``classname::name``; ``file::name`` when there is no class name; the bare name else."""
    name = case.get("name", "").strip()
    if not name:
        return None
    owner = case.get("classname", "").strip() or case.get("file", "").strip()
    return f"{owner}::{name}" if owner else name


# --- the rule ----------------------------------------------------------------------------------


def judge(candidate: CommandOutcome, baseline: CommandOutcome | None) -> Judgement:
    """Whether a candidate's run of a verify command passes, given the base's run of it.

    With reports on both sides: no test that passed on the base may fail, be skipped or go
    missing, and a non-zero exit is tolerated only when every failing test already failed on
    the base. Otherwise (no reports, or no baseline) a non-zero exit fails. A timeout fails.
    """
    if baseline is not None and baseline.command != candidate.command:
        raise ValueError(
            f"baseline is for {baseline.command!r}, candidate ran {candidate.command!r}"
        )
    if candidate.timed_out:
        return Judgement(False, f"timed out: {candidate.command}")
    now = candidate.report
    before = baseline.report if baseline is not None else None
    if now is not None and before is not None:
        return _judge_reports(candidate, now, before)
    if before is not None and before.passed:
        # The base proved tests pass; without the candidate's report we cannot confirm them.
        return Judgement(
            False,
            f"no test report from the candidate, so {len(before.passed)} test(s) that passed "
            f"on the base are unconfirmed (exit {candidate.exit_code}): {candidate.command}",
        )
    if candidate.exit_code == 0:
        return Judgement(True, f"passed: {candidate.command}")
    failing = _sorted(now.failed) if now is not None else ()
    detail = f"; failing: {_names(failing)}" if failing else ""
    return Judgement(
        False,
        f"{exit_said(candidate)}{detail}: {candidate.command}",
        newly_failed=failing,
    )


def exit_said(outcome: CommandOutcome) -> str:
    """``exit N``, with what N means when pytest ran and N is one of its own (4, 5)."""
    meaning = PYTEST_EXITS.get(outcome.exit_code) if looks_like_pytest(outcome.command) else None
    return f"exit {outcome.exit_code}" + (f": {meaning}" if meaning else "")


def _judge_reports(candidate: CommandOutcome, now: TestReport, before: TestReport) -> Judgement:
    """The per-test rule, when both runs left a report."""
    newly_failed = _sorted(now.failed - before.failed)
    preexisting = _sorted(now.failed & before.failed)
    missing = _sorted(before.passed - now.passed - now.failed)
    regressed = _sorted(before.passed & now.failed)
    problems: list[str] = []
    if regressed:
        problems.append(
            f"{len(regressed)} test(s) that passed on the base now fail: {_names(regressed)}"
        )
    brand_new = tuple(t for t in newly_failed if t not in before.passed)
    if brand_new and candidate.exit_code != 0:
        problems.append(f"{len(brand_new)} test(s) newly failing: {_names(brand_new)}")
    if missing:
        problems.append(
            f"{len(missing)} test(s) that passed on the base are missing or "
            f"skipped: {_names(missing)}"
        )
    if candidate.exit_code != 0 and not now.failed:
        said = exit_said(candidate)
        problems.append(said if ":" in said else f"{said} with no failing test to explain it")
    if problems:
        return Judgement(
            False,
            "; ".join(problems) + f": {candidate.command}",
            newly_failed=newly_failed,
            preexisting=preexisting,
            missing=missing,
        )
    note = f" ({len(preexisting)} test(s) already failing on the base)" if preexisting else ""
    return Judgement(True, f"passed{note}: {candidate.command}", newly_failed, preexisting, missing)


def reproduces(on_base: CommandOutcome) -> bool:
    """Whether a check's run on the base shows the problem: it failed there, or timed out (it
    may reproduce a hang)."""
    return on_base.exit_code != 0 or on_base.timed_out


def judge_check(on_base: CommandOutcome, on_candidate: CommandOutcome) -> Judgement:
    """A reproduction check: it must fail on the base and pass on the candidate.

    A check that passes on the base proves nothing, so it is flagged
    (``CHECK_DOES_NOT_REPRODUCE``) whatever the candidate did. A timeout on the base counts as
    failing there (it may reproduce a hang); on the candidate it fails.
    """
    newly, preexisting = _failures(on_candidate, on_base)
    if not reproduces(on_base):
        return Judgement(
            False,
            DOES_NOT_REPRODUCE_REASON,
            newly,
            preexisting,
            flag=CHECK_DOES_NOT_REPRODUCE,
        )
    if on_candidate.timed_out:
        return Judgement(False, f"check timed out: {on_candidate.command}", newly, preexisting)
    if on_candidate.exit_code != 0:
        failing = _sorted(newly + preexisting)
        detail = f"; failing: {_names(failing)}" if failing else ""
        return Judgement(
            False,
            f"check still fails (exit {on_candidate.exit_code}){detail}: {on_candidate.command}",
            newly,
            preexisting,
        )
    return Judgement(True, f"check reproduces and now passes: {on_candidate.command}")


def _failures(
    candidate: CommandOutcome, base: CommandOutcome
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The candidate's failing tests, split into (not failing on the base, failing there too)."""
    if candidate.report is None:
        return (), ()
    before = base.report.failed if base.report is not None else frozenset()
    failed = candidate.report.failed
    return _sorted(failed - before), _sorted(failed & before)


def _sorted(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(ids))


def _names(ids: tuple[str, ...]) -> str:
    """A short list of test ids for a reason line."""
    shown = ", ".join(ids[:MAX_NAMES_IN_REASON])
    more = len(ids) - MAX_NAMES_IN_REASON
    return f"{shown} and {more} more" if more > 0 else shown


# --- baseline cache ----------------------------------------------------------------------------


def baseline_key(commit: str, command: str) -> str:
    """A stable key for the base run of ``command`` at ``commit`` (pass a full commit id)."""
    payload = "\0".join(("orchardist-baseline", BASELINE_KEY_VERSION, commit.strip(), command))
    return hashlib.sha256(payload.encode()).hexdigest()
