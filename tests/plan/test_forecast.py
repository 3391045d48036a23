"""``orchardist graph`` and ``run --dry-run``: the plan's schedule before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from orchardist.plan.forecast import forecast
from orchardist.plan.loading import load_plan
from run_support import orchardist
from support import git, write_plan

FAN = """
[run]
max_parallel = 2

[agents.fake]
kind = "scripted"

[[task]]
id = "tokens"
estimate = 3

[[task]]
id = "wrap"
estimate = 2

[[task]]
id = "slugify"
depends_on = ["tokens"]

[[task]]
id = "case"
depends_on = ["tokens"]
estimate = "2s"

[[task]]
id = "exports"
depends_on = ["slugify", "case", "wrap"]

[[task]]
id = "cli"
depends_on = ["exports"]
"""


def test_graph_prints_launch_order_critical_path_and_makespan(repo: Path) -> None:
    write_plan(repo, FAN)

    done = orchardist(repo, "graph", "plan.toml")

    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "critical path (*): tokens → case → exports → cli  (length 7)" in out
    assert "expected makespan with max_parallel 2: 7 " in out
    order = [line.split()[1] for line in out.splitlines() if line.split()[0].endswith(".")]
    assert order == ["tokens", "wrap", "case", "slugify", "exports", "cli"]


def test_graph_json_and_fewer_slots_give_a_longer_makespan(repo: Path) -> None:
    write_plan(repo, FAN)

    two = json.loads(orchardist(repo, "graph", "plan.toml", "--json").stdout)
    one = json.loads(orchardist(repo, "graph", "plan.toml", "--json", "--max-parallel", "1").stdout)

    assert two["critical_path"] == ["tokens", "case", "exports", "cli"]
    assert two["critical_path_length"] == 7
    assert two["makespan"] == 7
    assert one["makespan"] == one["total_work"] == 10
    assert {"id": "exports", "depends_on": ["slugify", "case", "wrap"]} in two["tasks"]


def test_graph_formats_dot_and_mermaid(repo: Path) -> None:
    write_plan(repo, FAN)

    dot = orchardist(repo, "graph", "plan.toml", "--format", "dot").stdout
    mermaid = orchardist(repo, "graph", "plan.toml", "--format", "mermaid").stdout

    assert dot.startswith("digraph plan {")
    assert '"case" -> "exports" [style=bold];' in dot
    assert '"wrap" -> "exports";' in dot
    assert mermaid.startswith("graph LR")
    assert "t3 --> t4" in mermaid
    assert "class t0,t3,t4,t5 critical" in mermaid


def test_dry_run_runs_nothing_and_creates_nothing(repo: Path) -> None:
    write_plan(repo, FAN)

    done = orchardist(repo, "run", "plan.toml", "--dry-run", "--max-parallel", "4")

    assert done.returncode == 0, done.stderr
    assert "expected makespan with max_parallel 4: 7 " in done.stdout
    assert not (repo / ".git" / "orchardist").exists()
    assert "orchardist" not in git(repo, "for-each-ref")


def test_dry_run_of_a_bad_plan_is_a_located_error(repo: Path) -> None:
    write_plan(repo, FAN + '\n[[task]]\nid = "x"\ndepends_on = ["ghost"]\n')

    done = orchardist(repo, "run", "plan.toml", "--dry-run")

    assert done.returncode == 2
    assert "ghost" in done.stderr
    assert "Traceback" not in done.stderr


def test_candidates_take_slots_and_pool_caps_hold_tasks_back(repo: Path) -> None:
    plan = load_plan(
        write_plan(
            repo,
            """
            [agents.slow]
            kind = "scripted"
            max_parallel = 1

            [[task]]
            id = "a"
            agent = "slow"
            estimate = 2

            [[task]]
            id = "b"
            agent = "slow"
            estimate = 2

            [[task]]
            id = "c"
            agent = "slow"
            candidates = 2
            depends_on = ["a"]
            """,
        )
    )

    fc = forecast(plan, max_parallel=8)

    assert fc.makespan == 6  # one slot for the pool: a, b, then c's two candidates in turn
    assert [s.task for s in fc.schedule] == ["a", "b", "c", "c"]


def test_only_and_skip_shape_the_forecast_as_they_shape_the_run(repo: Path) -> None:
    write_plan(repo, FAN)

    only = json.loads(
        orchardist(repo, "run", "plan.toml", "--dry-run", "--json", "--only", "case").stdout
    )
    skip = json.loads(orchardist(repo, "graph", "plan.toml", "--json", "--skip", "tokens").stdout)
    unknown = orchardist(repo, "graph", "plan.toml", "--only", "ghost")

    assert only["launch_order"] == ["tokens", "case"]
    assert skip["launch_order"] == ["wrap"]
    assert unknown.returncode == 2 and "no task 'ghost'" in unknown.stderr
