"""The run branch deleted while the run goes on: the orchestrator puts it back where it left it
(a commit the store recorded) and finishes the run; nothing crashes, nothing stays ``running``.

The branch is deleted by real git from a hook of the test, between two steps of the run: the
agents themselves can no longer reach the user's repository.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist import RunState
from orchardist.hooks import Hook, Hooks
from orchardist.records import Event
from support import Finished, git, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


class DeleteBranchAfterMerge(Hook):
    """Deletes the run branch (``git branch -D``) once ``task`` merged."""

    def __init__(self, repo: Path, task: str) -> None:
        self.repo, self.task, self.deleted = repo, task, False

    def on_event(self, event: Event) -> None:
        if event.kind == "merge" and event.task_id == self.task and event.data["state"] == "merged":
            git(self.repo, "branch", "-D", f"orchardist/{event.run_id}")
            self.deleted = True


@pytest.mark.parametrize("after", ["a", "b"], ids=["before_the_next_merge", "after_the_last"])
def test_a_run_branch_deleted_mid_run_is_put_back_and_the_run_finishes(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan, after: str
) -> None:
    # Given: two tasks, b after a, and the run branch deleted right after a (b still to merge)
    # or b (nothing left to merge) merged
    command = shell_scripts(a="echo a > a.txt\n", b="echo b > b.txt\n")
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "a"

        [[task]]
        id = "b"
        depends_on = ["a"]
        """,
    )
    deleter = DeleteBranchAfterMerge(repo, after)

    ground = user_ground(repo)
    # When
    run = run_plan(plan, hooks=Hooks([deleter]))

    # Then: the branch is there again, holding both tasks' commits on the base, one each
    assert deleter.deleted
    history = git(repo, "rev-list", "--first-parent", f"{run.run.base_commit}..{run.branch}")
    assert len(history.split()) == 2
    assert git(repo, "show", f"{run.branch}:a.txt") == "a"
    assert git(repo, "show", f"{run.branch}:b.txt") == "b"
    # and the run ended done in the store: nothing left running
    assert run.state is RunState.DONE
    assert run.ws.store.runs()[0].state is RunState.DONE
    assert_untouched(repo, ground)
