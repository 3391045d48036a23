"""The dashboard's review actions over HTTP: the page's JSON checked field by field, a
decision on a task that awaits no review refused with the reason, cross-site POSTs refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support import Finished
from web.dashboard import serving
from web.test_api import finished_plan

RunPlan = Callable[..., Finished]
ACTION = {"X-Orchardist-Action": "1"}


def test_a_decision_is_checked_and_refused_where_no_review_is_awaited(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run (nothing awaits review)
    done = run_plan(finished_plan(repo))
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
