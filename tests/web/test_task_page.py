"""The task page's data through a real ``orchardist serve``: the winner first, the finding
instead of the command, the verify results test by test, the agent's transcript; the runs
list's plan name and the favicon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchardist import Workspace, create_run, load_plan
from support import Finished, write_plan
from web.dashboard import Dashboard, served_run, serving

TESTS = "def test_good():\n    assert True\n\n\ndef test_bad():\n    assert False\n"
SUITE = "python -m pytest -q -p no:cacheprovider test_pair.py"

# Claude Code's stream-json: what the `claude` kind prints (see agents/claude.py)
CLAUDE_STREAM = "\n".join(
    json.dumps(event)
    for event in (
        {"type": "system", "subtype": "init", "session_id": "s1"},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "Reading."}]}},
        {
            "type": "assistant",
            "message": {
                "content": [{"type": "tool_use", "name": "Read", "input": {"file": "a.py"}}]
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "content": "print(1)"}]},
        },
        {"type": "result", "session_id": "s1", "is_error": False, "result": "Done."},
    )
)

PLAN = f"""
[run]
verify = "none"

[agents.fake]
kind = "scripted"
[agents.fake.script]
second = [{{ write = {{ "first.txt" = "1" }}, exit = 3 }}, {{ write = {{ "second.txt" = "2" }} }}]
pair = {{ write = {{ "test_pair.py" = {json.dumps(TESTS)} }} }}
talk = {{ write = {{ "talk.txt" = "t\\n" }}, print = {json.dumps(CLAUDE_STREAM)} }}

[[task]]
id = "second"
agent = "fake"
retries = 1

[[task]]
id = "pair"
agent = "fake"
verify = {json.dumps(SUITE)}

[[task]]
id = "talk"
agent = "fake"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Finished, Dashboard]]:
    """A finished run of ``PLAN`` and its dashboard, once for the tests that only read them."""
    with served_run(tmp_path_factory, PLAN) as both:
        yield both


def test_the_task_page_shows_tests_one_by_one_the_winner_first_and_a_transcript(
    served: tuple[Finished, Dashboard],
) -> None:
    # Given: a finished run: a task that won on its second attempt, a task whose pytest suite
    # has one failing test, and a task whose agent printed Claude Code's stream
    done, dash = served
    run = done.run.id
    with dash.client() as client:
        second = client.get(f"/api/runs/{run}/tasks/second").json()
        pair = client.get(f"/api/runs/{run}/tasks/pair").json()
        talk = client.get(f"/api/runs/{run}/tasks/talk").json()
        doc = client.get(f"/api/runs/{run}").json()

    # Then: the winner (attempt 2) comes before the loser, on the task page and the run page
    assert [a["n"] for a in second["attempts"]] == [2, 1]
    run_task = next(t for t in doc["tasks"] if t["id"] == "second")
    assert [a["n"] for a in run_task["attempts"]] == [2, 1]

    # the failing suite: the finding names the failing test, not the command that found it
    assert pair["state"] == "failed" and "pytest" in pair["reason"]
    run_pair = next(t for t in doc["tasks"] if t["id"] == "pair")
    for finding in (pair["finding"], run_pair["finding"], pair["attempts"][0]["finding"]):
        assert "test_bad" in finding and "pytest" not in finding, finding
    # and the verify results come test by test
    (report,) = pair["attempts"][0]["tests"]
    assert report["command"] == SUITE
    assert report["failed"] == ["test_pair::test_bad"]
    assert report["passed"] == ["test_pair::test_good"]

    # the transcript: the messages, the tool call and its result, not the raw lines
    entries = [(e["kind"], e["who"], e["text"]) for e in talk["attempts"][0]["transcript"]]
    assert ("message", "assistant", "Reading.") in entries
    assert ("tool", "Read", '{"file": "a.py"}') in entries
    assert ("result", "", "print(1)") in entries
    assert not any('"type"' in text for _, _, text in entries)


def test_the_runs_list_names_the_plan_and_the_dashboard_has_a_favicon(
    served: tuple[Finished, Dashboard],
) -> None:
    # Given: a run of a plan file called plan.toml
    _, dash = served
    with dash.client() as client:
        (row,) = client.get("/api/runs").json()
        icon = client.get("/favicon.ico")
        page = client.get("/").text
    # Then: the runs list names the plan; the browser finds an icon both ways
    assert row["plan_name"] == "plan.toml"
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in icon.text
    assert 'rel="icon"' in page


PIPELINE = """
[agents.fake]
kind = "scripted"

[[task]]
id = "bug"
agent = "fake"
prompt = "mean() fails on an empty list"
pipeline = "fix"

[[task]]
id = "docs"
agent = "fake"
prompt = "write the docs"
"""


def test_a_pipelines_stages_are_shown_in_pipeline_order(repo: Path) -> None:
    # Given: a run of a "fix" pipeline (its stages share their task's place in the plan, and
    # their names sort otherwise: bug, bug.audit, bug.localize, bug.reproduce, bug.shot)
    plan = load_plan(write_plan(repo, PIPELINE))
    ws = Workspace.open(repo)
    try:
        run = create_run(ws, plan)
    finally:
        ws.store.close()
    with serving(repo) as dash, dash.client() as client:
        doc = client.get(f"/api/runs/{run.id}").json()
    # Then: the run page lists them as the pipeline runs them, then the next task
    stages = ["bug.shot", "bug.reproduce", "bug.audit", "bug.localize", "bug"]
    assert [t["id"] for t in doc["tasks"]] == [*stages, "docs"]
