"""Hostile agents against the budget: usage figures that are NaN, negative or infinite."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from support import Finished, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]

LIES = {
    "nan": '{"cost_usd": NaN, "input_tokens": -5}',
    "negative": '{"cost_usd": -1e9, "output_tokens": 1e999}',
    "infinite": '{"cost_usd": -Infinity, "turns": -1}',
}


def test_agents_reporting_nan_or_negative_costs_do_not_switch_the_run_budget_off(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a $1.00 run budget, three agents that lie about their cost first, then five honest
    # ones at $0.40 each, one at a time; each agent leaves its name in $SYNC/ran
    honest = [f"h{i}" for i in range(1, 6)]
    bodies = {
        task: f"""echo {task} >> "$SYNC/ran"; echo {task} > {task}.txt
        printf '%s' {shlex.quote(lie)} > "$ORCHARDIST_OUTPUT"
        """
        for task, lie in LIES.items()
    }
    for task in honest:
        bodies[task] = f"""echo {task} >> "$SYNC/ran"; echo {task} > {task}.txt
        echo '{{"cost_usd": 0.4}}' > "$ORCHARDIST_OUTPUT"
        """
    command = shell_scripts(**bodies)
    tasks = "".join(f'[[task]]\nid = "{t}"\n\n' for t in [*LIES, *honest])
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 1
max_cost_usd = 1.0

[agents.sh]
kind = "shell"
command = {toml_str(command)}

{tasks}""",
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the budget held: after three honest agents ($1.20) no other agent started
    ran = (sync / "ran").read_text().split()
    assert [t for t in ran if t in honest] == honest[:3], ran
    assert run.state is RunState.STOPPED
    # and no lie reached the store: every recorded figure is finite and non-negative
    for attempt in run.ws.store.attempts(run.run.id):
        for value in (attempt.usage.cost_usd, attempt.usage.input_tokens):
            assert value is None or (math.isfinite(value) and value >= 0), attempt
    assert_untouched(repo, ground)
