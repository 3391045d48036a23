"""Keeping the run branch green: regression checks after merges, a bisect, and a re-run.

Two tasks that each pass their own verify but break the suite together: ``pin_limit`` adds a
test that ``LIMIT`` is 10, ``raise_limit`` raises it to 20 and tests only its own change. Each
task's verify passes on its own base; ``[run] regression`` (the whole suite) fails once both are
merged. The scripted agent of ``raise_limit`` is incompatible on attempt 1 and compatible on
attempt 2 (it adds ``MAX_LIMIT`` in a new module instead), so the re-run after the bisect can
succeed.

The suite is run by a small runner committed in the repository (``run_tests.py``), not by pytest:
what is shown here is the bisect, the rewind and the re-run, which read only the commands' exit
codes and output; a pytest run costs ~0.4 s of CPU and each test here runs a dozen suites.
Only the first test's regression check is pytest: its events name the failing tests from
pytest's per-test report.
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e_support import (
    assert_nothing_left,
    toml_files,
)
from orchardist import RunState
from support import Finished, git, make_repo, write_plan

RunPlan = Callable[..., Finished]

SUITE = "python run_tests.py"
PYTEST = "python -m pytest -q -p no:cacheprovider"
RUN_TESTS = """\
import pathlib, runpy, sys

args = sys.argv[1:]
word = args[args.index("-k") + 1] if "-k" in args else ""
everything = sorted(map(str, pathlib.Path("tests").glob("test_*.py")))
files = [a for a in args if a.endswith(".py")] or everything
passed, failed = 0, []
for path in files:
    for name, test in runpy.run_path(path).items():
        if name.startswith("test_") and word in name:
            try:
                test()
                passed += 1
            except Exception as exc:
                failed.append(name)
                print(f"FAILED {path}::{name} - {exc!r}")
print(f"{len(failed)} failed, {passed} passed" if failed else f"{passed} passed")
sys.exit(1 if failed else 0 if passed else 5)
"""
PIN = toml_files(
    {
        "tests/test_limit.py": (
            "from config import LIMIT\n\n\ndef test_limit_is_ten():\n    assert LIMIT == 10\n"
        )
    }
)
RAISE_BREAKING = toml_files(
    {
        "config.py": "LIMIT = 20\n",
        "tests/test_raise.py": (
            "from config import LIMIT\n\n\ndef test_raised():\n    assert LIMIT >= 20\n"
        ),
    }
)
RAISE_COMPATIBLE = toml_files(  # leaves LIMIT alone: a new, larger limit beside it
    {
        "limits.py": "from config import LIMIT\n\nMAX_LIMIT = 2 * LIMIT\n",
        "tests/test_max_limit.py": (
            "from limits import MAX_LIMIT\n\n\ndef test_raised():\n    assert MAX_LIMIT >= 20\n"
        ),
    }
)
DOCS = toml_files(
    {
        "docs.py": "TEXT = 'limits'\n",
        "tests/test_docs.py": "from docs import TEXT\n\n\ndef test_docs():\n    assert TEXT\n",
    }
)
TASKS = f"""
[run]
max_parallel = 1
regression = "{SUITE}"
# more [run] keys here

[agents.fake]
kind = "scripted"
[agents.fake.script]
pin_limit = {{ write = {PIN} }}
raise_limit = [{{ write = {RAISE_BREAKING} }}, {{ write = {RAISE_COMPATIBLE} }}]
docs = {{ write = {DOCS} }}

[[task]]
id = "pin_limit"
verify = "{SUITE} tests/test_limit.py"

[[task]]
id = "raise_limit"
verify = "{SUITE} -k raised"  # its own tests, whatever file they are in
"""


def with_run_keys(keys: str) -> str:
    """The two tasks' plan with more ``[run]`` keys."""
    return TASKS.replace("# more [run] keys here", keys)


@pytest.fixture
def limit_repo(tmp_path: Path) -> Iterator[Path]:
    """A repository with a constant, a passing suite and the runner of its suite."""
    yield make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "__pycache__/\n.pytest_cache/\n",
            "config.py": "LIMIT = 10\n",
            "run_tests.py": RUN_TESTS,
            "tests/test_smoke.py": "def test_smoke():\n    assert True\n",
        },
    )


def suite_on(run: Finished, commit: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run the whole suite on a commit's tree, exported outside every checkout."""
    archive = folder.with_suffix(".tar")
    git(run.root, "archive", "--format=tar", "-o", str(archive), commit)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return subprocess.run(
        ["python", "run_tests.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )


def merged_commits(run: Finished) -> list[tuple[str, int, str]]:
    """Every merge onto the run branch, in order: (task, attempt, commit)."""
    return [
        (e.task_id or "", e.attempt or 0, str(e.data["commit"]))
        for e in run.events("merge")
        if e.data["state"] == "merged"
    ]


def is_on_branch(run: Finished, commit: str) -> bool:
    code = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit, run.branch], cwd=run.root, check=False
    ).returncode
    return code == 0


# -- after every merge ------------------------------------------------------------------------


def test_a_regression_is_bisected_to_the_later_merge_which_is_taken_off_and_rerun(
    limit_repo: Path, run_plan: RunPlan, tmp_path: Path
) -> None:
    # Given: the two tasks, one after the other, with a regression check (pytest's whole
    # suite) after every merge
    plan = write_plan(
        limit_repo, TASKS.replace(f'regression = "{SUITE}"', f'regression = "{PYTEST}"')
    )
    head = git(limit_repo, "rev-parse", "HEAD")

    # When
    run = run_plan(plan)

    # Then: the check after raise_limit's first merge failed, named it, and its re-run fixed it
    assert run.state is RunState.DONE, run.doc
    merges = merged_commits(run)
    assert [(task, n) for task, n, _ in merges] == [
        ("pin_limit", 1),
        ("raise_limit", 1),
        ("raise_limit", 2),
    ]
    later_merge = merges[1][2]
    regression = [(e.task_id, e.data["state"]) for e in run.events("regression")]
    assert regression == [
        (None, "checking"),
        (None, "passed"),
        (None, "checking"),
        (None, "failed"),
        ("raise_limit", "culprit"),
        (None, "checking"),
        (None, "passed"),
    ]
    failed = next(e for e in run.events("regression") if e.data["state"] == "failed")
    assert failed.data["commit"] == later_merge
    assert "test_limit_is_ten" in failed.data["detail"]
    culprit = next(e for e in run.events("regression") if e.data["state"] == "culprit")
    assert culprit.data["commit"] == later_merge
    assert later_merge[:12] in culprit.data["reason"]

    # And: the branch holds pin_limit and the compatible re-run, and its suite is green
    task = run.task("raise_limit")
    assert task["winner"] == {"candidate": 0, "attempt": 2}
    assert [a["n"] for a in task["attempts"]] == [1, 2]
    assert run.commits() == [run.task("pin_limit")["commit"], task["commit"]]
    assert not is_on_branch(run, later_merge)
    assert run.read("config.py") == "LIMIT = 10"
    assert "tests/test_raise.py" not in run.tree()  # attempt 1's test left with its commit
    green = suite_on(run, run.branch, tmp_path / "tip")
    assert green.returncode == 0, green.stdout
    assert "3 passed" in green.stdout

    # And: the re-run was told why
    prompt = Path(task["attempts"][1]["log"]).with_suffix(".prompt.md").read_text()
    assert "the regression check failed after this task was merged" in prompt
    assert "test_limit_is_ten" in prompt

    # And: the bisect and checks never touched the user's checkout
    assert git(limit_repo, "rev-parse", "HEAD") == head
    assert git(limit_repo, "branch", "--show-current") == "main"
    assert_nothing_left(run)


# -- every K merges -----------------------------------------------------------------------------


def test_with_regression_every_2_the_check_waits_for_two_merges_then_bisects_them(
    limit_repo: Path, run_plan: RunPlan, tmp_path: Path
) -> None:
    plan = write_plan(limit_repo, with_run_keys("regression_every = 2"))

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    merges = merged_commits(run)
    assert [(task, n) for task, n, _ in merges] == [
        ("pin_limit", 1),
        ("raise_limit", 1),
        ("raise_limit", 2),
    ]
    events = run.events("regression")
    assert [e.data["state"] for e in events] == [
        "checking",
        "failed",
        "culprit",
        "checking",
        "passed",
    ]
    # no check after the first merge: the first one ran on the second merge
    assert events[0].data["commit"] == merges[1][2]
    # the bisect had two merges to search and needed one probe (pin_limit's, which passed)
    assert events[2].task_id == "raise_limit"
    assert events[2].data["commit"] == merges[1][2]
    assert events[2].data["probes"] == 1
    assert events[3].data["commit"] == merges[2][2] == run.task("raise_limit")["commit"]
    assert suite_on(run, run.branch, tmp_path / "tip").returncode == 0
    assert_nothing_left(run)


def test_a_merged_dependent_of_the_culprit_is_reverified_on_the_new_tip_not_rerun(
    limit_repo: Path, run_plan: RunPlan, tmp_path: Path
) -> None:
    # Given: "docs" depends on both and is merged after them, before the only check
    plan = write_plan(
        limit_repo,
        with_run_keys("regression_every = 3")
        + f"""
[[task]]
id = "docs"
depends_on = ["pin_limit", "raise_limit"]
verify = "{SUITE} tests/test_docs.py"
""",
    )

    run = run_plan(plan)

    # Then: the bisect over three merges named raise_limit (two probes); docs' patch was put
    # back on top of the re-run after being verified again, without running its agent again
    assert run.state is RunState.DONE, run.doc
    merges = merged_commits(run)
    assert [(task, n) for task, n, _ in merges] == [
        ("pin_limit", 1),
        ("raise_limit", 1),
        ("docs", 1),
        ("raise_limit", 2),
        ("docs", 1),
    ]
    culprit = next(e for e in run.events("regression") if e.data["state"] == "culprit")
    assert (culprit.task_id, culprit.data["commit"]) == ("raise_limit", merges[1][2])
    assert culprit.data["probes"] == 2
    assert [a["n"] for a in run.task("docs")["attempts"]] == [1]
    assert [e.data["state"] for e in run.events("merge", "docs")] == [
        "merged",
        "verifying",
        "merged",
    ]
    assert run.commits() == [
        run.task("pin_limit")["commit"],
        run.task("raise_limit")["commit"],
        run.task("docs")["commit"],
    ]
    assert not is_on_branch(run, merges[1][2])
    assert not is_on_branch(run, merges[2][2])
    # And: what the culprit's first attempt did is gone from the branch, which is green
    assert run.read("config.py") == "LIMIT = 10"
    assert "tests/test_raise.py" not in run.tree()
    green = suite_on(run, run.branch, tmp_path / "tip")
    assert green.returncode == 0, green.stdout
    assert_nothing_left(run)
