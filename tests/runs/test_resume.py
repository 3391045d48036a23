"""Resuming runs: after kill -9 at any instant, after Ctrl-C or SIGTERM, with one orchestrator.

The orchestrator runs as a real ``orchardist`` process here, killed the way a crash or a user
kills it: ``SIGKILL`` to its pid alone (its agents are left orphaned, as a power cut of the
orchestrator's terminal would leave them), or SIGINT/SIGTERM for a graceful stop.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from orchardist import RunLockedError, RunState, Workspace, create_run, load_plan
from orchardist.runs.start import reconcile, run_lock
from run_support import (
    Gate,
    attempt_states,
    leftovers,
    only_run,
    orchardist,
    status,
    task_trailers,
    wait_until,
)
from support import Finished, Stubborn, git, toml_str, write_plan

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RunPlan = Callable[..., Finished]
Launch = Callable[..., subprocess.Popen[bytes]]
# Trials of the kill -9 soak here (seeded: the same kill delays each time); more with
# ORCHARDIST_KILL9_TRIALS, and benchmarks/kill9_soak.py is the long soak (30 trials).
KILL9_TRIALS = int(os.environ.get("ORCHARDIST_KILL9_TRIALS", "3"))


def load_soak() -> ModuleType:
    """``benchmarks/kill9_soak.py``: the trial machinery the soak and this test share."""
    spec = importlib.util.spec_from_file_location("kill9_soak", BENCHMARKS / "kill9_soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kill9_soak"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


# -- the kill -9 invariant -------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_killed_at_random_instants_and_resumed_ends_as_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    # Given: a plan of six deterministic tasks in a DAG, and the tree one uninterrupted run
    # of it produces; When: fresh runs are SIGKILLed at seeded random instants (half of them
    # aimed at merges), and resumed (resumes killed too) until each run ends
    soak = load_soak()
    totals = soak.soak(tmp_path, seed=20261129, trials=KILL9_TRIALS)

    # Then: every trial ended done, on the reference tree, one commit per task, nothing left
    assert totals.violations == [], totals.report()
    assert totals.trials == KILL9_TRIALS, totals.report()
    assert totals.kills >= totals.trials // 2, totals.report()  # some runs end before the kill


# -- graceful stops --------------------------------------------------------------------------


def printed(tmp_path: Path) -> str:
    """What the orchestrators started by ``launch`` printed."""
    logs = sorted(tmp_path.glob("orchestrator-*.log"))
    return "\n".join(p.read_text(errors="replace") for p in logs)


def waiting_plan(repo: Path, sync: Path, scripts: Path) -> Path:
    """Tasks a and b (independent) and c (after a); a's and b's first attempts wait at the
    gate ``sync/release`` (``release``)."""
    agent = scripts / "agent.sh"
    agent.write_text(
        f"""\
set -eu
SYNC={shlex.quote(str(sync))}
echo "$ORCHARDIST_TASK" > "$ORCHARDIST_TASK.txt"
if [ "$ORCHARDIST_ATTEMPT" = 1 ] && [ "$ORCHARDIST_TASK" != c ]; then
  touch "$SYNC/started-$ORCHARDIST_TASK"
  flock -s "$SYNC/release" true
fi
"""
    )
    return write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(f"sh {shlex.quote(str(agent))}")}

        [[task]]
        id = "a"
        verify = "test -f a.txt"

        [[task]]
        id = "b"
        verify = "test -f b.txt"

        [[task]]
        id = "c"
        depends_on = ["a"]
        verify = "test -f a.txt && test -f c.txt"
        """,
        commit=True,
    )


@pytest.fixture
def release(sync: Path) -> Iterator[Gate]:
    """The gate the waiting plan's first attempts wait at, shut until the test opens it."""
    with Gate(sync / "release") as gate:
        yield gate


@pytest.fixture
def dirs(sync: Path, tmp_path: Path, release: Gate) -> tuple[Path, Path]:
    """The ``sync`` folder agents leave evidence in (writable inside the namespaces too), with
    its gate shut, and a folder for agent scripts."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    return sync, scripts


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_cleanly_and_a_resume_finishes_it(
    repo: Path,
    dirs: tuple[Path, Path],
    tmp_path: Path,
    launch: Launch,
    release: Gate,
    sig: signal.Signals,
) -> None:
    # Given: a run whose two first attempts are at work
    sync, scripts = dirs
    plan = waiting_plan(repo, sync, scripts)
    proc = launch("run", str(plan))
    wait_until(
        "both agents to start",
        lambda: (sync / "started-a").exists() and (sync / "started-b").exists(),
    )
    run_id = only_run(repo)

    # When: the orchestrator (alone) gets the signal
    os.kill(proc.pid, sig)
    code = proc.wait(timeout=30)

    # Then: exit 130; the attempts are recorded interrupted; nothing new was launched;
    # nothing is left behind
    log = printed(tmp_path)
    assert code == 130, log
    doc = status(repo, run_id)
    assert doc["state"] == "interrupted", doc
    assert attempt_states(doc, "a") == ["interrupted"]
    assert attempt_states(doc, "b") == ["interrupted"]
    assert attempt_states(doc, "c") == []
    assert leftovers(repo, run_id) == []
    assert task_trailers(repo, doc["base"], doc["branch"]) == []

    # When: the agents may now finish, and the run is resumed
    release.open()
    resumed = orchardist(repo, "resume", run_id)

    # Then: it finishes, each task merged once
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    assert attempt_states(doc, "a") == ["interrupted", "merged"]
    assert sorted(task_trailers(repo, doc["base"], doc["branch"])) == ["a", "b", "c"]
    assert leftovers(repo, run_id) == []


def test_a_signal_while_the_run_starts_up_still_stops_it(
    repo: Path,
    dirs: tuple[Path, Path],
    tmp_path: Path,
    launch: Launch,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given: an orchestrator held inside its start-up, after its run exists (its first
    # `git ls-files` once the run branch is there, the checkout guard's first look, through a
    # `git` first on its PATH, waits until the test lets it go)
    sync, scripts = dirs
    bin_dir = scripts / "bin"
    bin_dir.mkdir()
    real_git = shutil.which("git")
    (bin_dir / "git").write_text(
        f"""\
#!/bin/sh
if [ "$1" = ls-files ] && [ ! -e {sync}/in-startup ] \
    && [ -n "$({real_git} for-each-ref refs/heads/orchardist/)" ]; then
  touch {sync}/in-startup
  until [ -e {sync}/go ]; do sleep 0.01; done
fi
exec {real_git} "$@"
"""
    )
    (bin_dir / "git").chmod(0o755)
    plan = waiting_plan(repo, sync, scripts)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = launch("run", str(plan))
    wait_until("the orchestrator's start-up", (sync / "in-startup").exists)

    # When: Ctrl-C arrives then
    os.kill(proc.pid, signal.SIGINT)
    (sync / "go").touch()

    # Then: the run stops as from any other Ctrl-C (if the signal is lost, ``launch`` stops
    # the run afterwards), and no agent was started only to be ended again
    assert proc.wait(timeout=60) == 130
    run_id = only_run(repo)
    doc = status(repo, run_id)
    assert doc["state"] == "interrupted"
    assert [t["attempts"] for t in doc["tasks"]] == [[], [], []]
    assert not list(sync.glob("started-*"))
    assert leftovers(repo, run_id) == []


# -- one orchestrator per run ----------------------------------------------------------------


def test_a_second_orchestrator_is_refused_while_the_first_drives_the_run(
    repo: Path, dirs: tuple[Path, Path], tmp_path: Path, launch: Launch, release: Gate
) -> None:
    # Given: a run being driven, its agents at work
    sync, scripts = dirs
    plan = waiting_plan(repo, sync, scripts)
    first = launch("run", str(plan))
    wait_until("the agents to start", lambda: (sync / "started-a").exists())
    run_id = only_run(repo)

    # When: a second orchestrator tries to take it over, both ways
    resume = orchardist(repo, "resume", run_id)
    run_again = orchardist(repo, "run", str(plan), "--resume")

    # Then: both are refused with a message naming the holder; exit code 1
    # (a locked run is a usage error: exit 2)
    for refused in (resume, run_again):
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"run {run_id} is being driven by another orchardist process" in refused.stderr
        assert f"(pid {first.pid})" in refused.stderr
    # and `run` says what does work on a live run
    assert f"`orchardist cancel {run_id}`" in run_again.stderr
    # and the refused resumes did not reconcile: the first run's agents still run
    assert leftovers(repo, run_id) != []
    assert attempt_states(status(repo, run_id), "a") == ["running"]

    # When: the agents are let go
    release.open()

    # Then: the first orchestrator finishes, its first attempts merged
    assert first.wait(timeout=60) == 0, printed(tmp_path)
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    assert attempt_states(doc, "a") == ["merged"]
    assert leftovers(repo, run_id) == []


def test_a_crashed_orchestrator_does_not_keep_the_lock(
    repo: Path, dirs: tuple[Path, Path], tmp_path: Path, launch: Launch
) -> None:
    # Given: a run whose orchestrator is SIGKILLed while its agents work
    sync, scripts = dirs
    plan = waiting_plan(repo, sync, scripts)
    proc = launch("run", str(plan))
    wait_until(
        "the agents to start",
        lambda: (sync / "started-a").exists() and (sync / "started-b").exists(),
    )
    run_id = only_run(repo)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert leftovers(repo, run_id) != []  # orphaned agents and their worktrees

    # When: it is resumed
    resumed = orchardist(repo, "resume", run_id)

    # Then: the lock was free; the orphans were killed (in namespaces the kernel did it as the
    # orchestrator died, so resume may find none), their worktrees removed, their attempts
    # recorded interrupted, and the run finished
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert re.search(r"killed \d+ leftover process\(es\), removed 2 worktree\(s\)", resumed.stdout)
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    for task_id in ("a", "b"):
        first, second = next(t for t in doc["tasks"] if t["id"] == task_id)["attempts"]
        assert (first["state"], first["detail"]) == (
            "interrupted",
            "the orchestrator stopped while it ran",
        )
        assert second["state"] == "merged"
    assert sorted(task_trailers(repo, doc["base"], doc["branch"])) == ["a", "b", "c"]
    assert leftovers(repo, run_id) == []


def test_the_run_lock_is_exclusive_per_run_and_free_once_released(repo: Path) -> None:
    ws = Workspace.open(repo)
    try:
        with run_lock(ws, "run-1"):
            # another open file description conflicts even inside one process
            with (
                pytest.raises(RunLockedError, match=rf"\(pid {os.getpid()}\)"),
                run_lock(ws, "run-1"),
            ):
                pass
            with run_lock(ws, "run-2"):  # other runs are not held up
                pass
        with run_lock(ws, "run-1"):  # released on exit
            pass
    finally:
        ws.store.close()


def test_a_lock_held_by_a_process_that_was_killed_is_free(repo: Path) -> None:
    # Given: another process took the lock and was SIGKILLed while holding it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from orchardist.runs.start import Workspace, run_lock\n"
            "ws = Workspace.open(Path('.'))\n"
            "with run_lock(ws, 'run-1'):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    ws = Workspace.open(repo)
    try:
        with pytest.raises(RunLockedError, match=rf"\(pid {holder.pid}\)"), run_lock(ws, "run-1"):
            pass
        holder.kill()
        holder.wait()
        holder.stdout.close()

        # When / Then: the lock can be taken
        with run_lock(ws, "run-1"):
            pass
    finally:
        ws.store.close()


# -- reconciliation --------------------------------------------------------------------------


def two_task_plan(repo: Path) -> Path:
    return write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        a = { write = { "a.txt" = "a\\n" } }
        b = { write = { "b.txt" = "b\\n" } }

        [[task]]
        id = "a"
        verify = "test -f a.txt"

        [[task]]
        id = "b"
        depends_on = ["a"]
        verify = "test -f b.txt"
        """,
        commit=True,
    )


def test_resume_ends_a_dead_orchestrator_s_agents_with_sigterm_then_sigkill_after_1_s(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a run, and an agent its orchestrator left behind that meets SIGTERM with a 2.5 s
    # clean-up (it carries the run's id, as every agent of the run does)
    plan = load_plan(two_task_plan(repo))
    ws = Workspace.open(repo)
    run = create_run(ws, plan)
    child = Stubborn(tmp_path, cleanup_s=2.5)
    agent = subprocess.Popen(
        child.argv(),
        env={**os.environ, "ORCHARDIST_RUN": run.id},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert agent.stdout is not None and agent.stdout.readline() == b"ready\n"
        # When: the run is reconciled, as resume does first
        summary = reconcile(ws, run)
        killed_at = time.time()
        # Then: the agent got SIGTERM, at least 1 s, then SIGKILL before its clean-up ended
        assert summary["killed"] == 1
        assert agent.wait() == -signal.SIGKILL
        assert child.term_file.exists(), "killed without a SIGTERM first"
        assert child.grace_s(killed_at) >= 0.9
        assert not child.done_file.exists()
    finally:
        agent.kill()
        agent.wait()
        assert agent.stdout is not None
        agent.stdout.close()
        ws.store.close()


def test_a_task_whose_commit_reached_the_branch_before_the_crash_is_not_merged_again(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run, rewound in the store to the instant between the branch moving
    # onto b's commit and the store recording it (the crash window of a merge)
    ended = run_plan(two_task_plan(repo))
    assert ended.state is RunState.DONE
    run_id, commits = ended.run.id, ended.commits()
    with ended.ws.store.transaction() as tx:  # raw SQL: going back in time is no legal move
        tx.execute("update runs set state = 'running', finished_at = null where id = ?", [run_id])
        tx.execute(
            "update tasks set state = 'merging', commit_sha = null where run_id = ? and "
            "task_id = 'b'",
            [run_id],
        )
        tx.execute(
            "update attempts set state = 'passed' where run_id = ? and task_id = 'b' and n = 1",
            [run_id],
        )

    # When
    resumed = orchardist(repo, "resume", run_id)

    # Then: b is done from the branch; no new attempt, no second commit
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "b: done (commit found on the run branch)" in resumed.stdout
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    assert attempt_states(doc, "b") == ["merged"]
    assert git(repo, "rev-list", "--reverse", f"{doc['base']}..{doc['branch']}").split() == commits
    assert next(t for t in doc["tasks"] if t["id"] == "b")["commit"] == commits[-1]


def test_a_task_the_store_calls_done_but_the_branch_lacks_is_run_again(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run whose branch lost b's commit
    ended = run_plan(two_task_plan(repo))
    run_id, (a_commit, b_commit) = ended.run.id, ended.commits()
    with ended.ws.store.transaction() as tx:  # raw SQL: going back in time is no legal move
        tx.execute("update runs set state = 'running', finished_at = null where id = ?", [run_id])
    git(repo, "update-ref", f"refs/heads/{ended.run.branch}", a_commit, b_commit)

    # When
    resumed = orchardist(repo, "resume", run_id)

    # Then: b ran again and is on the branch once
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "b: re-run (commit not on the run branch)" in resumed.stdout
    doc = status(repo, run_id)
    assert doc["state"] == "done"
    assert len(attempt_states(doc, "b")) == 2
    assert attempt_states(doc, "b")[-1] == "merged"
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["a", "b"]


def test_a_finished_run_is_not_resumed(repo: Path, run_plan: RunPlan) -> None:
    ended = run_plan(two_task_plan(repo))

    again = orchardist(repo, "resume", ended.run.id)

    assert again.returncode == 2
    assert f"run {ended.run.id} already ended (done); nothing to resume" in again.stderr


def test_run_offers_to_resume_an_unfinished_run_and_the_flags_decide(
    repo: Path, dirs: tuple[Path, Path], tmp_path: Path, launch: Launch, release: Gate
) -> None:
    # Given: an unfinished (killed) run of the plan
    sync, scripts = dirs
    plan = waiting_plan(repo, sync, scripts)
    proc = launch("run", str(plan))
    wait_until("the agents to start", lambda: (sync / "started-a").exists())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run_id = only_run(repo)
    release.open()

    # When: run without a terminal to ask on, and without a flag
    asked = orchardist(repo, "run", str(plan))

    # Then: usage error naming both flags; nothing started
    assert asked.returncode == 2
    assert f"run {run_id} of this plan is dead" in asked.stderr  # as status calls it
    assert "--resume" in asked.stderr and "--fresh" in asked.stderr

    # When / Then: --resume continues that run
    resumed = orchardist(repo, "run", str(plan), "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming run {run_id}" in resumed.stdout
    assert status(repo, run_id)["state"] == "done"
    assert leftovers(repo, run_id) == []

    # When / Then: with nothing left to resume, --resume is a usage error, --fresh a new run
    assert orchardist(repo, "run", str(plan), "--resume").returncode == 2
    assert orchardist(repo, "run", str(plan), "--fresh").returncode == 0
    ws = Workspace.open(repo)
    try:
        assert [r.state for r in ws.store.runs()] == [RunState.DONE, RunState.DONE]
    finally:
        ws.store.close()


def test_python_dash_m_orchardist_runs_the_command_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "orchardist", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("orchardist ")
