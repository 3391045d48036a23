"""The bundled quickstart, end to end: nine tasks, one retry, one commit per task."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchardist.cli import main
from orchardist.plan.loading import load_plan
from quickstart_support import expected_branch, quickstart_repo
from support import git


@pytest.fixture
def quickstart(tmp_path: Path) -> Path:
    """The example copied into a repository of its own. The plan's commands say ``python``: on
    PATH, that is the interpreter running these tests, which has pytest (conftest)."""
    return quickstart_repo(tmp_path)


def run_suite(tree: Path) -> subprocess.CompletedProcess[str]:
    """The example's own test suite, run on ``tree``."""
    return subprocess.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_example_suite_passes_before_any_task(quickstart: Path) -> None:
    result = run_suite(quickstart)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_quickstart_ends_with_one_verified_commit_per_task(
    quickstart: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the quickstart as its own repository, and what its checkout looks like
    plan = load_plan(quickstart / "plan.toml")
    task_ids = [t.id for t in plan.tasks]
    head = git(quickstart, "rev-parse", "HEAD")
    branch = git(quickstart, "symbolic-ref", "HEAD")
    status = git(quickstart, "status", "--porcelain", "--untracked-files=all")

    # When it runs
    code = main(["run", str(quickstart / "plan.toml"), "--json"])
    out, err = capsys.readouterr()

    # Then every task is done, and exactly one needed its retry
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["state"] == "done"
    tasks = {t["id"]: t for t in doc["tasks"]}
    assert list(tasks) == task_ids
    assert {t["state"] for t in tasks.values()} == {"done"}
    retried = [t for t in tasks.values() if len(t["attempts"]) == 2]
    assert [t["id"] for t in retried] == ["stats"]
    first, second = retried[0]["attempts"]
    assert (first["state"], first["failure"]) == ("failed", "verify_failed")
    assert second["state"] == "merged"
    assert all(len(t["attempts"]) == 1 for t in tasks.values() if t["id"] != "stats")

    # And the run branch has one commit per task, each the task's recorded commit
    log = git(
        quickstart,
        "log",
        "--format=%H %(trailers:key=Orchardist-Task,valueonly,separator=%x2C)",
        f"{head}..{doc['branch']}",
    )
    commits: dict[str, str] = {}  # task id -> commit
    for line in log.splitlines():
        commit, task_id = line.split(" ", 1)
        commits[task_id] = commit
    assert sorted(commits) == sorted(task_ids)
    assert len(log.splitlines()) == len(task_ids)
    assert {task_id: tasks[task_id]["commit"] for task_id in commits} == commits

    # And its tree is the canned changes applied in dependency order, each commit titled as its
    # task: what the run on a Ray cluster must give too (tests/executors/test_ray.py)
    expected = expected_branch(tmp_path / "expected")
    assert git(quickstart, "rev-parse", f"{doc['branch']}^{{tree}}") == expected.tree
    subjects = git(quickstart, "log", "--format=%s", f"{head}..{doc['branch']}").splitlines()
    assert sorted(subjects) == sorted(expected.subjects)

    # And the branch's tree passes the example's whole suite
    tree = tmp_path / "branch-tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", doc["branch"]],
        cwd=quickstart,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    assert (tree / "textkit" / "cli.py").is_file()
    result = run_suite(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout

    # And the user's checkout is as it was, with no worktree left behind
    assert git(quickstart, "rev-parse", "HEAD") == head
    assert git(quickstart, "symbolic-ref", "HEAD") == branch
    assert git(quickstart, "status", "--porcelain", "--untracked-files=all") == status
    worktrees = git(quickstart, "worktree", "list", "--porcelain").splitlines()
    listed = [line for line in worktrees if line.startswith("worktree ")]
    assert listed == [f"worktree {quickstart.resolve()}"]
