"""The Verifier seam's contract, run against the shell verifier and its in-process fake.

Both get the same command texts: the shell verifier runs them with ``/bin/sh -c``, the fake
looks them up in a table of Python functions that do the same thing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchardist.confine.procs import CancelToken
from orchardist.seams import Verifier
from orchardist.verify.oracle import CHECK_DOES_NOT_REPRODUCE, CommandOutcome
from orchardist.verify.verifier import (
    CommandVerifier,
    MemoryBaselines,
    PythonCommands,
    Verdict,
    VerifyRequest,
)

BASE = "b" * 40
PASS = "true"
FAIL = "echo broken; exit 3"
HAS_FILE = "test -f done.txt"
PYTEST_FAILS = "exit 4; python -m pytest"  # a pytest command that left no report

PYTHON = PythonCommands(
    {
        PASS: lambda cwd: (0, ""),
        FAIL: lambda cwd: (3, "broken\n"),
        HAS_FILE: lambda cwd: (0 if (cwd / "done.txt").exists() else 1, ""),
        PYTEST_FAILS: lambda cwd: (4, ""),
    }
)


def make(kind: str, baselines: MemoryBaselines | None) -> Verifier:
    if kind == "shell":
        return CommandVerifier(baselines)
    return CommandVerifier(baselines, runner=PYTHON)


@pytest.fixture(params=["shell", "python"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def verify(
    verifier: Verifier,
    tree: Path,
    commands: tuple[str, ...],
    check: str | None = None,
    cancel: CancelToken | None = None,
    check_baseline: str | None = None,
) -> Verdict:
    tree.mkdir(exist_ok=True)
    request = VerifyRequest(
        commands=commands,
        check=check,
        baseline=BASE,
        workdir=".",
        cwd=tree,
        env={"PATH": "/usr/bin:/bin"},
        log=tree.parent / "verify.log",
        scratch=tree.parent / "scratch",
        deadline=time.monotonic() + 120,
        timeout_s=120,
        cancel=cancel,
        check_baseline=check_baseline,
    )
    return verifier.verify(request)


def test_no_commands_and_no_check_pass_unverified(kind: str, tmp_path: Path) -> None:
    verdict = verify(make(kind, None), tmp_path / "tree", ())
    assert (verdict.passed, verdict.verdict) == (True, "unverified")


def test_commands_that_pass_verify_the_tree(kind: str, tmp_path: Path) -> None:
    # Given: a tree with the file the second command looks for
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "done.txt").write_text("x")
    # When: both commands run
    verdict = verify(make(kind, MemoryBaselines({})), tmp_path / "tree", (PASS, HAS_FILE))
    # Then: verified, exit 0, and each command is in the log
    assert (verdict.passed, verdict.verdict, verdict.exit_code) == (True, "verified", 0)
    assert verdict.detail.startswith("2 verify command(s) passed")
    log = (tmp_path / "verify.log").read_text()
    assert f"$ {PASS}" in log and f"$ {HAS_FILE}" in log


def test_a_failing_command_fails_with_its_output_as_feedback(kind: str, tmp_path: Path) -> None:
    # Given: a baseline where the command failed too, but with no per-test report to compare
    baselines = MemoryBaselines({(BASE, FAIL): CommandOutcome(FAIL, 3, False, None)})
    # When: the failing command runs, then one that would pass
    verdict = verify(make(kind, baselines), tmp_path / "tree", (FAIL, PASS))
    # Then: failed on the first, its output is the feedback, and the command after it never
    # ran; the base was not asked: a command that runs no pytest has no per-test results
    # there either, so its failure fails whatever the base did
    assert (verdict.passed, verdict.verdict, verdict.exit_code) == (False, "failed", 3)
    assert verdict.detail == f"verify command failed (3): {FAIL}"
    assert "broken" in verdict.feedback
    assert baselines.asked == []
    assert f"$ {PASS}" not in (tmp_path / "verify.log").read_text()


def test_a_failing_command_that_runs_pytest_is_run_on_the_base_too(
    kind: str, tmp_path: Path
) -> None:
    # Given: a base where pytest's tests passed (no recorded outcome: it passed)
    baselines = MemoryBaselines({})
    # When: the command fails here without a per-test report
    verdict = verify(make(kind, baselines), tmp_path / "tree", (PYTEST_FAILS,))
    # Then: the base was asked (its results could count), and the failure fails
    assert baselines.asked == [(BASE, PYTEST_FAILS)]
    assert (verdict.passed, verdict.exit_code) == (False, 4)


def test_a_command_is_judged_in_the_tree_it_is_given(kind: str, tmp_path: Path) -> None:
    verdict = verify(make(kind, None), tmp_path / "tree", (HAS_FILE,))
    assert (verdict.passed, verdict.exit_code) == (False, 1)


def test_a_cancelled_verification_says_so(kind: str, tmp_path: Path) -> None:
    token = CancelToken()
    token.cancel("stop")
    try:
        verdict = verify(make(kind, None), tmp_path / "tree", (PASS,), cancel=token)
    finally:
        token.close()
    assert (verdict.passed, verdict.verdict) == (False, "cancelled")


def test_a_check_must_fail_on_the_base_and_pass_on_the_tree(kind: str, tmp_path: Path) -> None:
    # Given: a check that failed on the base
    baselines = MemoryBaselines({(BASE, PASS): CommandOutcome(PASS, 1, False, None)})
    # When: it passes on the tree
    verdict = verify(make(kind, baselines), tmp_path / "tree", (), check=PASS)
    # Then: the tree is verified, and the check is mentioned
    assert (verdict.passed, verdict.verdict) == (True, "verified")
    assert "and the check" in verdict.detail


def test_a_check_that_passes_on_the_base_is_flagged(kind: str, tmp_path: Path) -> None:
    # Given: no recorded baseline for the check, so it passed on the base
    baselines = MemoryBaselines({})
    verdict = verify(make(kind, baselines), tmp_path / "tree", (), check=PASS)
    assert (verdict.passed, verdict.flag) == (False, CHECK_DOES_NOT_REPRODUCE)
    assert baselines.asked == [(BASE, PASS)]


def test_a_check_is_judged_on_its_own_baseline_when_given(kind: str, tmp_path: Path) -> None:
    # Given: a check that passed on the base but failed on the base plus a reproduction
    with_repro = "r" * 40
    baselines = MemoryBaselines({(with_repro, PASS): CommandOutcome(PASS, 1, False, None)})
    # When: the tree is verified with the check judged there
    verdict = verify(
        make(kind, baselines), tmp_path / "tree", (), check=PASS, check_baseline=with_repro
    )
    # Then: the check reproduces there, and the base was not asked about it
    assert (verdict.passed, verdict.verdict) == (True, "verified")
    assert baselines.asked == [(with_repro, PASS)]


def test_a_check_that_passes_on_the_base_is_not_run_on_the_tree(kind: str, tmp_path: Path) -> None:
    # Given: a check that passed on the base (no recorded outcome: it passed)
    baselines = MemoryBaselines({})
    # When: a tree is verified with a command and that check
    verdict = verify(make(kind, baselines), tmp_path / "tree", (PASS,), check=HAS_FILE)
    # Then: flagged, and the check ran on the base only: whatever it does here, it fails
    assert (verdict.passed, verdict.flag) == (False, CHECK_DOES_NOT_REPRODUCE)
    assert verdict.detail == "check: check does not reproduce"
    log = (tmp_path / "verify.log").read_text()
    assert f"$ {PASS}" in log and f"$ {HAS_FILE}" not in log
