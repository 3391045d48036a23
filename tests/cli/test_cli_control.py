"""Choosing and steering runs through the real CLI: --only/--skip, -x, retry and cancel."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from run_support import (
    attempt_states,
    leftovers,
    only_run,
    orchardist,
    status,
    task_trailers,
    wait_until,
)
from support import git, toml_str, write_plan

Launch = Callable[..., subprocess.Popen[bytes]]

# a, then b after a; c on its own. ``bad`` fails on its first attempt, passes on the next.
CHAIN = """
[agents.fake]
kind = "scripted"
[agents.fake.script]
a = {{ write = {{ "a.txt" = "a\\n" }} }}
b = {{ write = {{ "b.txt" = "b\\n" }} }}
c = {{ write = {{ "c.txt" = "c\\n" }} }}
bad = [{{ exit = 3, print = "not yet" }}, {{ write = {{ "bad.txt" = "ok\\n" }} }}]
after-bad = {{ write = {{ "after.txt" = "after\\n" }} }}

[[task]]
id = "a"
agent = "fake"
verify = "test -f a.txt"

[[task]]
id = "b"
agent = "fake"
depends_on = ["a"]
verify = "test -f b.txt"

[[task]]
id = "c"
agent = "fake"
verify = "test -f c.txt"
{extra}
"""

BAD = """
[[task]]
id = "bad"
agent = "fake"
verify = "test -f bad.txt"

[[task]]
id = "after-bad"
agent = "fake"
depends_on = ["bad"]
"""


def states(doc: dict[str, Any]) -> dict[str, str]:
    """Task id → state."""
    return {t["id"]: t["state"] for t in doc["tasks"]}


def final(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The status document a ``--json`` run printed."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


# -- --skip and --only -----------------------------------------------------------------------


def test_skip_leaves_out_the_task_and_its_dependents(repo: Path) -> None:
    write_plan(repo, CHAIN.format(extra=""), commit=True)

    done = orchardist(repo, "run", "plan.toml", "--json", "--skip", "a")

    doc = final(done)
    assert done.returncode == 0, done.stderr
    assert doc["state"] == "done"
    assert states(doc) == {"a": "skipped", "b": "skipped", "c": "done"}
    assert [t["reason"] for t in doc["tasks"]][:2] == ["--skip", "depends on skipped a"]
    assert "b: skipped — depends on skipped a" in done.stderr  # the progress lines tell too
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["c"]


def test_only_brings_its_dependencies_along(repo: Path) -> None:
    write_plan(repo, CHAIN.format(extra=""), commit=True)

    done = orchardist(repo, "run", "plan.toml", "--json", "--only", "b")

    doc = final(done)
    assert done.returncode == 0, done.stderr
    assert states(doc) == {"a": "done", "b": "done", "c": "skipped"}
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["a", "b"]


def test_an_unknown_task_in_only_is_a_usage_error_that_creates_nothing(repo: Path) -> None:
    write_plan(repo, CHAIN.format(extra=""), commit=True)
    refs = git(repo, "for-each-ref")

    done = orchardist(repo, "run", "plan.toml", "--only", "ghost")

    assert done.returncode == 2
    assert "no task 'ghost'" in done.stderr
    assert "Traceback" not in done.stderr
    assert git(repo, "for-each-ref") == refs


# -- fail fast -------------------------------------------------------------------------------


def test_fail_fast_ends_the_run_at_the_first_failed_task(repo: Path, tmp_path: Path) -> None:
    # Given: a task that fails at once, and one that would wait for a file nobody writes
    never = tmp_path / "never"
    write_plan(
        repo,
        CHAIN.format(extra=BAD)
        + f"""
[agents.wait]
kind = "shell"
command = {toml_str(f"until [ -e {shlex.quote(str(never))} ]; do sleep 0.05; done")}

[[task]]
id = "slow"
agent = "wait"
""",
        commit=True,
    )

    # When: the run goes with -x
    done = orchardist(repo, "run", "plan.toml", "--json", "-x", "--max-parallel", "8")

    # Then: it ends failed, the waiting attempt interrupted, unfinished tasks cancelled
    doc = final(done)
    assert done.returncode == 1
    assert doc["state"] == "failed"
    assert doc["reason"] == "fail-fast: task bad failed"
    assert states(doc)["bad"] == "failed"
    assert states(doc)["after-bad"] == "blocked"
    assert states(doc)["slow"] == "cancelled"
    assert attempt_states(doc, "slow") == ["interrupted"]
    assert leftovers(repo, doc["run"]) == []


# -- retry -----------------------------------------------------------------------------------


def test_retry_reruns_failed_and_blocked_tasks_keeping_what_merged(repo: Path) -> None:
    # Given: a run that failed: bad failed, after-bad blocked, the rest merged
    write_plan(repo, CHAIN.format(extra=BAD), commit=True)
    first = final(orchardist(repo, "run", "plan.toml", "--json"))
    assert states(first)["bad"] == "failed"
    assert states(first)["after-bad"] == "blocked"
    merged = {t["id"]: t["commit"] for t in first["tasks"] if t["state"] == "done"}

    # When: it is retried
    done = orchardist(repo, "retry", first["run"], "--json")

    # Then: same run and branch; bad passes on its next attempt; merged work kept as it was
    doc = final(done)
    assert done.returncode == 0, done.stderr
    assert doc["run"] == first["run"]
    assert "bad: pending — retry" in done.stderr
    assert doc["state"] == "done"
    assert attempt_states(doc, "bad") == ["failed", "merged"]
    assert {t["id"]: t["commit"] for t in doc["tasks"] if t["id"] in merged} == merged
    assert sorted(task_trailers(repo, doc["base"], doc["branch"])) == [
        "a",
        "after-bad",
        "b",
        "bad",
        "c",
    ]


def test_retry_of_named_tasks_leaves_the_others_as_they_are(repo: Path) -> None:
    write_plan(repo, CHAIN.format(extra=BAD), commit=True)
    first = final(orchardist(repo, "run", "plan.toml", "--json"))

    done = orchardist(repo, "retry", first["run"], "bad", "--json")

    doc = final(done)
    assert states(doc)["bad"] == "done"
    assert states(doc)["after-bad"] == "blocked"
    assert doc["state"] == "failed"


def test_retry_refuses_runs_that_did_not_end_or_ended_done(repo: Path) -> None:
    write_plan(repo, CHAIN.format(extra=""), commit=True)
    first = final(orchardist(repo, "run", "plan.toml", "--json"))

    done = orchardist(repo, "retry", first["run"])

    assert done.returncode == 2
    assert f"run {first['run']} is done" in done.stderr
    help_text = (
        orchardist(repo, "retry", "--help").stdout + orchardist(repo, "resume", "--help").stdout
    )
    assert "`resume` continues a run that did not end" in " ".join(help_text.split())
    assert "`retry` re-runs the failed tasks of a run that ended" in " ".join(help_text.split())


# -- cancel ----------------------------------------------------------------------------------


def hanging_plan(repo: Path, sync: Path) -> None:
    """``a`` merges at once; ``hang`` writes a file, says it started, and waits forever."""
    agent = f"echo x > hang.txt; touch {shlex.quote(str(sync))}/started; sleep 600"
    write_plan(
        repo,
        CHAIN.format(extra="")
        + f"""
[agents.wait]
kind = "shell"
command = {toml_str(agent)}

[[task]]
id = "hang"
agent = "wait"
depends_on = ["a"]
""",
        commit=True,
    )


def test_cancel_ends_a_live_run_from_another_terminal(
    repo: Path, sync: Path, launch: Launch
) -> None:
    # Given: a run whose agent is at work
    hanging_plan(repo, sync)
    proc = launch("run", "plan.toml")
    wait_until("the agent to start", (sync / "started").exists)
    run_id = only_run(repo)

    # When: it is cancelled from elsewhere
    done = orchardist(repo, "cancel", run_id[:12])

    # Then: cancel waited for the end; the run and its unfinished tasks are cancelled; the
    # attempt interrupted; nothing of it merged; nothing left running
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"run {run_id}: cancelled"
    assert proc.wait(timeout=30) == 1
    doc = status(repo, run_id)
    assert doc["state"] == "cancelled"
    assert states(doc)["hang"] == "cancelled"
    assert attempt_states(doc, "hang") == ["interrupted"]
    assert "hang" not in task_trailers(repo, doc["base"], doc["branch"])
    assert leftovers(repo, run_id) == []
    assert orchardist(repo, "cancel", run_id).returncode == 2  # it has ended


def test_cancel_of_a_run_whose_orchestrator_died_cleans_it_up(
    repo: Path, sync: Path, launch: Launch
) -> None:
    hanging_plan(repo, sync)
    proc = launch("run", "plan.toml")
    wait_until("the agent to start", (sync / "started").exists)
    run_id = only_run(repo)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    done = orchardist(repo, "cancel", run_id)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "no orchardist was driving it" in done.stdout
    doc = status(repo, run_id)
    assert doc["state"] == "cancelled"
    assert attempt_states(doc, "hang") == ["interrupted"]
    assert leftovers(repo, run_id) == []
