"""``events``, ``logs --follow`` and ``status --watch`` on a live run, through the real CLI.

A follower is started while an agent waits for the test's go; it must show what happened so
far, then what happens next, and end by itself when the run ends.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist import Workspace
from orchardist.runs.control import holder
from run_support import only_run, orchardist, wait_until
from support import toml_str, write_plan

Launch = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def live_run(repo: Path, sync: Path, launch: Launch) -> tuple[str, Path]:
    """A run whose task ``slow`` printed ``part one`` and waits for ``sync/go``."""
    go = shlex.quote(str(sync / "go"))
    agent = (
        f"echo part one; touch {shlex.quote(str(sync / 'started'))}; "
        f"until [ -e {go} ]; do sleep 0.02; done; echo part two; echo x > slow.txt"
    )
    write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(agent)}

        [[task]]
        id = "slow"
        verify = "test -f slow.txt"
        """,
        commit=True,
    )
    launch("run", "plan.toml")
    wait_until("the agent to start", (sync / "started").exists)
    return only_run(repo), sync / "go"


def output(tmp_path: Path, n: int) -> str:
    """What the n-th launched process printed so far."""
    return (tmp_path / f"orchestrator-{n}.log").read_text(errors="replace")


def test_events_follow_streams_json_lines_until_the_run_ends(
    tmp_path: Path, launch: Launch, live_run: tuple[str, Path]
) -> None:
    # Given: a follower of a run whose attempt is running
    run_id, go = live_run
    follower = launch("events", run_id, "--follow")
    wait_until("the running attempt's event", lambda: '"running"' in output(tmp_path, 1))

    # When: the agent may finish
    go.touch()

    # Then: the follower prints the rest and ends by itself with the run's last event
    assert follower.wait(timeout=60) == 0
    events = [json.loads(line) for line in output(tmp_path, 1).splitlines()]
    assert [set(e) for e in events[:1]] == [{"seq", "time", "kind", "task", "attempt", "data"}]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))
    assert events[0]["kind"] == "run" and events[0]["data"]["state"] == "created"
    assert events[-1]["kind"] == "run" and events[-1]["data"]["state"] == "done"
    assert any(e["kind"] == "task" and e["data"]["state"] == "done" for e in events)


def test_events_without_follow_prints_what_is_there(repo: Path, tmp_path: Path) -> None:
    write_plan(repo, '[agents.sh]\nkind = "shell"\ncommand = "true"\n[[task]]\nid = "t"\n')
    orchardist(repo, "run", "plan.toml")

    done = orchardist(repo, "events")
    later = orchardist(repo, "events", "--after", "2")

    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0
    assert lines[-1]["data"]["state"] in ("done", "failed")
    assert [e["seq"] for e in map(json.loads, later.stdout.splitlines())] == [
        e["seq"] for e in lines if e["seq"] > 2
    ]


def test_logs_follow_prints_what_the_agent_writes_until_the_run_ends(
    tmp_path: Path, launch: Launch, live_run: tuple[str, Path]
) -> None:
    run_id, go = live_run
    follower = launch("logs", run_id, "slow", "--follow")
    wait_until("the first part of the log", lambda: "part one" in output(tmp_path, 1))
    assert "part two" not in output(tmp_path, 1)

    go.touch()

    assert follower.wait(timeout=60) == 0
    text = output(tmp_path, 1)
    assert text.startswith("==> slow attempt 1 (running) ")
    assert text.count("part one") == 1
    assert text.index("part one") < text.index("part two")


def test_status_watch_redraws_until_the_run_ends(
    tmp_path: Path, launch: Launch, live_run: tuple[str, Path]
) -> None:
    run_id, go = live_run
    follower = launch("status", run_id, "--watch")
    wait_until("the running task", lambda: "running" in output(tmp_path, 1))

    go.touch()

    assert follower.wait(timeout=60) == 0
    last = output(tmp_path, 1).split(f"run {run_id}: ")[-1]
    assert last.startswith("done")


def test_following_a_run_nobody_drives_ends_at_once(repo: Path) -> None:
    write_plan(repo, '[agents.sh]\nkind = "shell"\ncommand = "true"\n[[task]]\nid = "t"\n')
    orchardist(repo, "run", "plan.toml")

    done = orchardist(repo, "events", "--follow", timeout_s=60)

    assert done.returncode == 0
    assert json.loads(done.stdout.splitlines()[-1])["kind"] == "run"


def test_a_follower_ends_when_the_orchestrator_dies(
    tmp_path: Path, launch: Launch, live_run: tuple[str, Path]
) -> None:
    # Given: a follower of a live run
    run_id, _ = live_run
    follower = launch("events", run_id, "--follow")
    wait_until("the running attempt's event", lambda: '"running"' in output(tmp_path, 1))

    # When: the orchestrator is killed outright (it writes nothing more)
    ws = Workspace.open(tmp_path / "repo")
    try:
        pid = holder(ws.state_dir, run_id)
    finally:
        ws.store.close()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    # Then: the follower notices through its pidfd and ends
    assert follower.wait(timeout=60) == 0
