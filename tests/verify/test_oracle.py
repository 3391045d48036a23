"""The oracle: JUnit reports from real pytest runs, the baseline-aware rule, reproduction checks."""

from __future__ import annotations

import os
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchardist.verify import oracle
from orchardist.verify.oracle import (
    CHECK_DOES_NOT_REPRODUCE,
    CommandOutcome,
    Judgement,
    TestReport,
    baseline_key,
    judge,
    judge_check,
    looks_like_pytest,
    parse_junit,
    pytest_env,
)
from orchardist.verify.verifier import CommandRequest, run_one

PYTEST = "python -m pytest -q -p no:cacheprovider"  # python without pytest's plugins: conftest

TINY_TESTS = """\
def test_passes():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    """A small pytest project with its own rootdir, so no outer configuration applies."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def run_pytest(
    project: Path, junit: Path, command: str = PYTEST, base_env: dict[str, str] | None = None
) -> CommandOutcome:
    """Run ``command`` through the real verify path with pytest_env; parse what it left."""
    env = dict(os.environ if base_env is None else base_env)
    env.update(pytest_env(junit, env))
    log = project.parent / f"{project.name}.log"
    only, _, _ = run_one(CommandRequest(command, project, env, log, deadline=None))
    return CommandOutcome(command, only.exit_code, only.timed_out, parse_junit(junit))


# --- JUnit reports from real pytest runs -------------------------------------------------------


def test_a_pytest_run_inside_a_shell_command_writes_junit_that_parses(tmp_path: Path) -> None:
    """Given a project with one passing and one failing test, and a junit path needing quotes,
    when pytest runs inside a shell command with pytest_env,
    then the report names each test under the right outcome."""
    project = write_project(tmp_path / "proj", {"tests/test_mod.py": TINY_TESTS})
    junit = tmp_path / "junit dir" / "it's here.xml"

    outcome = run_pytest(project, junit, f"cd tests && cd .. && {PYTEST}")

    assert outcome.exit_code == 1
    assert outcome.report == TestReport(
        passed=frozenset({"tests.test_mod::test_passes"}),
        failed=frozenset({"tests.test_mod::test_fails"}),
    )


def test_existing_pytest_addopts_are_kept(tmp_path: Path) -> None:
    """Given PYTEST_ADDOPTS already selecting one test, the run honours it and still reports."""
    project = write_project(tmp_path / "proj", {"tests/test_mod.py": TINY_TESTS})
    junit = tmp_path / "out.xml"
    env = {**os.environ, "PYTEST_ADDOPTS": "-k passes"}

    outcome = run_pytest(project, junit, base_env=env)

    assert outcome.exit_code == 0
    assert outcome.report == TestReport(passed=frozenset({"tests.test_mod::test_passes"}))


def test_a_broken_test_module_does_not_hide_the_other_results(tmp_path: Path) -> None:
    """Given a module that fails to import next to a healthy one,
    then the import error is one failed entry and the healthy module's tests still ran."""
    project = write_project(
        tmp_path / "proj",
        {"tests/test_mod.py": TINY_TESTS, "tests/test_broken.py": "import not_a_module\n"},
    )

    outcome = run_pytest(project, tmp_path / "out.xml")

    assert outcome.exit_code != 0
    assert outcome.report is not None
    assert outcome.report.passed == {"tests.test_mod::test_passes"}
    assert outcome.report.failed == {"tests.test_mod::test_fails", "tests.test_broken"}


def test_a_real_base_and_candidates_are_judged_by_the_rule(tmp_path: Path) -> None:
    """Given a base where one test already fails,
    when a correct candidate and one that breaks a different, passing test both run,
    then the correct one is accepted and the other is rejected naming the broken test."""
    base_tests = """\
        from calc import add, mul

        def test_add():
            assert add(2, 2) == 4

        def test_mul():
            assert mul(2, 3) == 6

        def test_known_bug():
            assert add(0.1, 0.2) == 0.3
    """
    base = {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"}
    good = {"calc.py": base["calc.py"] + "\n\ndef sub(a, b):\n    return a - b\n"}
    bad = {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n"}
    runs = {}
    for name, files in (("base", base), ("good", good), ("bad", bad)):
        project = write_project(tmp_path / name, {**files, "tests/test_calc.py": base_tests})
        (project / "conftest.py").write_text("")  # puts the project root on sys.path
        runs[name] = run_pytest(project, tmp_path / f"{name}.xml")

    accepted = judge(runs["good"], runs["base"])
    rejected = judge(runs["bad"], runs["base"])

    assert accepted.passed, accepted.reason
    assert accepted.preexisting == ("tests.test_calc::test_known_bug",)
    assert not rejected.passed
    assert rejected.newly_failed == ("tests.test_calc::test_mul",)
    assert "tests.test_calc::test_mul" in rejected.reason


# --- parse_junit -------------------------------------------------------------------------------

TWO_SUITES = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testsuite name="a" tests="2">
    <testcase classname="pkg.test_a" name="test_ok" />
    <testcase classname="pkg.test_a" name="test_err"><error message="boom" /></testcase>
  </testsuite>
  <testsuite name="b" tests="2">
    <testcase classname="pkg.test_b" name="test_skip"><skipped /></testcase>
    <testcase classname="" file="web/test_b.py" name="test_free"><failure /></testcase>
  </testsuite>
</testsuites>
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            TWO_SUITES,
            TestReport(
                passed=frozenset({"pkg.test_a::test_ok"}),
                failed=frozenset({"pkg.test_a::test_err", "web/test_b.py::test_free"}),
                skipped=frozenset({"pkg.test_b::test_skip"}),
            ),
            id="testsuites root, several suites, file fallback",
        ),
        pytest.param(
            '<testsuite><testcase classname="m" name="t" /></testsuite>',
            TestReport(passed=frozenset({"m::t"})),
            id="testsuite root",
        ),
        pytest.param(
            '<testsuite><testcase classname="m" name="t" />'
            '<testcase classname="m" name="t"><failure /></testcase></testsuite>',
            TestReport(failed=frozenset({"m::t"})),
            id="a test reported twice counts as failed if either entry failed",
        ),
        pytest.param(
            '<testsuite><testcase classname="m" name="t" />'
            '<testcase classname="m" name="t"><skipped /></testcase></testsuite>',
            TestReport(skipped=frozenset({"m::t"})),
            id="passed then skipped counts as skipped",
        ),
        pytest.param(
            '<testsuite><testcase classname="m" /></testsuite>',
            TestReport(),
            id="a nameless testcase is ignored",
        ),
        pytest.param("<testsuites />", TestReport(), id="no tests is an empty report"),
        pytest.param("", None, id="empty file"),
        pytest.param(TWO_SUITES[:200], None, id="truncated"),
        pytest.param("this is not xml", None, id="not xml"),
        pytest.param("<html><testcase name='t' /></html>", None, id="not junit"),
    ],
)
def test_parse_junit(tmp_path: Path, text: str, expected: TestReport | None) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(text)

    assert parse_junit(path) == expected


def test_parse_junit_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert parse_junit(tmp_path / "never-written.xml") is None


# --- pytest_env and looks_like_pytest ----------------------------------------------------------


def test_pytest_env_quotes_the_path_so_pytest_splits_it_back(tmp_path: Path) -> None:
    junit = tmp_path / "a dir" / "x'y.xml"

    value = pytest_env(junit, {})["PYTEST_ADDOPTS"]

    assert shlex.split(value) == [f"--junitxml={junit}", "--continue-on-collection-errors"]


def test_pytest_env_appends_to_existing_options(tmp_path: Path) -> None:
    value = pytest_env(tmp_path / "j.xml", {"PYTEST_ADDOPTS": " -x -p no:cacheprovider "})

    assert shlex.split(value["PYTEST_ADDOPTS"])[:3] == ["-x", "-p", "no:cacheprovider"]


def test_pytest_env_makes_a_relative_path_absolute() -> None:
    value = pytest_env(Path("out/j.xml"), {})["PYTEST_ADDOPTS"]

    assert shlex.split(value)[0] == f"--junitxml={Path.cwd() / 'out/j.xml'}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("pytest", True),
        ("pytest -q tests/", True),
        ("python -m pytest -q", True),
        ("python3.12 -mpytest", True),
        ("/venv/bin/pytest -x", True),
        ('"/opt/my tools/pytest" -x', True),
        ("uv run pytest", True),
        ("coverage run -m pytest && coverage report", True),
        ("ruff check . && py.test", True),
        ("cd sub;pytest", True),
        ("make test", False),
        ("npm test", False),
        ("python -m unittest", False),
        ("python tests/test_pytest_helpers.py", False),
        ("python -m pytest_cov_report", False),
        ("echo 'unbalanced", False),
    ],
)
def test_looks_like_pytest(command: str, expected: bool) -> None:
    assert looks_like_pytest(command) is expected


# --- judge -------------------------------------------------------------------------------------

CMD = "pytest -q"


def outcome(
    exit_code: int = 0,
    passed: str = "",
    failed: str = "",
    skipped: str = "",
    *,
    timed_out: bool = False,
    report: bool = True,
    command: str = CMD,
) -> CommandOutcome:
    """A run of ``command``; test ids are given as space-separated words."""
    made = TestReport(
        frozenset(passed.split()), frozenset(failed.split()), frozenset(skipped.split())
    )
    return CommandOutcome(command, exit_code, timed_out, made if report else None)


BASE = outcome(1, passed="a b", failed="known")


@dataclass(frozen=True)
class Expect:
    """What a judgement should say: the verdict, a phrase of its reason, and the tests named."""

    passed: bool
    says: str
    newly_failed: str = ""
    preexisting: str = ""
    missing: str = ""


@pytest.mark.parametrize(
    ("candidate", "baseline", "expect"),
    [
        pytest.param(
            outcome(1, passed="a b", failed="known"),
            BASE,
            Expect(True, "1 test(s) already failing on the base", preexisting="known"),
            id="a pre-existing failure is tolerated",
        ),
        pytest.param(
            outcome(1, passed="a", failed="b known"),
            BASE,
            Expect(False, "passed on the base now fail: b", newly_failed="b", preexisting="known"),
            id="breaking a different, previously passing test is rejected",
        ),
        pytest.param(
            outcome(1, passed="a", failed="known"),
            BASE,
            Expect(False, "missing or skipped: b", preexisting="known", missing="b"),
            id="deleting a previously passing test is rejected",
        ),
        pytest.param(
            outcome(1, passed="a", failed="known", skipped="b"),
            BASE,
            Expect(False, "missing or skipped: b", preexisting="known", missing="b"),
            id="skipping a previously passing test is rejected",
        ),
        pytest.param(
            outcome(0, passed="a b known"),
            BASE,
            Expect(True, "passed"),
            id="fixing the known failure passes",
        ),
        pytest.param(
            outcome(0, passed="a b c"),
            BASE,
            Expect(True, "passed"),
            id="new passing tests are fine",
        ),
        pytest.param(
            outcome(1, passed="a b", failed="known new"),
            BASE,
            Expect(False, "newly failing: new", newly_failed="new", preexisting="known"),
            id="a new test that fails is rejected",
        ),
        pytest.param(
            outcome(0, passed="a", failed="b"),
            BASE,
            Expect(False, "now fail: b", newly_failed="b"),
            id="a regression is rejected even when the command exits 0",
        ),
        pytest.param(
            outcome(2, passed="a b"),
            BASE,
            Expect(False, "exit 2 with no failing test to explain it"),
            id="a non-zero exit that no failing test explains is rejected",
        ),
        pytest.param(
            outcome(0, passed="a b", timed_out=True),
            BASE,
            Expect(False, "timed out"),
            id="a timeout is rejected",
        ),
        pytest.param(
            outcome(0, report=False),
            BASE,
            Expect(False, "no test report from the candidate"),
            id="no report from the candidate when the base had passing tests is rejected",
        ),
        pytest.param(
            outcome(1, report=False),
            outcome(1, report=False),
            Expect(False, "exit 1"),
            id="a non-pytest non-zero exit is rejected even if the base failed too",
        ),
        pytest.param(
            outcome(0, report=False),
            outcome(1, report=False),
            Expect(True, "passed"),
            id="a non-pytest zero exit passes",
        ),
        pytest.param(
            outcome(0, passed="a"),
            None,
            Expect(True, "passed"),
            id="no baseline and exit 0 passes",
        ),
        pytest.param(
            outcome(1, passed="a", failed="x y"),
            None,
            Expect(False, "exit 1; failing: x, y", newly_failed="x y"),
            id="no baseline and a non-zero exit fails naming the failures",
        ),
        pytest.param(
            outcome(0, passed="a"),
            outcome(1, failed="a"),
            Expect(True, "passed"),
            id="a baseline with no passing tests cannot be regressed",
        ),
    ],
)
def test_judge(candidate: CommandOutcome, baseline: CommandOutcome | None, expect: Expect) -> None:
    verdict = judge(candidate, baseline)

    assert verdict.passed is expect.passed, verdict.reason
    assert expect.says in verdict.reason
    assert verdict.newly_failed == tuple(expect.newly_failed.split())
    assert verdict.preexisting == tuple(expect.preexisting.split())
    assert verdict.missing == tuple(expect.missing.split())
    assert verdict.flag is None


NO_TESTS = (
    "exit 5: pytest collected no tests: is the path right? (commands run in the task's workdir,"
    " by default the plan's folder)"
)


@pytest.mark.parametrize(
    ("candidate", "baseline", "reason"),
    [
        pytest.param(
            outcome(1, passed="a b", failed="known"),
            BASE,
            "passed (1 test(s) already failing on the base): pytest -q",
            id="a tolerated failure is counted",
        ),
        pytest.param(outcome(0, passed="a b known"), BASE, "passed: pytest -q", id="a pass"),
        pytest.param(
            outcome(1, failed="a"),
            BASE,
            "1 test(s) that passed on the base now fail: a; 1 test(s) that passed on the base"
            " are missing or skipped: b: pytest -q",
            id="each problem once, in order",
        ),
        pytest.param(
            outcome(2, passed="a b"),
            BASE,
            "exit 2 with no failing test to explain it: pytest -q",
            id="an exit no failing test explains",
        ),
        pytest.param(
            outcome(5, passed="a b"),
            BASE,
            f"{NO_TESTS}: pytest -q",
            id="pytest's own exit says what it means, nothing added",
        ),
        pytest.param(
            outcome(1, passed="a", failed="x y"),
            None,
            "exit 1; failing: x, y: pytest -q",
            id="no baseline: the failing tests are named",
        ),
        pytest.param(outcome(1, report=False), None, "exit 1: pytest -q", id="no report"),
        pytest.param(
            outcome(5, report=False, command="python -m pytest tests/nothing"),
            None,
            f"{NO_TESTS}: python -m pytest tests/nothing",
            id="pytest's exit 5 without a report",
        ),
        pytest.param(
            outcome(5, report=False, command="make test"),
            None,
            "exit 5: make test",
            id="exit 5 of another program means nothing in particular",
        ),
    ],
)
def test_a_judgements_reason_reads_exactly(
    candidate: CommandOutcome, baseline: CommandOutcome | None, reason: str
) -> None:
    # The reason is what the attempt's detail and the next attempt's feedback say.
    assert judge(candidate, baseline).reason == reason


def test_judge_refuses_a_baseline_of_another_command() -> None:
    with pytest.raises(ValueError, match="baseline is for"):
        judge(outcome(0), outcome(0, command="pytest -x"))


def test_a_long_list_of_failures_is_shortened_in_the_reason() -> None:
    many = " ".join(f"t{i:02}" for i in range(12))

    verdict = judge(outcome(1, failed=many), None)

    assert len(verdict.newly_failed) == 12
    assert "t04 and 7 more" in verdict.reason
    assert "t05" not in verdict.reason


# --- judge_check -------------------------------------------------------------------------------

CHECK = "python repro.py"


def check(exit_code: int, *, timed_out: bool = False, failed: str = "") -> CommandOutcome:
    return outcome(
        exit_code, failed=failed, timed_out=timed_out, command=CHECK, report=bool(failed)
    )


@pytest.mark.parametrize(
    ("on_base", "on_candidate", "expected"),
    [
        pytest.param(
            check(1),
            check(0),
            Judgement(True, f"check reproduces and now passes: {CHECK}"),
            id="fails on the base, passes on the candidate",
        ),
        pytest.param(
            check(0),
            check(0),
            Judgement(False, "check does not reproduce", flag=CHECK_DOES_NOT_REPRODUCE),
            id="passes on the base: flagged",
        ),
        pytest.param(
            check(0),
            check(1),
            Judgement(False, "check does not reproduce", flag=CHECK_DOES_NOT_REPRODUCE),
            id="passes on the base: flagged whatever the candidate did",
        ),
        pytest.param(
            check(1, failed="t"),
            check(1, failed="t"),
            Judgement(
                False, f"check still fails (exit 1); failing: t: {CHECK}", preexisting=("t",)
            ),
            id="fails on both",
        ),
        pytest.param(
            check(0, timed_out=True),
            check(0),
            Judgement(True, f"check reproduces and now passes: {CHECK}"),
            id="a hang on the base counts as reproducing",
        ),
        pytest.param(
            check(1),
            check(0, timed_out=True),
            Judgement(False, f"check timed out: {CHECK}"),
            id="a timeout on the candidate fails",
        ),
    ],
)
def test_judge_check(
    on_base: CommandOutcome, on_candidate: CommandOutcome, expected: Judgement
) -> None:
    assert judge_check(on_base, on_candidate) == expected


# --- baseline_key ------------------------------------------------------------------------------


def test_baseline_key_is_pinned() -> None:
    # Pinned: the key is stored; changing it silently would orphan every cached baseline.
    assert baseline_key("a" * 40, "pytest -q") == baseline_key("a" * 40, "pytest -q")
    assert baseline_key("a" * 40, "pytest -q") == (
        "11269833c5c2945125d84c637b46aacfb6e7c386ad0a08370ff652063181bc4d"
    )


def test_baseline_key_separates_commit_and_command() -> None:
    keys = {
        baseline_key("abc", "pytest"),
        baseline_key("abd", "pytest"),
        baseline_key("abc", "pytest -q"),
        baseline_key("ab", "cpytest"),
    }
    assert len(keys) == 4


def test_all_names_are_exported() -> None:
    assert all(hasattr(oracle, name) for name in oracle.__all__)
