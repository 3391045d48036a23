"""The bundled quickstart as a repository of its own, and the branch a run of it must give.

The quickstart's agent is canned (``examples/quickstart/agent.py``): what each task writes is
fixed. So the run branch's tree is known without running orchardist: the base with every
task's final change applied, one task after another in dependency order. The local run
(tests/test_quickstart.py) and the run on a Ray cluster (tests/executors/test_ray.py) are both
compared with it, so each executor is compared with the other without running the quickstart
twice.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orchardist.plan.loading import load_plan
from support import git

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
FINAL_ATTEMPT = {"stats": 2}  # stats fails its first attempt on purpose; others pass at once


def quickstart_repo(folder: Path) -> Path:
    """The example as a repository of its own (one commit), in ``folder / "quickstart"``."""
    repo = folder / "quickstart"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "textkit 0.1.0")
    return repo


@dataclass(frozen=True)
class Expected:
    """What a run of the quickstart must leave on its branch."""

    tree: str  # the branch tip's tree
    subjects: list[str]  # one commit per task, its title (in the plan's order)


def expected_branch(folder: Path) -> Expected:
    """The quickstart's canned changes applied in dependency order, in ``folder`` (made here):
    the tree every run of it must end with, and its commits' subjects."""
    work = quickstart_repo(folder)
    plan = load_plan(work / "plan.toml")
    done: set[str] = set()
    for task in plan.tasks:  # the plan lists each task after those it depends on
        assert set(task.depends_on) <= done, f"{task.id} comes before what it depends on"
        attempt = FINAL_ATTEMPT.get(task.id, 1)
        subprocess.run(
            [sys.executable, "agent.py", task.id, str(attempt)],
            cwd=work,
            check=True,
            capture_output=True,
        )
        done.add(task.id)
    git(work, "add", "-A")
    return Expected(git(work, "write-tree"), [task.title for task in plan.tasks])
