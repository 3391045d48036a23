"""The merge queue after kill -9: an orchestrator killed while a batch of merged trees is being
verified, then resumed, lands every task once, on trees that were verified."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from run_support import leftovers, only_run, orchardist, status, task_trailers, wait_until
from support import git, toml_str, write_plan

Launch = Callable[..., subprocess.Popen[bytes]]


def test_a_run_killed_while_a_batch_is_verified_resumes_and_lands_each_task_once(
    repo: Path, sync: Path, launch: Launch
) -> None:
    # Given: four independent tasks; the verification of a tree holding three or more of their
    # files hangs the first time, leaving a marker; one of two files waits (bounded) until the
    # orchestrator has been killed, so that nothing lands beyond the first task meanwhile
    verify = (
        f'n=$(ls t | wc -l); if [ "$n" -ge 3 ] && [ ! -e {sync}/batch ]; then '
        f'touch {sync}/batch; sleep 60; elif [ "$n" -eq 2 ]; then i=0; '
        f'until [ -e {sync}/killed ] || [ "$i" -ge 1200 ]; do sleep 0.05; i=$((i + 1)); done; fi'
    )
    script = "\n".join(f'{t} = {{ write = {{ "t/{t}.txt" = "{t}\\n" }} }}' for t in "abcd")
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 4
        verify = {toml_str(verify)}

        [agents.fake]
        kind = "scripted"

        [agents.fake.script]
        {script}
        """
        + "".join(f'\n[[task]]\nid = "{t}"\nagent = "fake"\n' for t in "abcd"),
        commit=True,
    )
    proc = launch("run", str(plan))
    wait_until("a batch to be verified", (sync / "batch").exists, timeout_s=60)
    run_id = only_run(repo)
    # (the queue verifies ahead of the branch: three tasks' tree while the branch holds one)
    branch = f"orchardist/{run_id}"
    on_branch_at_kill = git(repo, "ls-tree", "--name-only", f"{branch}:t").split()

    # When: the orchestrator alone is killed -9 during that verification, and the run resumed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    (sync / "killed").touch()
    resumed = orchardist(repo, "resume", run_id, timeout_s=120)

    # Then: done; one commit per task on the branch, each task's once; the tree holds all four
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    assert doc["state"] == "done", doc
    base, branch = doc["base"], doc["branch"]
    assert sorted(task_trailers(repo, base, branch)) == ["a", "b", "c", "d"]
    files = git(repo, "ls-tree", "-r", "--name-only", branch, "t").split()
    assert files == [f"t/{t}.txt" for t in "abcd"]
    assert {t["commit"] for t in doc["tasks"]} == set(
        git(repo, "rev-list", f"{base}..{branch}").split()
    )
    assert leftovers(repo, run_id) == []
    assert len(on_branch_at_kill) == 1, on_branch_at_kill
