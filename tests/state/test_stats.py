"""``orchardist stats``: figures across runs, checked against what the scripted runs did."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchardist import Workspace
from orchardist.state.eventlog import Event
from orchardist.state.stats import compute, durations
from support import Finished, make_repo, write_plan

RunPlan = Callable[..., Finished]

PLAN = """
[run]
verify = "none"
max_parallel = 2
retry_backoff = "0.05s"

[agents.cheap]
kind = "scripted"
[agents.cheap.script]
green = {{ write = {{ "green.txt" = "g\\n" }}, output = {{ cost_usd = 0.25, {tokens_100_7} }} }}
again = [
  {{ exit = 3, output = {{ cost_usd = 0.5 }} }},
  {{ write = {{ "again.txt" = "a\\n" }}, output = {{ cost_usd = 0.5 }} }},
]
"pair/0" = {{ exit = 1 }}

[agents.dear]
kind = "scripted"
[agents.dear.script]
"pair/1" = {{ write = {{ "pair-{n}.txt" = "p\\n" }}, output = {{ cost_usd = 2.0, {tokens_50_5} }} }}

[[task]]
id = "green"
agent = "cheap"

[[task]]
id = "again"
agent = "cheap"
retries = 1

[[task]]
id = "pair"
agent = ["cheap", "dear"]
"""


def plan_text(n: int) -> str:
    return PLAN.format(
        n=n,
        tokens_100_7="input_tokens = 100, output_tokens = 7",
        tokens_50_5="input_tokens = 50, output_tokens = 5",
    )


def stats_cli(repo: Path, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "orchardist", "stats", "--json", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@dataclass(frozen=True)
class History:
    """A repository with two finished runs of the plan, from two plan files, and their events."""

    repo: Path
    first_plan: Path
    events: list[Event]


@pytest.fixture(scope="module")
def _histories() -> dict[str, History]:
    return {}


@pytest.fixture
def history(
    _histories: dict[str, History], tmp_path_factory: pytest.TempPathFactory, run_plan: RunPlan
) -> History:
    """Two runs of a plan where "green" passes at once, "again" fails once (exit 3) and then
    passes, and "pair" races a failing cheap candidate against a passing dear one.

    Made by the module's first test (in its isolated environment: git identity, attempt
    folders) and only read after it: the three tests that read runs made four of them (~20
    scripted attempts) where two answer them all."""
    if "made" not in _histories:
        repo = make_repo(tmp_path_factory.mktemp("stats") / "repo", {"README.md": "hello\n"})
        first_plan = write_plan(repo, plan_text(1), name="first.toml")
        first = run_plan(first_plan)
        second = run_plan(write_plan(repo, plan_text(2), name="second.toml"))
        events = first.ws.store.events(first.run.id) + second.ws.store.events(second.run.id)
        _histories["made"] = History(repo, first_plan, events)
    return _histories["made"]


def test_stats_across_two_runs_match_what_the_runs_did(history: History) -> None:
    # Given: the two runs
    events = history.events

    # When
    doc = stats_cli(history.repo)

    # Then: totals as scripted: 6 tasks done, 4 of them at first shot (each run retried "again")
    t = doc["totals"]
    assert (t["runs"], t["tasks"], t["done"], t["green_first"]) == (2, 6, 6, 4)
    assert t["retries"] == 2 and t["retries_by_failure"] == {"agent_error": 2}
    # per run: green 1, again 2, pair 2 candidates
    assert t["attempts"] == 10 and t["attempts_per_task"] == round(10 / 6, 2)
    assert t["candidate_rounds"] == 2 and t["candidates_per_win"] == 2.0
    cost = 2 * (0.25 + 0.5 + 0.5 + 2.0)
    assert t["cost_usd"] == cost and t["cost_per_merged_usd"] == round(cost / 6, 6)
    assert (t["input_tokens"], t["output_tokens"]) == (300, 24)
    # the agent phase, measured independently from the event log: running -> verifying or end
    attempt_events = [e for e in events if e.kind == "attempt"]
    starts = {
        (e.run_id, e.task_id, e.attempt): e.ts
        for e in attempt_events
        if e.data["state"] == "running"
    }
    ends: dict[tuple[str | None, str | None, int | None], float] = {}
    for e in attempt_events:
        key = (e.run_id, e.task_id, e.attempt)
        if e.data["state"] != "running" and key not in ends:
            ends[key] = e.ts
    spans = [ends[k] - starts[k] for k in starts]
    assert t["agent"]["count"] == 10
    assert t["agent"]["median_s"] == round(statistics.median(spans), 3)

    # and per profile: dear won both races and merged both; cheap failed three times
    profiles = {p["profile"]: p for p in doc["profiles"]}
    assert profiles["dear"]["round_wins"] == 2 and profiles["dear"]["merged"] == 2
    assert profiles["cheap"]["round_wins"] == 0 and profiles["cheap"]["merged"] == 4
    assert profiles["cheap"]["failures"] == {"agent_error": 4}
    assert profiles["dear"]["cost_per_merged_usd"] == 2.0


def test_the_window_compares_with_the_one_before(history: History) -> None:
    # Given: the two runs, looked at eight days later with a seven-day window (an injected clock)
    later = time.time() + 8 * 86400
    ws = Workspace.open(history.repo, create=False)

    # When
    try:
        stats = compute(ws.store, later, since_s=7 * 86400)
    finally:
        ws.store.close()

    # Then: nothing in the window; the runs count in the window before it
    assert stats.run_ids == [] and stats.totals.tasks == 0
    assert stats.previous is not None and stats.previous.tasks == 6
    assert stats.previous.green_first == 4


def test_a_plan_filter_and_an_empty_store(history: History, tmp_path: Path) -> None:
    # Given: the two runs, each of its own plan file, and a plan with no run yet
    repo = history.repo
    other = write_plan(tmp_path, plan_text(1), name="other.toml")

    # Then: the filter counts the runs of the plan it names
    assert stats_cli(repo, "--plan", str(history.first_plan))["totals"]["runs"] == 1
    assert stats_cli(repo, "--plan", str(other))["totals"]["runs"] == 0
    out = subprocess.run(
        [sys.executable, "-m", "orchardist", "stats", "-C", str(repo), "--since", "1x"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--since" in out.stderr and "Traceback" not in out.stderr


def test_durations_use_the_nearest_rank_percentile() -> None:
    d = durations([float(x) for x in range(1, 11)])
    assert (d.count, d.median_s, d.p90_s) == (10, 5.5, 9.0)
    assert durations([]).median_s is None
    assert durations([2.0]).p90_s == 2.0
