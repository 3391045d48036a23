"""Resuming a debug pipeline after kill -9: stages that finished are never run again, and the
fix is merged once.

The orchestrator is a real ``orchardist`` process, SIGKILLed alone (its agents are orphaned, as
in tests/runs/test_resume.py) while a stage's agent waits for a file that never comes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline_support import (
    AUDIT_SH,
    BUG,
    FIX_SH,
    LOCALIZE_SH,
    REPRODUCE_SH,
    add_project,
    stage_plan,
    tasks_of,
)
from run_support import has_run, leftovers, only_run, orchardist, status, task_trailers, wait_until
from support import git, toml_str

Launch = Callable[..., subprocess.Popen[bytes]]

# Localize's first attempt, and the fix's first round, wait for a release that never comes.
LOCALIZE_WAITS = (
    '[ "$ORCHARDIST_ATTEMPT" = 1 ] && { touch "$SYNC/localize-started"; '
    'until [ -e "$SYNC/never" ]; do sleep 0.05; done; }\n' + LOCALIZE_SH
)
FIX_WAITS = (
    'if [ "$ORCHARDIST_ATTEMPT" -le 3 ]; then touch "$SYNC/fix-started-$ORCHARDIST_CANDIDATE"; '
    'until [ -e "$SYNC/never" ]; do sleep 0.05; done; fi\n' + FIX_SH
)


def attempts_by_task(doc: dict[str, Any]) -> dict[str, list[tuple[int, str]]]:
    return {t["id"]: [(a["n"], a["state"]) for a in t["attempts"]] for t in doc["tasks"]}


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_a_debug_pipeline_killed_between_stages_and_during_fix_candidates_resumes_without_rerun(
    repo: Path,
    shell_scripts: Callable[..., str],
    sync: Path,
    launch: Launch,
) -> None:
    # Given: a debug pipeline whose localize stage (after reproduce and audit finished) hangs
    add_project(repo)
    plan = stage_plan(
        repo,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "debug"
        candidates = 3
        stages.reproduce.retries = 1
        stages.localize.retries = 1
        """,
        **{
            "bug.reproduce": REPRODUCE_SH,
            "bug.audit": AUDIT_SH,
            "bug.localize": LOCALIZE_WAITS,
            "bug": FIX_WAITS,
        },
    )

    # When: the orchestrator is SIGKILLed while localize runs
    first = launch("run", str(plan))
    wait_until("localize to start", (sync / "localize-started").exists, timeout_s=60)
    run_id = only_run(repo)
    kill9(first)
    before = attempts_by_task(status(repo, run_id))
    assert before["bug.reproduce"] == [(1, "failed"), (2, "merged")]
    assert before["bug.audit"] == [(1, "merged")]

    # and the resumed run is SIGKILLed again while the three fix candidates run
    second = launch("resume", run_id)
    wait_until(
        "the fix candidates to start",
        lambda: all((sync / f"fix-started-{k}").exists() for k in range(3)),
        timeout_s=60,
    )
    kill9(second)
    middle = attempts_by_task(status(repo, run_id))

    # and it is resumed to its end
    resumed = orchardist(repo, "resume", run_id, timeout_s=180)

    # Then: the run is done; the stages that had finished were not run again
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    after = attempts_by_task(doc)
    assert doc["state"] == "done"
    assert after["bug.reproduce"] == before["bug.reproduce"]
    assert after["bug.audit"] == before["bug.audit"]
    assert middle["bug.localize"] == [(1, "interrupted"), (2, "merged")]
    assert after["bug.localize"] == middle["bug.localize"]
    # the interrupted candidates ran again, and the minimal one landed
    assert after["bug"][:3] == [(1, "interrupted"), (2, "interrupted"), (3, "interrupted")]
    assert sorted(state for _, state in after["bug"][3:]) == ["failed", "merged", "passed"]
    # and the fix was merged once: one commit, holding the test and the fix
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["bug"]
    changed = git(repo, "diff", "--name-only", doc["base"], doc["branch"]).split()
    assert sorted(changed) == ["calc.py", "tests/test_bug.py"]
    merged = [
        e
        for e in map(json.loads, orchardist(repo, "events", run_id).stdout.splitlines())
        if e["kind"] == "merge" and e["data"].get("state") == "merged"
    ]
    assert [e["task"] for e in merged].count("bug") == 1
    handoffs = {t["id"]: t.get("handoff") for t in tasks_of({"tasks": doc["tasks"]}).values()}
    assert handoffs["bug.localize"] == {"files": ["calc.py"], "symbols": ["mean"]}
    assert leftovers(repo, run_id) == []


def task_state(repo: Path, run_id: str, task_id: str) -> str:
    return next(t["state"] for t in status(repo, run_id)["tasks"] if t["id"] == task_id)


@pytest.mark.slow
def test_a_debug_pipeline_killed_at_each_stage_boundary_resumes_without_rerun(
    repo: Path,
    shell_scripts: Callable[..., str],
    launch: Launch,
) -> None:
    # Given: a debug pipeline whose stages all succeed
    add_project(repo)
    plan = stage_plan(
        repo,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "debug"
        candidates = 3
        stages.reproduce.retries = 1
        """,
        **{
            "bug.reproduce": REPRODUCE_SH,
            "bug.audit": AUDIT_SH,
            "bug.localize": LOCALIZE_SH,
            "bug": FIX_SH,
        },
    )

    # When: the orchestrator is SIGKILLed as soon as the store shows each stage done (the next
    # stage starting, or about to), and resumed each time
    proc = launch("run", str(plan))
    # (the branch is claimed before the run is recorded: wait for the store, not the branch)
    wait_until("the run to be recorded", lambda: has_run(repo), timeout_s=120)
    run_id = only_run(repo)
    finished: dict[str, list[tuple[int, str]]] = {}
    for stage in ("bug.reproduce", "bug.audit", "bug.localize"):
        wait_until(f"{stage} done", lambda s=stage: task_state(repo, run_id, s) == "done", 90)
        kill9(proc)
        finished[stage] = attempts_by_task(status(repo, run_id))[stage]
        proc = launch("resume", run_id)
    assert proc.wait(timeout=180) == 0

    # Then: no stage that had finished ran again, and the fix landed once with its test
    doc = status(repo, run_id)
    after = attempts_by_task(doc)
    assert doc["state"] == "done"
    for stage, attempts in finished.items():
        assert after[stage] == attempts, stage
        assert attempts[-1][1] == "merged"
    assert finished["bug.reproduce"] == [(1, "failed"), (2, "merged")]
    assert [state for _, state in after["bug"]].count("merged") == 1
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["bug"]
    changed = git(repo, "diff", "--name-only", doc["base"], doc["branch"]).split()
    assert sorted(changed) == ["calc.py", "tests/test_bug.py"]
    assert leftovers(repo, run_id) == []
