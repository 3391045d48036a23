"""The dashboard's review actions over HTTP: the page's JSON checked field by field, a
decision on a task that awaits no review refused with the reason, cross-site POSTs refused."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from run_support import status, wait_until
from support import Finished, write_plan
from web.dashboard import serving

RunPlan = Callable[..., Finished]
ACTION = {"X-Orchardist-Action": "1"}

# One task that ends done, so nothing awaits review (one attempt, not test_api's four)
DONE = """
[run]
verify = "none"

[agents.fake]
kind = "scripted"
[agents.fake.script]
base = { write = { "base.txt" = "b\\n" } }

[[task]]
id = "base"
agent = "fake"
"""


def test_a_decision_is_checked_and_refused_where_no_review_is_awaited(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run (nothing awaits review)
    done = run_plan(write_plan(repo, DONE))
    assert done.state.value == "done"
    url = f"/api/runs/{done.run.id}/tasks/base/review"
    with serving(repo) as dash, dash.client() as client:
        assert client.get("/api/review").json() == []
        # When: the page sends bodies that are no decision
        bad = {
            "verdict": ({"verdict": "merge"}, "verdict"),
            "text": ({"verdict": "reject", "text": 3}, "text"),
            "line": (
                {"verdict": "changes", "lines": [{"path": "a", "line": 0, "text": "x"}]},
                "lines[0].line",
            ),
            "not json": ("{", ""),
        }
        answers = {
            name: client.post(
                url,
                headers={**ACTION, "Content-Type": "application/json"},
                content=body if isinstance(body, str) else None,
                json=None if isinstance(body, str) else body,
            )
            for name, (body, _) in bad.items()
        }
        # a well-formed decision on a task that is done
        done_task = client.post(url, headers=ACTION, json={"verdict": "approve"})
        # and one without the action header (what a cross-site form would send)
        cross = client.post(url, json={"verdict": "approve"})
    # Then: 400 naming the field; 409 saying the task is done; 403
    for name, (_, field) in bad.items():
        assert answers[name].status_code == 400, name
        assert field in answers[name].json()["error"], name
    assert done_task.status_code == 409
    assert "is done, not awaiting review" in done_task.json()["error"]
    assert cross.status_code == 403


GATED = """
[run]
verify = "none"
review = "human"

[agents.fake]
kind = "scripted"
[agents.fake.script]
greet = { write = { "greet.py" = "def greet(name):\\n    return 'hi ' + name\\n" } }

[[task]]
id = "greet"
agent = "fake"
"""


def test_a_decision_made_while_no_orchestrator_runs_waits_for_the_run(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a run that ended awaiting review (its orchestrator is gone)
    done = run_plan(write_plan(repo, GATED))
    assert done.state.value == "awaiting_review"
    url = f"/api/runs/{done.run.id}/tasks/greet"
    change = {
        "verdict": "changes",
        "text": "Say Hello.",
        "lines": [{"path": "greet.py", "line": 2, "text": "capitalise"}],
    }
    with serving(repo) as dash, dash.client() as client:
        (waiting,) = client.get("/api/review").json()
        # When: a change request with a line comment is sent from the page
        first = client.post(f"{url}/review", headers=ACTION, json=change)
        task = client.get(url).json()
        again = client.post(f"{url}/review", headers=ACTION, json={"verdict": "approve"})
        off_patch = client.post(
            f"{url}/review",
            headers=ACTION,
            json={**change, "lines": [{"path": "nope.py", "line": 1, "text": "x"}]},
        )
    # Then: it is recorded (no orchestrator to wake), shown as not acted on yet, once
    assert (waiting["run_id"], waiting["task_id"], waiting["attempt"]) == (done.run.id, "greet", 1)
    assert first.status_code == 202 and first.json() == {"recorded": "changes", "woke": False}
    (decision,) = task["reviews"]
    assert decision["verdict"] == "changes" and decision["applied_at"] is None
    assert decision["lines"] == [{"path": "greet.py", "line": 2, "text": "capitalise"}]
    assert again.status_code == 409 and "decided already" in again.json()["error"]
    assert off_patch.status_code == 409 and "no file 'nope.py'" in off_patch.json()["error"]
    # and the store has it, as the CLI would read it
    (stored,) = done.ws.store.decisions(done.run.id, "greet")
    assert stored.decision.lines[0].quote  # the quoted line, filled by runs/review.py


def test_an_approval_made_while_no_orchestrator_runs_is_acted_on_by_resume_from_the_page(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a run that ended awaiting review, and an approval sent from the page
    done = run_plan(write_plan(repo, GATED))
    run_url = f"/api/runs/{done.run.id}"
    with serving(repo) as dash, dash.client() as client:
        approve = client.post(f"{run_url}/tasks/greet/review", headers=ACTION, json={})
        assert approve.status_code == 400  # no verdict
        approve = client.post(
            f"{run_url}/tasks/greet/review", headers=ACTION, json={"verdict": "approve"}
        )
        assert approve.status_code == 202
        # When: the page's "resume" button is pressed
        resumed = client.post(f"{run_url}/resume", headers=ACTION)
        assert resumed.status_code == 202
        # Then: orchardist resume (its own process) merges the patch and ends the run
        wait_until(
            "the resumed run ends",
            lambda: status(repo, done.run.id)["state"] == "done",
            timeout_s=120,
        )
        again = client.post(f"{run_url}/resume", headers=ACTION)
    assert again.status_code == 409 and "is done" in again.json()["error"]
    task = {t["id"]: t for t in status(repo, done.run.id)["tasks"]}["greet"]
    assert task["state"] == "done" and task["commit"]
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", f"{done.run.branch}:greet.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "return 'hi ' + name" in shown
