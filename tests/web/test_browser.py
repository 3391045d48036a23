"""The dashboard in a real browser (Debian's Chromium driven by Playwright) on a live run."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist.engine.scheduler import Scheduler
from realtools import require
from run_support import Gate
from support import Finished, write_plan
from web.browser_support import keep_screenshot
from web.dashboard import Dashboard, serving

pytestmark = pytest.mark.slow

RunPlan = Callable[..., Finished]
WAIT_MS = 60_000  # a loaded 2-core machine: conditions normally hold within a second

# Debian's chromium-headless-shell first: the headless-only build Playwright itself runs for
# headless tests, the same Blink in fewer processes and less CPU; the whole browser where it is
# missing.
CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium-headless-shell", "chromium", "chromium-browser"))),
    None,
)


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium, or a skip saying what is missing (a failure in CI)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = [
        name
        for name, ok in (("playwright", sync_playwright is not None), ("chromium", CHROMIUM))
        if not ok
    ]
    require(
        not missing,
        f"browser tests need {' and '.join(missing)} (apt-get install chromium-headless-shell)",
    )
    assert sync_playwright is not None
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


PLAN = """
[run]
verify = "none"
max_parallel = 2

[agents.fake]
kind = "scripted"
[agents.fake.script]
base = {{ write = {{ "base.txt" = "b\\n" }}, print = "<script>window.pwned = 1</script>" }}
left = {{ write = {{ "left.txt" = "l\\n" }} }}
right = {{ write = {{ "right.txt" = "r\\n" }} }}

[agents.gated]
kind = "shell"
command = {gated}

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
agent = "gated"
depends_on = ["left", "right"]
"""


def test_a_live_run_in_the_browser(
    repo: Path, run_plan: RunPlan, browser: Any, tmp_path: Path
) -> None:
    # Given: a run whose last task prints a line, waits, prints another, waits, then finishes
    with Gate(tmp_path / "one") as one, Gate(tmp_path / "two") as two:
        gated = f"echo first line && {one.waited()} && echo second line && {two.waited()}"
        plan = write_plan(repo, PLAN.format(gated=json.dumps(gated + " && echo t > top.txt")))
        started = threading.Event()
        ids: list[str] = []

        def on_scheduler(scheduler: Scheduler) -> None:
            ids.append(scheduler.run_id)
            started.set()

        box: list[Finished] = []
        runner = threading.Thread(
            target=lambda: box.append(run_plan(plan, on_scheduler=on_scheduler))
        )
        runner.start()
        try:
            assert started.wait(60)
            with serving(repo) as dash:
                follow_the_run(browser, dash, ids[0], one, two)
        finally:
            one.open()
            two.open()
            runner.join(timeout=120)
    assert box and box[0].state.value == "done"


def follow_the_run(browser: Any, dash: Dashboard, run_id: str, one: Gate, two: Gate) -> None:
    """The run's pages as it goes on, each step let through by the test: the graph and the log
    live, the task turning done, a diff, an agent's script shown as text, the token asked."""
    context = browser.new_context()  # pages of one context share the cookie
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{dash.base}/?token={dash.token}")  # the cookie is set from here on
    page.goto(f"{dash.base}/runs/{run_id}")
    page.evaluate("window.loadedOnce = 'yes'")

    # Then: the graph has one node per task; the last task shows running, live
    page.wait_for_function("document.querySelectorAll('#graph g.node').length === 4")
    page.wait_for_selector('#graph g.node[data-task="top"][data-state="running"]')

    # the task page tails the running attempt's log as it grows
    task_page = context.new_page()
    task_page.set_default_timeout(WAIT_MS)
    task_page.goto(f"{dash.base}/runs/{run_id}/tasks/top")
    task_page.evaluate("window.loadedOnce = 'yes'")
    task_page.wait_for_function(
        "document.querySelector('pre.log')?.textContent.includes('first line')"
    )
    # the running attempt's line says only what is known: no "· - · exit -"
    running = task_page.locator('section.attempt[data-state="running"] p.kv').inner_text()
    assert "-" not in running.split(), running
    assert "exit" not in running and "cost" not in running, running
    one.open()
    task_page.wait_for_function(
        "document.querySelector('pre.log')?.textContent.includes('second line')"
    )
    assert task_page.evaluate("window.loadedOnce") == "yes"  # no reload
    keep_screenshot(task_page, "task-page-running.png")

    # the run page turns the task done without a reload; one Gantt bar per attempt
    two.open()
    page.wait_for_selector('#graph g.node[data-task="top"][data-state="done"]')
    page.wait_for_function("document.querySelectorAll('#gantt g.bar').length === 4")
    assert page.evaluate("window.loadedOnce") == "yes"
    assert page.locator("#graph g.node.critical").count() >= 3
    keep_screenshot(page, "run-page.png")

    # a diff shows, and an agent's <script> in a log is shown as text, never run
    base = context.new_page()
    base.set_default_timeout(WAIT_MS)
    base.goto(f"{dash.base}/runs/{run_id}/tasks/base")
    base.wait_for_selector(".diff-box table.diff-table")
    assert "base.txt" in base.locator(".diff-box").inner_text()
    assert "<script>window.pwned = 1</script>" in base.locator("pre.log").inner_text()
    assert base.evaluate("window.pwned") is None
    assert base.locator("main script").count() == 0
    keep_screenshot(base, "task-page.png")

    # without the token (a fresh browser context has no cookie): 401
    anonymous = browser.new_context()
    response = anonymous.new_page().goto(f"{dash.base}/runs/{run_id}")
    assert response is not None and response.status == 401
    anonymous.close()
