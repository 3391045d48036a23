"""``[run] notify``: a real command and a real HTTP server on 127.0.0.1 are told when a run ends.

Runs go through the CLI as a real process with shell agents; the notifier's effects are checked
where it leaves them (the POSTs the server got, files the command wrote, /proc), and what
orchardist recorded is checked only after that.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchardist import Workspace
from orchardist.errors import PlanError
from orchardist.plan.loading import load_plan
from orchardist.plan.planner import widening
from orchardist.runs.notify import Notice, notify
from run_support import only_run, orchardist, status
from support import alive, make_repo, write_plan


class Hook:
    """A webhook on 127.0.0.1 that keeps every POST and answers with ``status``, served by a
    fork of the test process: a server thread in the test process would make the CLI helpers
    of run_support start a new interpreter for each command instead of a fork of it."""

    def __init__(self, folder: Path, status: int = 204) -> None:
        self.status = status
        self.log = folder / "posts.jsonl"  # one line per POST: [headers, body]
        self.server = HTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?secret=s3cret"
        self.pid = 0

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(size))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with hook.log.open("a") as log:  # before the answer the notifier waits for
                    log.write(json.dumps([headers, body]) + "\n")
                self.send_response(hook.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    @property
    def posts(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """The POSTs received so far, oldest first."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [(headers, body) for headers, body in map(json.loads, lines)]

    def forget(self) -> None:
        """Forget the POSTs received so far."""
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> Hook:
        self.log.touch()
        self.pid = os.fork()
        if self.pid == 0:  # the server: never returns into the test
            try:
                self.server.serve_forever()
            finally:
                os._exit(0)
        self.server.server_close()  # the child's now
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    with Hook(tmp_path) as server:
        yield server


def plan_text(notify: str, extra: str = "") -> str:
    """Two tasks: one whose agent writes a file (merged), one whose agent fails."""
    return f"""
        [run]
        notify = {json.dumps(notify)}
        {extra}

        [agents.bot]
        kind = "shell"
        command = "echo fixed > fixed.txt"

        [agents.broken]
        kind = "shell"
        command = "echo no luck >&2; exit 3"

        [[task]]
        id = "good"
        agent = "bot"

        [[task]]
        id = "bad"
        agent = "broken"
        """


def notify_events(root: Path) -> list[dict[str, Any]]:
    """The data of the run's ``notify`` events."""
    ws = Workspace.open(root)
    try:
        return [e.data for e in ws.store.events(only_run(root)) if e.kind == "notify"]
    finally:
        ws.store.close()


def test_a_url_gets_the_ended_runs_state_counts_and_failed_tasks_as_a_json_post(
    tmp_path: Path, hook: Hook
) -> None:
    # Given a plan whose run will fail (one task merges, one task's agent exits 3)
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(hook.url))
    # When the run ends
    done = orchardist(repo, "run", "plan.toml")
    assert done.returncode == 1, done.stderr
    # Then the webhook got one JSON POST saying so
    ((headers, body),) = hook.posts
    assert headers["content-type"] == "application/json"
    run_id = only_run(repo)
    assert body["notice"] == "ended"
    assert (body["run"], body["state"]) == (run_id, "failed")
    assert body["plan"] == str(repo / "plan.toml")
    assert body["counts"] == {"done": 1, "failed": 1}
    ((failed),) = body["failed"]
    assert (failed["task"], failed["state"]) == ("bad", "failed")
    assert "exit" in failed["reason"], failed
    assert (body["dashboard"], body["review"]) == (None, [])
    assert body["branch"] == status(repo, run_id)["branch"]
    # and the run recorded it, without the URL's query (it may hold a secret)
    (event,) = notify_events(repo)
    assert event["state"] == "sent" and event["detail"] == "HTTP 204"
    assert event["target"] == hook.url.split("?")[0]
    assert "s3cret" not in json.dumps(event)


def test_a_command_gets_the_notice_on_stdin_and_in_its_environment(tmp_path: Path) -> None:
    # Given a notify command that writes what it was given to a file outside the repository
    got = tmp_path / "got.json"
    env = tmp_path / "env.txt"
    said = "$ORCHARDIST_RUN_ID $ORCHARDIST_RUN_STATE $ORCHARDIST_NOTICE"
    command = f'cat > {got} && echo "{said}" > {env}'
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(command))
    # When the run ends
    done = orchardist(repo, "run", "plan.toml")
    assert done.returncode == 1, done.stderr
    # Then the command ran once the run had ended, with the notice on stdin
    body = json.loads(got.read_text())
    run_id = only_run(repo)
    assert (body["run"], body["state"], body["notice"]) == (run_id, "failed", "ended")
    assert env.read_text().split() == [run_id, "failed", "ended"]
    (event,) = notify_events(repo)
    assert (event["state"], event["detail"]) == ("sent", "exit 0")


def test_a_hanging_notify_command_is_killed_with_its_children_and_the_run_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    # Given a notify command that starts a child which would outlive it, then hangs
    pid_file = tmp_path / "child.pid"
    late = tmp_path / "late"
    command = f"(sleep 30; touch {late}) & echo $! > {pid_file}; sleep 30"
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(command, 'notify_timeout = "1s"'))
    # When the run ends
    done = orchardist(repo, "run", "plan.toml")
    # Then the run's outcome and exit code are its own (failed: 1), not the notifier's
    assert done.returncode == 1, done.stderr
    assert "notify failed: timed out after 1s" in done.stderr
    # and the notifier's child really ran, and was killed with it (its process group)
    child = int(pid_file.read_text())
    assert not alive(child)
    assert not late.exists()
    (event,) = notify_events(repo)
    assert event["state"] == "failed" and "timed out" in event["detail"], event


def test_a_notifier_that_refuses_is_an_event_and_a_successful_run_still_exits_0(
    tmp_path: Path,
) -> None:
    # Given a webhook that answers 500, and a plan whose only task succeeds
    repo = make_repo(tmp_path / "repo")
    with Hook(tmp_path, status=500) as hook:
        text = plan_text(hook.url).split('[[task]]\n        id = "bad"')[0]
        write_plan(repo, text)
        done = orchardist(repo, "run", "plan.toml")
        assert len(hook.posts) == 1
    # Then the run is done (exit 0) and the failed notice is recorded
    assert done.returncode == 0, done.stderr
    assert status(repo, only_run(repo))["state"] == "done"
    (event,) = notify_events(repo)
    assert (event["state"], event["detail"]) == ("failed", "HTTP 500")


def test_a_run_that_ends_awaiting_review_tells_which_tasks_need_a_person(
    tmp_path: Path, hook: Hook
) -> None:
    # Given a plan whose passing task waits for a review, and whose other task fails
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(hook.url, 'review = "human"'))
    # When the run ends awaiting review (exit 3)
    done = orchardist(repo, "run", "plan.toml")
    assert done.returncode == 3, done.stderr
    # Then the webhook is told the run needs a person, and for which task
    ((_, body),) = hook.posts
    assert (body["notice"], body["state"]) == ("needs_review", "awaiting_review")
    assert body["review"] == ["good"]
    assert [f["task"] for f in body["failed"]] == ["bad"]
    (event,) = notify_events(repo)
    assert (event["state"], event["notice"]) == ("sent", "needs_review")


def test_a_needs_review_notice_names_the_tasks_and_the_dashboard(
    tmp_path: Path, hook: Hook
) -> None:
    # Given a finished run
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(hook.url))
    orchardist(repo, "run", "plan.toml")
    hook.forget()
    # When it is told that tasks await review, with the dashboard it was served on
    ws = Workspace.open(repo)
    try:
        run = ws.resolve_run(None)
        served = "http://127.0.0.1:8123/?token=abc"
        delivery = notify(
            ws.store,
            run,
            hook.url,
            5.0,
            Notice.NEEDS_REVIEW,
            cwd=repo,
            log_dir=tmp_path / "logs",
            dashboard=served,
            review=["good"],
        )
    finally:
        ws.store.close()
    # Then the webhook hears which tasks, and where to review them
    assert delivery.ok
    ((_, body),) = hook.posts
    assert (body["notice"], body["review"]) == ("needs_review", ["good"])
    assert body["dashboard"] == f"http://127.0.0.1:8123/runs/{run.id}?token=abc"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('""', "must not be empty: give a command or an http(s) URL"),
        ('"ftp://example.com/x"', "ftp:// is not supported: give an http(s) URL or a command"),
        ('"https:///path"', "the URL names no host"),
        ("3", "expected a string"),
    ],
)
def test_a_bad_notify_value_is_a_located_plan_error(
    tmp_path: Path, value: str, message: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(repo, f'[run]\nnotify = {value}\nnotify_timeout = "soon"\n')
    with pytest.raises(PlanError) as caught:
        load_plan(plan, require_tasks=False)
    found = {(p.field, p.message) for p in caught.value.problems}
    assert ("run.notify", message) in found, found
    assert any(f == "run.notify_timeout" for f, _ in found), found


def test_a_planned_plan_may_not_set_notify(tmp_path: Path) -> None:
    # Given a plan an agent wrote that sets a notify command (it would run unconfined)
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(repo, '[run]\nnotify = "curl -d @- https://example.com"\n')
    # Then it is among what widens what agents get, for the user to set
    assert any(w.startswith("run.notify:") for w in widening(load_plan(plan, False), {}))


def test_under_serve_the_notice_links_the_run_page_while_the_dashboard_still_answers(
    tmp_path: Path,
) -> None:
    # Given a notify command that opens the notice's dashboard link and keeps what it got
    got = tmp_path / "page.txt"
    opener = tmp_path / "open_link.py"
    opener.write_text(
        "import http.cookiejar, json, sys, urllib.request\n"
        "link = json.load(sys.stdin)['dashboard']\n"
        "jar = urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())\n"
        "opener = urllib.request.build_opener(jar)\n"
        "with opener.open(link, timeout=30) as page:\n"
        "    text = f'{page.status} {link}\\n'\n"
        "api = link.split('?')[0].replace('/runs/', '/api/runs/')\n"
        "with opener.open(api, timeout=30) as run:\n"  # the page's data, with its cookie
        "    text += run.read().decode()\n"
        f"open({str(got)!r}, 'w').write(text)\n"
    )
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, plan_text(f"{sys.executable} {opener}"))
    # When the run, served with --serve, ends
    done = orchardist(repo, "run", "plan.toml", "--serve")
    assert done.returncode == 1, done.stderr
    # Then the link named the run's page, and the page answered before the dashboard stopped
    run_id = only_run(repo)
    status_line, _, api = got.read_text().partition("\n")
    code, link = status_line.split(" ", 1)
    assert code == "200" and f"/runs/{run_id}?token=" in link, status_line
    assert json.loads(api)["run"] == run_id
