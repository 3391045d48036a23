"""An attempt that changes nothing is never verified: it fails ``no_changes`` unless allowed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist import load_plan
from orchardist.errors import PlanError
from orchardist.state.records import RunState
from support import Finished, git, toml_str, write_plan

RunPlan = Callable[..., Finished]


def plan_of(repo: Path, command: str, verify: str, extra: str = "") -> Path:
    return write_plan(
        repo,
        f"""
        [run]
        retry_backoff = "0.01s"

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        verify = {toml_str(verify)}
        {extra}
        """,
    )


def test_an_agent_that_changes_nothing_fails_no_changes_even_when_verify_passes(
    repo: Path, run_plan: RunPlan
) -> None:
    run = run_plan(plan_of(repo, "echo I fixed it", "true"))

    assert run.state is RunState.FAILED, run.doc
    (only,) = run.task("t")["attempts"]
    assert (only["state"], only["failure"]) == ("failed", "no_changes")
    assert "changed no file" in only["detail"]
    assert run.commits() == []


FAILING = "def test_broken():\n    assert False\n"
PYTEST = "python -m pytest -q -p no:cacheprovider test_broken.py"  # python: conftest


def with_failing_test(repo: Path) -> Path:
    """The repository with a test that already fails on the base."""
    (repo / "test_broken.py").write_text(FAILING)
    git(repo, "add", "test_broken.py")
    git(repo, "commit", "-q", "-m", "a failing test")
    return repo


def test_an_unchanged_tree_is_not_merged_as_already_failing_on_the_base(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: verify fails the same way on the base, and the agent changes nothing
    run = run_plan(plan_of(with_failing_test(repo), "true", PYTEST))

    # Then: no empty commit lands as "already failing on the base"
    assert run.state is RunState.FAILED, run.doc
    (only,) = run.task("t")["attempts"]
    assert only["failure"] == "no_changes"
    assert run.commits() == []


def test_with_allow_empty_an_unchanged_tree_is_verified_like_any_other(
    repo: Path, run_plan: RunPlan
) -> None:
    run = run_plan(plan_of(with_failing_test(repo), "true", PYTEST, "allow_empty = true"))

    # Then: judged against the base, which fails the same way: passed, as before
    assert run.state is RunState.DONE, run.task("t")
    (only,) = run.task("t")["attempts"]
    assert only["state"] == "merged"


def test_the_retry_prompt_says_the_previous_attempt_changed_nothing(
    repo: Path, run_plan: RunPlan
) -> None:
    command = 'if [ "$ORCHARDIST_ATTEMPT" = 2 ]; then printf %s "$ORCHARDIST_PROMPT" > p.txt; fi'
    run = run_plan(plan_of(repo, command, "true", "retries = 1"))

    assert run.state is RunState.DONE, run.doc
    first, second = run.task("t")["attempts"]
    assert first["failure"] == "no_changes"
    assert second["state"] == "merged"
    prompt = git(repo, "show", f"{run.run.branch}:p.txt")
    assert "without changing any file" in prompt


def test_allow_empty_must_be_true_or_false(repo: Path) -> None:
    plan = plan_of(repo, "true", "true", 'allow_empty = "yes"')

    with pytest.raises(PlanError) as caught:
        load_plan(plan)

    assert "allow_empty" in str(caught.value)
