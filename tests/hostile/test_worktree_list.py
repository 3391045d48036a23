"""A hostile agent adds worktrees: to its own repository (a private git directory, gone with
the attempt) and, through the path its alternates give away, to the user's. Afterwards the
user's ``git worktree list`` is what it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from support import Finished, git, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


def test_worktrees_an_agent_adds_never_reach_the_users_worktree_list(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: the user's own second worktree, and an agent that adds and locks worktrees in its
    # repository, then tries the user's: with git, and by writing an administration folder
    git(repo, "worktree", "add", "-q", "--detach", str(repo.parent / "users-own"))
    before = git(repo, "worktree", "list", "--porcelain")
    command = shell_scripts(
        adder=f"""
        git worktree add -q --detach "$TMPDIR/mine"
        git worktree lock --reason hostile "$TMPDIR/mine"
        user_git=$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")
        git --git-dir="$user_git" worktree add -q --detach {sync}/theirs 2>/dev/null || true
        git --git-dir="$user_git" worktree lock {sync}/theirs 2>/dev/null || true
        mkdir -p "$user_git/worktrees/fake" 2>/dev/null &&
          echo "$PWD/.git" > "$user_git/worktrees/fake/gitdir" &&
          echo hostile > "$user_git/worktrees/fake/locked" || true
        echo done > added.txt
        """
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "adder"
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the user's worktrees are the ones they made, even after git prunes what it can
    assert run.state is RunState.DONE, run.doc
    assert git(repo, "worktree", "list", "--porcelain") == before
    git(repo, "worktree", "prune")
    assert git(repo, "worktree", "list", "--porcelain") == before
    assert sorted(p.name for p in (repo / ".git" / "worktrees").iterdir()) == ["users-own"]
    assert_untouched(repo, ground)
