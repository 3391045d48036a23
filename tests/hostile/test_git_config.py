"""A hostile agent plants commands in its git configuration: a clean filter for every file, an
fsmonitor hook and a post-commit hook. None may ever run in orchardist's own git."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from support import Finished, toml_str, write_plan

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


def test_filters_fsmonitor_and_hooks_an_agent_configures_never_run_in_orchardist_s_git(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that configures its git (wherever that git keeps its config) to run a
    # marker-dropping command for filters, fsmonitor and hooks, and commits to prove they work
    command = shell_scripts(
        plant=f"""
        git config filter.evil.clean "touch {sync}/filter-ran; cat"
        git config core.fsmonitor "touch {sync}/fsmonitor-ran; true"
        hooks=$(git rev-parse --git-path hooks)
        mkdir -p "$hooks"
        printf '#!/bin/sh\\ntouch {sync}/hook-ran\\n' > "$hooks/post-commit"
        chmod +x "$hooks/post-commit"
        echo '* filter=evil' > .gitattributes
        echo code > code.txt
        """
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "plant"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: the work is merged, and no planted command ran (the markers are absent)
    assert run.state is RunState.DONE
    assert {"code.txt", ".gitattributes"} <= run.tree()
    assert sorted(p.name for p in sync.iterdir()) == []
