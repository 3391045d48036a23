"""``orchardist gc``: what finished runs leave on disk goes once they are old enough; their
history stays in the store, and unfinished runs are never touched.

Ages are decided by a ``now`` the test passes in, so a run a day old is a line away.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState, create_run, load_plan
from orchardist.runs.gc import collect, run_disk_bytes
from run_support import orchardist
from support import Finished, baselines_cached, git, write_plan

DAY_S = 86400.0
RunPlan = Callable[..., Finished]

PLAN = """
[run]
{run}

[agents.fake]
kind = "scripted"
[agents.fake.script]
a = {{ write = {{ "a.txt" = "a\\n" }}, output = {{ cost_usd = 1.0 }} }}
b = {{ write = {{ "fixed.txt" = "b\\n" }}, output = {{ cost_usd = 1.0 }} }}

[[task]]
id = "a"
verify = "test -f a.txt"

[[task]]
id = "b"
depends_on = ["a"]  # starts on a's merge: nothing merges beside it, so no merge verification
check = "test -f fixed.txt"
"""


def a_run(run_plan: RunPlan, repo: Path, run_table: str = "", name: str = "plan.toml") -> Finished:
    """A run of two tasks, one after the other: ``b``'s check makes the one cached baseline (two
    tasks side by side may also leave their merged tree's results as one, as the merge queue
    keeps them); each attempt a ref and logs."""
    return run_plan(write_plan(repo, PLAN.format(run=run_table), name=name))


def attempt_refs(repo: Path, run_id: str) -> list[str]:
    out = git(repo, "for-each-ref", "--format=%(refname)", f"refs/orchardist/runs/{run_id}/")
    return out.splitlines()


def has_branch(repo: Path, branch: str) -> bool:
    return bool(git(repo, "branch", "--list", branch))


def finished_at(run: Finished) -> float:
    record = run.ws.store.run(run.run.id)
    assert record is not None and record.finished_at is not None
    return record.finished_at


def test_gc_removes_logs_worktrees_and_refs_of_finished_runs_older_than_the_age(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run with logs, attempt refs, a cached baseline and a stray worktree
    # folder
    run = a_run(run_plan, repo)
    assert run.state is RunState.DONE, run.doc
    ws, run_id = run.ws, run.run.id
    stray = ws.state_dir / "worktrees" / run_id / "stray"
    stray.mkdir(parents=True)
    (stray / "junk.txt").write_text("left behind\n")
    refs, used = attempt_refs(repo, run_id), run_disk_bytes(ws, run_id)
    assert len(refs) == 2 and used > 0
    assert baselines_cached(ws) == 1
    ended_at = finished_at(run)

    # When: collected a day after it ended, with an age limit of two days
    young = collect(ws, older_than_s=2 * DAY_S, now=ended_at + DAY_S)

    # Then: nothing is removed
    assert young == {
        "runs": [],
        "bytes": 0,
        "refs": 0,
        "branches": 0,
        "baselines": 0,
        "scan_results": 0,
    }
    assert run_disk_bytes(ws, run_id) == used and attempt_refs(repo, run_id) == refs

    # When: collected three days after it ended
    old = collect(ws, older_than_s=2 * DAY_S, now=ended_at + 3 * DAY_S)

    # Then: its logs, worktree folders and attempt refs are gone, its cached baseline too;
    # its branch, its history in the store and the user's checkout stay
    assert old == {
        "runs": [run_id],
        "bytes": used,
        "refs": 2,
        "branches": 0,
        "baselines": 1,
        "scan_results": 0,
    }
    assert run_disk_bytes(ws, run_id) == 0
    assert not (ws.state_dir / "logs" / run_id).exists()
    assert not (ws.state_dir / "worktrees" / run_id).exists()
    assert attempt_refs(repo, run_id) == []
    assert baselines_cached(ws) == 0
    assert has_branch(repo, run.run.branch)
    assert [t.state.value for t in ws.store.tasks(run_id)] == ["done", "done"]
    assert len(ws.store.attempts(run_id)) == 2
    assert git(repo, "status", "--porcelain") == "?? plan.toml"
    assert git(repo, "worktree", "list").count("\n") == 0


def test_a_dry_run_reports_what_would_go_and_removes_nothing(repo: Path, run_plan: RunPlan) -> None:
    run = a_run(run_plan, repo)
    ws, run_id = run.ws, run.run.id
    used = run_disk_bytes(ws, run_id)
    later = finished_at(run) + 3 * DAY_S

    report = collect(ws, older_than_s=DAY_S, branches=True, dry_run=True, now=later)

    assert report == {
        "runs": [run_id],
        "bytes": used,
        "refs": 2,
        "branches": 1,
        "baselines": 1,
        "scan_results": 0,
    }
    assert run_disk_bytes(ws, run_id) == used
    assert len(attempt_refs(repo, run_id)) == 2
    assert has_branch(repo, run.run.branch)
    assert baselines_cached(ws) == 1
    # and the real thing removes exactly what the dry run announced
    assert collect(ws, older_than_s=DAY_S, branches=True, now=later) == report


def test_branches_go_only_when_asked(repo: Path, run_plan: RunPlan) -> None:
    first = a_run(run_plan, repo)
    second = a_run(run_plan, repo, name="again.toml")
    later = finished_at(second) + 3 * DAY_S

    kept = collect(first.ws, older_than_s=DAY_S, now=later)
    assert kept["branches"] == 0
    assert has_branch(repo, first.run.branch) and has_branch(repo, second.run.branch)

    gone = collect(first.ws, older_than_s=DAY_S, branches=True, now=later)

    assert gone["branches"] == 2
    assert not has_branch(repo, first.run.branch) and not has_branch(repo, second.run.branch)
    assert git(repo, "branch", "--format=%(refname:short)") == "main"


def test_unfinished_runs_are_untouched_however_old(repo: Path, run_plan: RunPlan) -> None:
    # Given: a run stopped by its cost budget after one task, and one never driven at all
    stopped = a_run(run_plan, repo, run_table="max_parallel = 1\nmax_cost_usd = 0.5")
    assert stopped.state is RunState.STOPPED
    ws = stopped.ws
    refs, used = attempt_refs(repo, stopped.run.id), run_disk_bytes(ws, stopped.run.id)
    assert refs and used > 0
    never = create_run(ws, load_plan(write_plan(repo, PLAN.format(run=""), name="never.toml")))

    # When: collected a year later, branches included
    report = collect(ws, older_than_s=DAY_S, branches=True, now=finished_at(stopped) + 365 * DAY_S)

    # Then: neither run lost anything
    assert report["runs"] == []
    assert (report["bytes"], report["refs"], report["branches"]) == (0, 0, 0)
    assert attempt_refs(repo, stopped.run.id) == refs
    assert run_disk_bytes(ws, stopped.run.id) == used
    assert has_branch(repo, stopped.run.branch) and has_branch(repo, never.branch)


def test_the_gc_command_and_the_disk_use_status_shows(repo: Path, run_plan: RunPlan) -> None:
    # Given: a finished run, which status shows using disk
    run = a_run(run_plan, repo)
    run_id = run.run.id
    shown = orchardist(repo, "status", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    used = json.loads(shown.stdout)["disk_bytes"]
    assert used == run_disk_bytes(run.ws, run_id) > 0
    text = orchardist(repo, "status", run_id).stdout
    assert f"disk: {used / 1e6:.1f} MB of logs and worktrees" in text

    # When / Then: with the default age (7 days) nothing goes; a dry run only says what would
    assert "removed 0.0 MB, 0 ref(s), 0 branch(es)" in orchardist(repo, "gc").stdout
    dry = orchardist(repo, "gc", "--older-than", "1ms", "--branches", "--dry-run", "--json")
    assert json.loads(dry.stdout)["runs"] == [run_id]
    assert json.loads(orchardist(repo, "status", run_id, "--json").stdout)["disk_bytes"] == used

    # When: collected for real
    real = orchardist(repo, "gc", "--older-than", "1ms", "--branches")

    # Then: it says what it removed; status shows no disk use; logs say they are gone
    assert real.returncode == 0, real.stderr
    assert f"removed run {run_id}" in real.stdout
    assert "2 ref(s), 1 branch(es), 1 cached baseline(s)" in real.stdout
    assert json.loads(orchardist(repo, "status", run_id, "--json").stdout)["disk_bytes"] == 0
    logs = orchardist(repo, "logs", run_id, "a")
    assert logs.returncode == 0 and "(log not available)" in logs.stdout
    assert not has_branch(repo, run.run.branch)


def test_gc_refuses_an_age_it_cannot_read(repo: Path) -> None:
    bad = orchardist(repo, "gc", "--older-than", "soon")
    assert bad.returncode == 2
    assert "--older-than" in bad.stderr


def test_gc_removes_the_sessions_a_finished_runs_agents_kept(repo: Path, run_plan: RunPlan) -> None:
    # Given: a finished run whose agent kept a session for its task's next attempt
    run = a_run(run_plan, repo)
    ws, run_id = run.ws, run.run.id
    kept = ws.state_dir / "sessions" / run_id / "a" / "0-fake"
    kept.mkdir(parents=True)
    (kept / "session.json").write_text('{"kind": "claude", "session_id": "s-1", "attempt": 1}')
    used = run_disk_bytes(ws, run_id)

    # When: collected once old enough
    old = collect(ws, older_than_s=DAY_S, now=finished_at(run) + 2 * DAY_S)

    # Then: the kept session went with the run's other folders, and was counted
    assert old["runs"] == [run_id] and old["bytes"] == used
    assert not (ws.state_dir / "sessions" / run_id).exists()
