"""Plan keys of pipeline tasks: ``pipeline = "debug" | "fix"`` and ``stages.NAME`` routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.errors import PlanError
from orchardist.plan import StageSpec, load_plan
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


def test_a_debug_task_reads_its_per_stage_routing(repo: Path) -> None:
    # Given a debug task routing localize to a cheap model and fix to three candidates
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        prompt = "parse() crashes on empty input"
        agent = "bot"
        pipeline = "debug"
        stages.localize = { agent = "cheap", timeout = "2m", retries = 0 }
        stages.fix = { agent = ["bot", "strong", "cheap"] }
        stages.reproduce.retries = 2
        """,
    )
    # When it is loaded
    task = load_plan(plan).task("bug")
    # Then every override is kept, and an agent list counts as that many candidates
    assert task.pipeline == "debug"
    assert task.audit is True
    assert task.stages["localize"] == StageSpec("localize", ("cheap",), 120.0, 0, None)
    assert task.stages["fix"] == StageSpec("fix", ("bot", "strong", "cheap"), None, None, 3)
    assert task.stages["reproduce"] == StageSpec("reproduce", (), None, 2, None)


def test_stages_audit_false_turns_the_audit_off(repo: Path) -> None:
    plan = write_plan(
        repo,
        AGENTS
        + """
        [[task]]
        id = "bug"
        agent = "bot"
        pipeline = "fix"
        stages.audit = false
        """,
    )
    task = load_plan(plan).task("bug")
    assert task.pipeline == "fix"
    assert task.audit is False
    assert "audit" not in task.stages


def test_a_task_without_pipeline_has_no_stages(repo: Path) -> None:
    plan = write_plan(repo, AGENTS + '[[task]]\nid = "t"\nagent = "bot"\n')
    task = load_plan(plan).task("t")
    assert (task.pipeline, dict(task.stages), task.audit) == (None, {}, True)


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
