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
from orchardist.engine.hooks import Hook, Hooks
from orchardist.engine.scheduler import Scheduler
from orchardist.state.eventlog import Event
from run_support import orchardist
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


def test_a_run_branch_deleted_while_no_orchestrator_runs_is_made_again_at_its_last_merge(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a run stopped right after a merged (b, after a, not merged yet), then its branch
    # deleted while no orchestrator drives it; each agent notes in $SYNC that it ran
    command = shell_scripts(
        a='echo a > a.txt; echo a >> "$SYNC/ran"\n', b='echo b > b.txt; echo b >> "$SYNC/ran"\n'
    )
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
    stopper = StopAfterMerge("a")
    first = run_plan(plan, hooks=Hooks([stopper]), on_scheduler=stopper.attach)
    assert first.state is RunState.INTERRUPTED
    merged_a = git(repo, "rev-parse", first.branch)
    # (b's agent may have started before the stop took effect: it is cut short, not merged)
    ran_first = (sync / "ran").read_text().split()
    assert ran_first[0] == "a" and ran_first[1:] in ([], ["b"])
    git(repo, "branch", "-D", first.branch)
    ground = user_ground(repo)

    # When
    resumed = orchardist(repo, "resume", first.run.id)

    # Then: the branch was made again at a's merge, and only b's agent ran again
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (sync / "ran").read_text().split() == [*ran_first, "b"]
    history = git(repo, "rev-list", "--first-parent", f"{first.run.base_commit}..{first.branch}")
    assert history.split()[1:] == [merged_a]
    assert git(repo, "show", f"{first.branch}:b.txt") == "b"
    assert_untouched(repo, ground)


class StopAfterMerge(Hook):
    """Asks the scheduler to stop once ``task`` merged (as Ctrl-C would)."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.scheduler: Scheduler | None = None

    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def on_event(self, event: Event) -> None:
        merged = event.kind == "merge" and event.data["state"] == "merged"
        if merged and event.task_id == self.task and self.scheduler is not None:
            self.scheduler.stop("stopped by the test")
