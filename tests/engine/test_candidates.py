"""Best-of-N candidates end to end: real repositories, real pytest suites, real agent processes.

The agents are the in-package scripted fake; a profile's script gives each candidate its own
behaviour (``"task/K"``): pass, break the suite, hang past the profile's timeout, crash, or pass
with a larger diff. Every test also checks that nothing is left behind: no process carrying the
run's ``ORCHARDIST_RUN`` and no worktree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e_support import (
    assert_nothing_left,
    by_candidate,
    log_of,
)
from orchardist import RunState
from orchardist.cli import main
from support import Finished, make_repo, write_plan

RunPlan = Callable[..., Finished]

SUITE = "python -m pytest -q -p no:cacheprovider"
# Where the oracle's comparison with the base is not the point, the same check without pytest
# (~0.4 s of CPU a run, and a failing one runs again on the base)
ADD_WORKS = "python -c 'from calc import add; assert add(2, 3) == 5'"
CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

# What the candidates do to calc.py (TOML basic strings)
MUL_SMALL = r'"\ndef mul(a, b):\n    return a * b\n"'  # +3 lines
MUL_LARGE = (
    r'"\ndef mul(a, b):\n    \"\"\"Multiply.\"\"\"\n    result = a * b\n    return result\n"'
)
ADD_BROKEN = r'"def add(a, b):\n    return a - b\n"'  # the smallest diff of all, and wrong


@pytest.fixture
def calc_repo(tmp_path: Path) -> Iterator[Path]:
    """A repository with a module and a passing pytest suite."""
    yield make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "__pycache__/\n.pytest_cache/\n",
            "calc.py": CALC,
            "tests/test_calc.py": TEST_CALC,
        },
    )


# -- the smallest passing candidate wins -------------------------------------------------------


def test_the_smallest_passing_candidate_is_merged_and_every_result_is_kept(
    calc_repo: Path, run_plan: RunPlan, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given: five candidates — passes, breaks the suite, hangs, crashes, passes with more lines;
    # the hanging one on a profile of its own with a short timeout, which must fire (the others
    # keep the task's hour, which must not)
    plan = write_plan(
        calc_repo,
        f"""
        [run]
        max_parallel = 5
        verify = "{SUITE}"

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        "feature/0" = {{ print = "candidate 0 at work", append = {{ "calc.py" = {MUL_SMALL} }} }}
        "feature/1" = {{ write = {{ "calc.py" = {ADD_BROKEN} }} }}
        "feature/3" = {{ print = "candidate 3 crashes", exit = 3 }}
        "feature/4" = {{ print = "candidate 4 at work", append = {{ "calc.py" = {MUL_LARGE} }} }}

        [agents.hanger]
        kind = "scripted"
        timeout = "1s"
        script = {{ "feature/2" = {{ print = "candidate 2 hangs", sleep = 3600 }} }}

        [[task]]
        id = "feature"
        title = "Add mul"
        agent = ["fake", "fake", "hanger", "fake", "fake"]
        candidates = 5
        """,
    )

    # When
    run = run_plan(plan)

    # Then: candidate 0 is on the branch, and the status document says who won and why
    assert run.state is RunState.DONE, run.doc
    task = run.task("feature")
    cands = by_candidate(task)
    assert set(cands) == {0, 1, 2, 3, 4}
    assert task["state"] == "done"
    assert task["winner"] == {"candidate": 0, "attempt": cands[0]["n"]}
    assert run.read("calc.py") == CALC + "\ndef mul(a, b):\n    return a * b"
    assert len(run.commits()) == 1

    won, broken, hung, crashed, larger = (cands[k] for k in range(5))
    assert (won["state"], won["verdict"], won["changed_lines"]) == ("merged", "verified", 3)
    assert won["selection"] == "won: smallest passing diff"
    assert [c["candidate"] for c in cands.values() if c["won"]] == [0]  # a fact, not prose

    assert (larger["state"], larger["verdict"], larger["changed_lines"]) == (
        "passed",
        "verified",
        5,
    )
    assert larger["selection"] == "lost to candidate 0: larger diff (5 vs 3 lines)"

    assert (broken["state"], broken["failure"], broken["verdict"]) == (
        "failed",
        "verify_failed",
        "failed",
    )
    assert broken["changed_lines"] == 2  # smaller than the winner: failing diffs never win
    assert broken["exit_code"] == 1
    assert "test_add" in broken["detail"]
    assert "passed on the base now fail" in broken["detail"]
    assert broken["selection"] == "failed"

    assert (hung["state"], hung["failure"], hung["selection"]) == ("failed", "timeout", "failed")
    assert hung["agent"] == "hanger"
    assert "timed out after 1s" in hung["detail"]
    assert 1.0 <= hung["duration_s"] < 3600.0  # killed at its timeout, which only ended it
    assert "candidate 2 hangs" in log_of(hung)  # it ran, and was cut in its sleep

    assert (crashed["state"], crashed["failure"], crashed["exit_code"]) == (
        "failed",
        "agent_error",
        3,
    )
    assert crashed["selection"] == "failed"
    assert_nothing_left(run)

    # And: `orchardist status --json` carries the same record
    capsys.readouterr()
    assert main(["status", run.run.id, "--json", "-C", str(calc_repo)]) == 0
    [shown] = json.loads(capsys.readouterr().out)["tasks"]
    assert shown["winner"] == task["winner"]
    assert [
        (a["candidate"], a["verdict"], a["changed_lines"], a["selection"])
        for a in shown["attempts"]
    ] == [
        (a["candidate"], a["verdict"], a["changed_lines"], a["selection"]) for a in task["attempts"]
    ]

    # And: `orchardist show` prints any candidate's diff and log
    code = main(["show", run.run.id, "feature", "--candidate", "4", "-C", str(calc_repo)])
    out = capsys.readouterr().out
    assert code == 0
    assert "candidate 4" in out
    assert "lost to candidate 0" in out
    assert "+    result = a * b" in out  # the diff
    assert "candidate 4 at work" in out  # the agent's log
    assert f"$ {SUITE}" in out  # the verify command, in the same log

    code = main(["show", run.run.id, "feature", "--candidate", "1", "-C", str(calc_repo)])
    out = capsys.readouterr().out
    assert code == 0
    assert "-    return a + b" in out
    assert "+    return a - b" in out
    assert "test_add" in out

    code = main(["show", run.run.id, "feature", "-C", str(calc_repo)])  # default: the winner
    out = capsys.readouterr().out
    assert f"attempt {won['n']} candidate 0" in out
    assert "won: smallest passing diff" in out


def test_an_agent_list_gives_one_candidate_per_profile(calc_repo: Path, run_plan: RunPlan) -> None:
    # Given: three profiles; "b" writes the smallest passing change
    plan = write_plan(
        calc_repo,
        f"""
        [run]
        max_parallel = 3
        verify = "{ADD_WORKS}"

        [agents.a]
        kind = "scripted"
        script = {{ "*" = {{ append = {{ "calc.py" = {MUL_LARGE} }} }} }}

        [agents.b]
        kind = "scripted"
        script = {{ "*" = {{ append = {{ "calc.py" = {MUL_SMALL} }} }} }}

        [agents.c]
        kind = "scripted"
        script = {{ "*" = {{ write = {{ "calc.py" = {ADD_BROKEN} }} }} }}

        [[task]]
        id = "feature"
        agent = ["a", "b", "c"]
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    task = run.task("feature")
    cands = by_candidate(task)
    assert {k: a["agent"] for k, a in cands.items()} == {0: "a", 1: "b", 2: "c"}
    assert task["winner"] == {"candidate": 1, "attempt": cands[1]["n"]}
    assert [cands[k]["state"] for k in range(3)] == ["passed", "merged", "failed"]
    assert cands[0]["selection"] == "lost to candidate 1: larger diff (5 vs 3 lines)"
    assert_nothing_left(run)


# -- select = "first" --------------------------------------------------------------------------


def test_select_first_merges_the_first_to_pass_and_cancels_the_others_promptly(
    calc_repo: Path, run_plan: RunPlan
) -> None:
    # Given: candidate 1 passes at once; 0 sleeps for minutes and 2 hangs ignoring SIGTERM
    plan = write_plan(
        calc_repo,
        f"""
        [run]
        max_parallel = 3
        verify = "{ADD_WORKS}"

        [agents.fake]
        kind = "scripted"
        timeout = "300s"
        [agents.fake.script]
        "feature/0" = {{ sleep = 300, append = {{ "calc.py" = {MUL_SMALL} }} }}
        "feature/1" = {{ append = {{ "calc.py" = {MUL_LARGE} }} }}
        "feature/2" = {{ hang = true }}

        [[task]]
        id = "feature"
        candidates = 3
        select = "first"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: the larger diff won because it was first; the others were cancelled, not awaited
    # (awaited, the sleeper would have passed after its 300 s and the hanger timed out)
    assert run.state is RunState.DONE, run.doc
    task = run.task("feature")
    cands = by_candidate(task)
    assert task["winner"] == {"candidate": 1, "attempt": cands[1]["n"]}
    assert cands[1]["selection"] == "won: first candidate to pass"
    assert run.read("calc.py").endswith("return result")
    for k in (0, 2):
        assert (cands[k]["state"], cands[k]["selection"]) == ("cancelled", "cancelled")
        assert cands[k]["duration_s"] < 300.0  # cut before the sleep or the timeout
    cancelled = [e for e in run.events("attempt", "feature") if e.data["state"] == "cancelled"]
    assert {e.data["candidate"] for e in cancelled} == {0, 2}
    assert_nothing_left(run)


# -- no passing candidate ----------------------------------------------------------------------


# Rounds retried with fresh candidates, then failing: on the fakes, in test_scheduler_fakes.py
# (what only real processes show here, one baseline for every candidate and nothing left
# behind, is tested above and in test_oracle_e2e.py).
