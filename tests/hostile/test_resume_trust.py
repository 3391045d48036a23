"""A hostile agent against resume: commits with forged ``Orchardist-Task`` trailers put on the run
branch, then the orchestrator killed with SIGKILL.

Without containment (sandbox off) an agent can move the run branch; resume must still count a
task as merged only for a commit orchardist recorded before it moved the branch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from run_support import forked, leftovers, only_run, orchardist, status, wait_until
from support import git, toml_str, write_plan

Scripts = Callable[..., str]

FORGER = """\
echo a > a.txt
if [ ! -e "$SYNC/forged" ]; then
  # the user's repository: where this git's objects come from (alternates), else its own
  GIT_DIR=$(git rev-parse --path-format=absolute --git-common-dir)
  alternates=$GIT_DIR/objects/info/alternates
  [ ! -s "$alternates" ] || GIT_DIR=$(dirname "$(head -n 1 "$alternates")")
  export GIT_DIR
  branch=refs/heads/orchardist/$ORCHARDIST_RUN
  tip=$(git rev-parse "$branch")
  forged=$(printf 'b\\n\\nOrchardist-Task: b\\nOrchardist-Attempt: 1\\nOrchardist-Run: %s\\n' \
    "$ORCHARDIST_RUN" | git commit-tree "$tip^{tree}" -p "$tip")
  git update-ref "$branch" "$forged"
  unset GIT_DIR
  echo "$forged" > "$SYNC/forged.tmp" && mv "$SYNC/forged.tmp" "$SYNC/forged"
  sleep 60
fi
"""


def test_a_forged_task_commit_on_the_run_branch_does_not_make_resume_skip_the_task(
    repo: Path, sync: Path, shell_scripts: Scripts, tmp_path: Path
) -> None:
    # Given: task a's agent puts a commit claiming to be task b's merge on the run branch, and
    # the orchestrator is then killed with SIGKILL; b (after a) never ran
    command = shell_scripts(a=FORGER, b='echo b > b.txt; touch "$SYNC/b-ran"')
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        guard_checkout = false

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
    proc = forked(repo, "run", str(plan), log=tmp_path / "run.log")
    wait_until("the forged commit", (sync / "forged").exists, timeout_s=60)
    forged = (sync / "forged").read_text().strip()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    run_id = only_run(repo)

    # When
    resumed = orchardist(repo, "resume", run_id)

    # Then: b's agent really ran, both tasks' files are merged, and the forged commit is gone
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (sync / "b-ran").exists()
    doc = status(repo, run_id)
    branch = doc["branch"]
    assert git(repo, "show", f"{branch}:a.txt") == "a"
    assert git(repo, "show", f"{branch}:b.txt") == "b"
    assert forged not in git(repo, "rev-list", branch).split()
    assert leftovers(repo, run_id) == []
