"""``[run] environment``: untracked folders of the checkout, checked where the plan loads."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchardist import load_plan
from run_support import ORCHARDIST
from support import git, write_plan

TASK = """
[agents.bot]
kind = "shell"
command = "true"

[[task]]
id = "t"
agent = "bot"
"""


def test_untracked_folders_load_as_the_run_s_environment(repo: Path) -> None:
    # Given: a plan naming an ignored folder, written two ways
    (repo / ".venv").mkdir()
    plan = write_plan(repo, '[run]\nenvironment = [".venv", "node_modules/"]\n' + TASK)

    # Then: both load, normalized
    assert load_plan(plan).run.environment == (".venv", "node_modules")


def test_tracked_absolute_and_escaping_folders_are_located_plan_errors(repo: Path) -> None:
    # Given: a tracked folder, an absolute path, one outside the repository and git's own
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("x = 1\n")
    git(repo, "add", "src")
    git(repo, "commit", "-qm", "src")
    plan = write_plan(
        repo, '[run]\nenvironment = ["src", "/opt/venv", "../x", ".git", ".venv"]\n' + TASK
    )

    # When: the plan is checked from the command line
    done = subprocess.run(
        [*ORCHARDIST, "validate", str(plan)], cwd=repo, capture_output=True, text=True, check=False
    )

    # Then: exit 2, every problem named with the file and the field, no traceback
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "Traceback" not in said
    assert said.count("run.environment") == 4, said
    for name in ("'src' holds files git tracks", "'/opt/venv'", "'../x' leaves", "'.git'"):
        assert name in said, said
    assert str(plan) in said
