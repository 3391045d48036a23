"""Plan keys of pipeline tasks: ``pipeline = "debug" | "fix"`` and ``stages.NAME`` routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.errors import PlanError
from orchardist.plan.loading import load_plan
from support import write_plan

AGENTS = """
[agents.bot]
kind = "shell"
command = "true"

[agents.cheap]
kind = "shell"
command = "true"

[agents.strong]
kind = "shell"
command = "true"
"""


def problems_of(plan: Path) -> list[tuple[str | None, str | None, str]]:
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    return [(p.task, p.field, p.message) for p in caught.value.problems]


def test_a_debug_task_becomes_its_stage_tasks_each_with_its_own_routing(repo: Path) -> None:
    # Given a debug task routing localize to a cheap model and fix to three candidates
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "first"
        agent = "bot"

        [[task]]
        id = "bug"
        prompt = "parse() crashes on empty input"
        agent = "bot"
        depends_on = ["first"]
        retries = 1
        timeout = "10m"
        pipeline = "debug"
        stages.localize = { agent = "cheap", timeout = "2m", retries = 0 }
        stages.fix = { agent = ["bot", "strong", "cheap"] }
        stages.reproduce.retries = 2
        """,
    )
    # When it is loaded
    loaded = load_plan(plan)
    # Then it is a chain of stage tasks; the fix keeps the task's id (dependents wait for it)
    stages = [t for t in loaded.tasks if t.pipeline_task == "bug"]
    assert [(t.id, t.stage, t.depends_on) for t in stages] == [
        ("bug.reproduce", "reproduce", ("first",)),
        ("bug.audit", "audit", ("bug.reproduce",)),
        ("bug.localize", "localize", ("bug.audit",)),
        ("bug", "fix", ("bug.localize",)),
    ]
    by_id = {t.id: t for t in stages}
    routing = {t.id: (t.agent, t.agents, t.candidates, t.retries, t.timeout_s) for t in stages}
    assert routing == {
        "bug.reproduce": ("bot", (), 1, 2, 600.0),
        "bug.audit": ("cheap", (), 1, 1, 600.0),  # another profile than reproduce's
        "bug.localize": ("cheap", (), 1, 0, 120.0),
        "bug": ("bot", ("bot", "strong", "cheap"), 3, 1, 600.0),
    }
    # and the stages before the fix verify nothing: they are judged by their handoff
    assert by_id["bug.localize"].verify == () and by_id["bug.localize"].allow_empty
    assert all(t.pipeline == "debug" and t.prompt == by_id["bug"].prompt for t in stages)


def test_a_fix_pipeline_starts_with_a_single_shot_and_audit_false_drops_the_audit(
    repo: Path,
) -> None:
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        agent = "bot"
        retries = 2
        pipeline = "fix"
        stages.audit = false
        """,
    )
    tasks = load_plan(plan).tasks
    assert [(t.id, t.stage) for t in tasks] == [
        ("bug.shot", "shot"),
        ("bug.reproduce", "reproduce"),
        ("bug.localize", "localize"),
        ("bug", "fix"),
    ]
    assert tasks[0].retries == 0  # a single shot


def test_a_task_naming_a_failing_check_has_no_reproduce_or_audit_stage(repo: Path) -> None:
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        agent = "bot"
        pipeline = "debug"
        check = "pytest -q tests/test_bug.py"
        """,
    )
    tasks = load_plan(plan).tasks
    assert [(t.id, t.check) for t in tasks] == [
        ("bug.localize", None),
        ("bug", "pytest -q tests/test_bug.py"),
    ]


def test_a_stage_id_taken_by_another_task_is_a_problem(repo: Path) -> None:
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        agent = "bot"
        pipeline = "debug"

        [[task]]
        id = "bug.localize"
        agent = "bot"
        """,
    )
    assert problems_of(plan) == [("bug", "id", "its localize stage 'bug.localize' is a task id")]


def test_a_task_without_pipeline_has_no_stages(repo: Path) -> None:
    plan = write_plan(repo, AGENTS + '[[task]]\nid = "t"\nagent = "bot"\n')
    (task,) = load_plan(plan).tasks
    assert (task.pipeline, dict(task.stages), task.stage) == (None, {}, "")


def test_pipeline_problems_are_located_with_did_you_mean(repo: Path) -> None:
    # Given a debug task with a misspelt stage, a misspelt stage key, bad values and an
    # unknown agent, and a task with stages but no pipeline
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        agent = "bot"
        pipeline = "debugg"
        stages.localise = { agent = "cheap" }
        stages.fix = { agnet = "bot", candidates = 0, agent = "nobody" }
        stages.audit = "no"
        stages.reproduce = { timeout = "soon", retries = -1 }

        [[task]]
        id = "plain"
        agent = "bot"
        stages.fix = { agent = "bot" }
        """,
    )
    # When it is validated, then every problem is reported at once, each located
    found = problems_of(plan)
    assert ("bug", "pipeline", 'expected one of "debug", "fix"') in found
    assert (
        "bug",
        "stages.localise",
        "unknown stage 'localise'; did you mean 'localize'?",
    ) in found
    assert ("bug", "stages.fix.agnet", "unknown key 'agnet'; did you mean 'agent'?") in found
    assert ("bug", "stages.fix.candidates", "expected a whole number ≥ 1") in found
    assert any(
        (t, fl) == ("bug", "stages.fix.agent") and m.startswith("unknown agent 'nobody'")
        for t, fl, m in found
    )
    assert ("bug", "stages.audit", "expected a table (or false)") in found
    assert any(t == "bug" and f == "stages.reproduce.timeout" for t, f, _ in found)
    assert ("bug", "stages.reproduce.retries", "expected a whole number ≥ 0") in found
    assert ("plain", "stages", 'stages need pipeline = "debug" or "fix"') in found
