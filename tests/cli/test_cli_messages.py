"""What a run prints about its failures, through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_inputs import orchardist


def test_a_timeout_and_a_failed_verify_are_told_apart_with_the_configured_values(
    repo: Path,
) -> None:
    # Given a task whose agent hangs past its 1 s timeout and one whose verify exits 3
    (repo / "plan.toml").write_text(
        """
[agents.sh]
kind = "shell"
command = "if [ {task} = hang ]; then sleep 60; else echo x > {task}.txt; fi"

[[task]]
id = "hang"
timeout = "1s"
verify = "true"

[[task]]
id = "bad"
verify = "exit 3"
"""
    )

    # When it runs
    run = orchardist(repo, "run", "plan.toml", "--json")
    assert run.returncode == 1, run.stderr
    run_id = json.loads(run.stdout)["run"]
    status = orchardist(repo, "status", run_id).stdout

    # Then the timeout is the configured one, and each exit code says whose it is
    assert "agent timed out after 1s" in status
    assert "verify exit 3" in status
    assert "exit=" not in status
    # and the hung agent's log ends saying it was killed, why and after how long
    log = orchardist(repo, "logs", run_id, "hang").stdout.rstrip().splitlines()
    assert log[-1].startswith("orchardist: killed the agent after ")
    assert log[-1].endswith("it timed out (limit 1s)")


def test_every_subcommand_and_argument_has_help_text(repo: Path) -> None:
    import argparse

    from orchardist.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        assert command.description, name
        for action in command._actions:
            assert action.help, (name, action.dest)
    # and through the real command line
    shown = orchardist(repo, "runs", "--help")
    assert shown.returncode == 0
    assert "List runs in this repository" in shown.stdout


def test_without_a_terminal_each_change_is_printed_once_and_a_failure_names_its_command_once(
    repo: Path,
) -> None:
    (repo / "plan.toml").write_text(
        '[agents.sh]\nkind = "shell"\ncommand = "echo x > {task}.txt"\n'
        '[[task]]\nid = "a"\nverify = "exit 3"\n'
    )
    out = orchardist(repo, "run", "plan.toml").stdout
    changes = [line.split(" ", 1)[1] for line in out.splitlines() if line[:2].isdigit()]
    assert "  a attempt 1: running on sh" in changes
    assert "a: running" not in changes
    failed = next(line for line in changes if line.startswith("  a attempt 1: failed"))
    assert failed.endswith("verify command failed (3): exit 3")
    # and `logs --attempt` and `show --attempt` show the same attempt's log alike
    run_id = json.loads(orchardist(repo, "runs", "--json").stdout)[0]["run"]
    logs = orchardist(repo, "logs", run_id, "a", "--attempt", "1").stdout
    shown = orchardist(repo, "show", run_id, "a", "--attempt", "1").stdout
    assert logs.startswith("==> a attempt 1 (failed) ")
    assert shown.endswith(logs)
    for command in ("logs", "show"):
        missing = orchardist(repo, command, run_id, "a", "--attempt", "9")
        assert (missing.returncode, missing.stderr) == (
            2,
            "error: task 'a' has no attempts numbered 9\n",
        )


def test_the_live_table_starts_a_resumed_runs_tasks_where_they_were_and_ticks_by_itself() -> None:
    import io

    from rich.console import Console

    from orchardist.runs.display import LiveTable
    from orchardist.specs import Plan, RunConfig, TaskSpec
    from orchardist.state.agentrecords import AgentProfile

    tasks = tuple(TaskSpec(i, i, "", "bot", n) for n, i in enumerate(("old", "new")))
    plan = Plan(Path("p"), Path("."), RunConfig(), {"bot": AgentProfile("bot", "shell")}, tasks, "")
    out = io.StringIO()
    table = LiveTable(plan, Console(file=out, width=100), "run", {"old": "done"})
    try:
        assert table.rows["old"]["state"] == "done"
        assert table.rows["new"]["state"] == "pending"
        # redrawn from the rows at each refresh, not only when an event arrives
        assert table.live._get_renderable == table._render
    finally:
        table.close()


def test_the_live_table_of_a_large_plan_draws_the_tasks_under_way_and_counts_the_rest() -> None:
    import io

    from rich.console import Console

    from orchardist.runs.display import LiveTable
    from orchardist.specs import Plan, RunConfig, TaskSpec
    from orchardist.state.agentrecords import AgentProfile
    from orchardist.state.eventlog import Event
    from orchardist.state.events import Kind

    # Given a plan of 2,000 tasks: 1,990 done, 3 running, the rest pending
    ids = [f"t{n:04d}" for n in range(2000)]
    tasks = tuple(TaskSpec(i, i, "", "bot", n) for n, i in enumerate(ids))
    plan = Plan(Path("p"), Path("."), RunConfig(), {"bot": AgentProfile("bot", "shell")}, tasks, "")
    out = io.StringIO()
    table = LiveTable(plan, Console(file=out, width=100), "run")
    try:
        for n, task in enumerate(ids[:1993]):
            for state in ("ready", "running", "done"):
                if state == "done" and n >= 1990:
                    break
                table.on_event(Event("r", Kind.TASK, float(n), task, None, {"state": state}))

        # When it is drawn
        shown = io.StringIO()
        Console(file=shown, width=100).print(table._render())
    finally:
        table.close()

    # Then the running tasks and the last to end are rows, the rest a line and the counts
    text = shown.getvalue()
    for task in ("t1990", "t1991", "t1992", "t1989", "t1985"):
        assert task in text
    assert "t0000" not in text and "t1984" not in text and "t1999" not in text
    assert "... and 1992 more tasks" in text
    assert "1990 done  7 pending  3 running" in text
    assert len(text.splitlines()) < 20


def test_the_live_table_shows_a_reason_an_agent_wrote_as_text_without_escapes() -> None:
    import io
    import re

    from rich.console import Console

    from orchardist.runs.display import LiveTable
    from orchardist.specs import Plan, RunConfig, TaskSpec
    from orchardist.state.agentrecords import AgentProfile
    from orchardist.state.eventlog import Event
    from orchardist.state.events import Kind

    # Given: a task failed for a reason quoting an agent: rich markup and a title escape
    tasks = (TaskSpec("t", "t", "", "bot", 0),)
    plan = Plan(Path("p"), Path("."), RunConfig(), {"bot": AgentProfile("bot", "shell")}, tasks, "")
    table = LiveTable(plan, Console(file=io.StringIO(), width=100), "run")
    reason = "bad files: [/bold]\x1b]0;pwned\x07[red]x.py"
    try:
        table.on_event(Event("r", Kind.TASK, 1.0, "t", None, {"state": "failed", "reason": reason}))

        # When: it is drawn
        shown = io.StringIO()
        Console(file=shown, width=100).print(table._render())
    finally:
        table.close()

    # Then: the reason is there as written, markup and all, but without the escape
    assert "bad files: [/bold][red]x.py" in shown.getvalue()
    assert re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown.getvalue()) is None
