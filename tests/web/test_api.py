"""The dashboard's HTTP side through a real ``orchardist serve``: auth, JSON, SSE, metrics."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from orchardist import Workspace
from orchardist.engine.scheduler import Scheduler
from run_support import ORCHARDIST, Forked, orchardist
from support import Finished, git, write_plan
from web.dashboard import Dashboard, served_run, serving

RunPlan = Callable[..., Finished]

PLAN = """
[run]
verify = "none"

[agents.fake]
kind = "scripted"
[agents.fake.script]
base = {{ write = {{ "base.txt" = "b\\n" }}, print = "<script>alert(1)</script> made base" }}
left = {{ write = {{ "left.txt" = "l\\n" }} }}
right = {{ write = {{ "right.txt" = "r\\n" }} }}
top = {{ {top} }}

[[task]]
id = "base"
agent = "fake"

[[task]]
id = "left"
agent = "fake"
depends_on = ["base"]

[[task]]
id = "right"
agent = "fake"
depends_on = ["base"]

[[task]]
id = "top"
agent = "fake"
depends_on = ["left", "right"]
"""


FINISHED = PLAN.format(top='write = { "top.txt" = "t\\n" }')


def finished_plan(repo: Path) -> Path:
    return write_plan(repo, FINISHED)


# Three independent tasks, each with a log (the log test's run: FINISHED's first three, with no
# dependencies between them)
THREE_LOGS = """
[run]
verify = "none"

[agents.fake]
kind = "scripted"
[agents.fake.script]
base = { write = { "base.txt" = "b\\n" } }
left = { write = { "left.txt" = "l\\n" } }
right = { write = { "right.txt" = "r\\n" } }

[[task]]
id = "base"
agent = "fake"

[[task]]
id = "left"
agent = "fake"

[[task]]
id = "right"
agent = "fake"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Finished, Dashboard]]:
    """A finished run of ``FINISHED`` and its dashboard, once for the tests that only read them."""
    with served_run(tmp_path_factory, FINISHED) as both:
        yield both


def sse_events(response: httpx.Response, until_seq: int) -> list[dict[str, object]]:
    """Read server-sent events until the one with ``until_seq`` arrived."""
    out: list[dict[str, object]] = []
    ident = None
    for line in response.iter_lines():
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: ") and ident is not None:
            payload = json.loads(line[6:])
            assert payload["seq"] == ident
            out.append(payload)
            if ident >= until_seq:
                break
    return out


def test_every_request_needs_the_token_and_a_known_host(
    served: tuple[Finished, Dashboard],
) -> None:
    _, dash = served
    with dash.client(auth=False) as anon:
        # Given no token: the page, the API and the metrics are refused
        for path in ("/", "/api/runs", "/metrics", "/static/app.js"):
            assert anon.get(path).status_code == 401, path
        # a wrong token in the URL too
        assert anon.get("/?token=wrong").status_code == 401
        # the right one is taken from the URL once and kept in an HttpOnly cookie
        first = anon.get(f"/?token={dash.token}")
        assert first.status_code == 303 and first.headers["location"].endswith("/")
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert anon.get("/api/runs").status_code == 200  # the client kept the cookie
    with dash.client() as client:
        # a Host header that is not the server's address (DNS rebinding) is refused
        assert client.get("/api/runs", headers={"Host": "evil.example:80"}).status_code == 400


def test_the_api_serves_runs_tasks_logs_diffs_and_the_graph(
    served: tuple[Finished, Dashboard],
) -> None:
    done, dash = served
    with dash.client() as client:
        (row,) = client.get("/api/runs").json()
        assert (row["run"], row["state"], row["tasks"]) == (done.run.id, "done", 4)

        doc = client.get(f"/api/runs/{done.run.id}").json()
        assert [t["id"] for t in doc["tasks"]] == ["base", "left", "right", "top"]
        assert sorted(map(tuple, doc["graph"]["edges"])) == [
            ("base", "left"),
            ("base", "right"),
            ("left", "top"),
            ("right", "top"),
        ]
        assert doc["graph"]["critical_path"][0] == "base"
        assert doc["graph"]["critical_path"][-1] == "top"
        assert all(a["started_at"] <= a["ended_at"] for t in doc["tasks"] for a in t["attempts"])

        task = client.get(f"/api/runs/{done.run.id}/tasks/base").json()
        (attempt,) = task["attempts"]
        assert "<script>alert(1)</script> made base" in attempt["log_tail"]["text"]
        assert "+b" in attempt["diff"] and "base.txt" in attempt["diff"]

        assert client.get("/api/runs/nope").status_code == 404
        assert client.get(f"/api/runs/{done.run.id}/tasks/nope").status_code == 404


def test_a_log_an_agent_replaced_by_a_symlink_or_a_fifo_is_shown_as_not_available(
    repo: Path, tmp_path: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run whose "base" log became a symlink to a secret outside, and whose
    # "left" log a FIFO no one writes to (an open of it would wait for good)
    done = run_plan(write_plan(repo, THREE_LOGS))
    assert done.state.value == "done"
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN-4242\n")
    logs = {a.task_id: Path(a.log_path) for a in done.ws.store.attempts(done.run.id)}
    logs["base"].unlink()
    logs["base"].symlink_to(secret)
    logs["left"].unlink()
    os.mkfifo(logs["left"])
    with serving(repo) as dash, dash.client() as client:
        # When: the dashboard shows their tails, and streams the symlinked one
        tails = {
            task: client.get(f"/api/runs/{done.run.id}/tasks/{task}").json()["attempts"][0]
            for task in ("base", "left", "right")
        }
        stream = client.get(f"/api/runs/{done.run.id}/tasks/base/attempts/1/log").text
    # Then: neither is read; the untouched log still is
    assert tails["base"]["log_tail"]["text"] == "(log not available)"
    assert tails["left"]["log_tail"]["text"] == "(log not available)"
    assert tails["right"]["log_tail"]["text"] != "(log not available)"
    assert "TOKEN-4242" not in stream and "event: end" in stream


def test_the_event_stream_resumes_after_the_last_event_id(
    served: tuple[Finished, Dashboard],
) -> None:
    done, dash = served
    seqs = [e.seq for e in done.ws.store.events(done.run.id)]
    resume_after = seqs[len(seqs) // 2]
    with dash.client() as client:
        url = f"/api/runs/{done.run.id}/events"
        with client.stream("GET", url, headers={"Last-Event-ID": str(resume_after)}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            got = sse_events(response, seqs[-1])
    # Then: exactly the events after the one it had, in order
    assert [e["seq"] for e in got] == [s for s in seqs if s > resume_after]


def test_the_event_stream_delivers_events_as_they_happen(
    repo: Path, run_plan: RunPlan, tmp_path: Path
) -> None:
    # Given: a run whose last task waits for a file the test creates once it sees it start
    gate = tmp_path / "go"
    Workspace.open(repo).store.close()  # a store (no run yet) exists before the dashboard starts
    gated = f"until [ -e {gate} ]; do sleep 0.01; done; echo t > top.txt"
    plan = write_plan(
        repo,
        PLAN.format(top='write = { "top.txt" = "t\\n" }').replace(
            'id = "top"\nagent = "fake"', 'id = "top"\nagent = "gated"'
        )
        + f'\n[agents.gated]\nkind = "shell"\ncommand = {json.dumps(gated)}\n',
    )
    started = threading.Event()
    ids: list[str] = []
    box: list[Finished] = []

    def on_scheduler(scheduler: Scheduler) -> None:
        ids.append(scheduler.run_id)
        started.set()

    runner = threading.Thread(target=lambda: box.append(run_plan(plan, on_scheduler=on_scheduler)))
    seen: list[dict[str, object]] = []
    keepalives = 0  # a stream with nothing new for 15 s says so: this run never pauses that long
    with serving(repo) as dash, dash.client() as client:
        runner.start()
        try:
            assert started.wait(60)
            with client.stream("GET", f"/api/runs/{ids[0]}/events") as response:
                for line in response.iter_lines():
                    keepalives += line.startswith(": keep-alive")
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    seen.append(event)
                    if event["kind"] == "attempt" and event["task"] == "top":
                        gate.touch()  # the last task runs: let it finish
                    if event["kind"] == "run" and event["data"].get("state") == "done":
                        break
        finally:
            gate.touch()
            runner.join(timeout=120)
    # Then: the stream carried the run to its end, the last task's merge included, each
    # event as it landed (none waited for the keep-alive)
    assert any(e["kind"] == "merge" and e["task"] == "top" for e in seen)
    assert box and box[0].state.value == "done"
    assert keepalives == 0


def test_metrics_speak_the_prometheus_text_format(served: tuple[Finished, Dashboard]) -> None:
    _, dash = served
    with dash.client() as client:
        response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert 'orchardist_runs{state="done"} 1' in lines
    assert 'orchardist_tasks{state="done"} 4' in lines
    assert 'orchardist_attempts{agent="fake",state="merged"} 4' in lines
    assert 'orchardist_attempt_duration_seconds_count{agent="fake"} 4' in lines
    assert "# TYPE orchardist_attempt_duration_seconds histogram" in lines


def test_serving_another_address_needs_an_explicit_token(repo: Path) -> None:
    out = orchardist(repo, "serve", "--host", "0.0.0.0", "-C", str(repo), timeout_s=60)
    assert out.returncode == 2 and "--token" in out.stderr and "Traceback" not in out.stderr


def test_a_repository_without_runs_serves_an_empty_list(repo: Path) -> None:
    with serving(repo) as dash, dash.client() as client:
        assert client.get("/api/runs").json() == []
    assert not (repo / ".git" / "orchardist" / "state.db").exists()


def gated_plan(repo: Path, gate: Path) -> Path:
    """A plan whose only task, ``t``, waits for ``gate`` to exist."""
    return write_plan(
        repo,
        f"""
        [run]
        verify = "none"

        [agents.gated]
        kind = "shell"
        command = "until [ -e {gate} ]; do sleep 0.01; done; echo t > t.txt"

        [[task]]
        id = "t"
        agent = "gated"
        """,
    )


@contextmanager
def run_served(plan: Path) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """``orchardist run PLAN --serve`` in a child: the process, the dashboard's base URL and
    its token."""
    proc = Forked(
        [*ORCHARDIST, "run", str(plan), "--serve"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        url = next(line.split()[1] for line in proc.stderr if line.startswith("dashboard: "))
        base, _, token = url.partition("/?token=")
        yield proc, base, token
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_run_serve_shows_the_run_while_it_goes_on(repo: Path, tmp_path: Path) -> None:
    # Given: a run whose only task waits for a file, started with --serve
    gate = tmp_path / "go"
    try:
        with run_served(gated_plan(repo, gate)) as (proc, base, token):
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=base, headers=headers, timeout=30.0) as client:
                # Then: the dashboard lists the run while it runs
                (row,) = client.get("/api/runs").json()
                assert row["state"] == "running"
                gate.touch()
                assert proc.wait(timeout=120) == 0
                # and it is gone with the run
                with pytest.raises(httpx.ConnectError):
                    client.get("/api/runs")
    finally:
        gate.touch()


def wait_for_run_state(client: httpx.Client, run_id: str, states: set[str]) -> str:
    """Follow the run's event stream until the run is in one of ``states``."""
    state = client.get(f"/api/runs/{run_id}").json()["state"]
    if state in states:
        return str(state)
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["kind"] == "run" and event["data"].get("state") in states:
                    return str(event["data"]["state"])
    raise AssertionError("the stream ended")


def test_cancel_and_retry_from_the_dashboard(repo: Path, tmp_path: Path) -> None:
    # Given: a live run whose task waits for a file, and the dashboard
    gate = tmp_path / "go"
    with (
        run_served(gated_plan(repo, gate)) as (proc, base, token),
        httpx.Client(base_url=base, timeout=60.0) as client,
    ):
        client.get(f"/?token={token}")  # the cookie, as a browser would have it
        (row,) = client.get("/api/runs").json()
        run_id = row["run"]
        # When: a POST without our header (a cross-site form could send one) is refused,
        # and so is one whose Origin is another site
        assert client.post(f"/api/runs/{run_id}/cancel").status_code == 403
        evil = {"X-Orchardist-Action": "1", "Origin": "http://evil.example"}
        assert client.post(f"/api/runs/{run_id}/cancel", headers=evil).status_code == 403
        # then the real one
        ours = {"X-Orchardist-Action": "1", "Origin": base}
        assert client.post(f"/api/runs/{run_id}/cancel", headers=ours).status_code == 202
        assert proc.wait(timeout=120) != 0

    # Then: cancelled; and a retry from the dashboard (with the gate open) finishes the task
    gate.touch()
    with serving(repo) as dash, dash.client() as client:
        assert client.get(f"/api/runs/{run_id}").json()["state"] == "cancelled"
        headers = {"X-Orchardist-Action": "1"}
        bad = client.post(f"/api/runs/{run_id}/retry", json={"tasks": ["nope"]}, headers=headers)
        assert bad.status_code == 400
        started = client.post(f"/api/runs/{run_id}/retry", json={"tasks": ["t"]}, headers=headers)
        assert started.status_code == 202
        assert wait_for_run_state(client, run_id, {"done", "failed"}) == "done"
    assert git(repo, "show", f"orchardist/{run_id}:t.txt").strip() == "t"
