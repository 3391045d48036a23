"""Acceptance of the dashboard's review half, in a real browser (Debian's Chromium driven by
Playwright) against a real orchestrator process: a run with a review gate; the Review page
lists the task; a change request with a line comment made from the page; the next attempt's
prompt holds the text and the quoted line; it comes back to review; approve; the task turns done
on the page without a reload."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchardist import Workspace
from run_support import Gate, has_run, status, wait_until
from support import toml_str, write_plan
from web.browser_support import keep_screenshot
from web.dashboard import serving
from web.test_browser import WAIT_MS, browser

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, used by name

# The agent keeps each attempt's prompt where the test reads it; its first patch greets
# plainly, its second as the reviewer asks. "gate" holds the run open until the test is done.
GREET = """
cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/prompt-$ORCHARDIST_ATTEMPT.txt"
if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then
  printf 'def greet(name):\\n    return "hi " + name\\n' > greet.py
else
  printf 'def greet(name):\\n    return "Hello, " + name + "!"\\n' > greet.py
fi
"""
GATE = """
flock -s "$SYNC/release" true
echo g > gate.txt
"""
REQUEST = "Greet politely, with a capital letter."
LINE_NOTE = "Say Hello here, and end with an exclamation mark."


def plan_text(command: str) -> str:
    return f"""
    [run]
    verify = "none"
    review = "human"

    [agents.sh]
    kind = "shell"
    command = {toml_str(command)}

    [[task]]
    id = "greet"
    agent = "sh"
    prompt = "Write greet(name) in greet.py."

    [[task]]
    id = "gate"
    agent = "sh"
    prompt = "Hold the run open."
    review = "auto"
    """


def test_a_change_request_from_the_page_comes_back_to_review_and_is_approved(
    repo: Path,
    browser: Any,
    sync: Path,
    shell_scripts: Callable[..., str],
    launch: Callable[..., subprocess.Popen[bytes]],
) -> None:
    # Given: a run whose task "greet" waits for a person once verified (an orchestrator of its
    # own, kept running by "gate")
    plan = write_plan(repo, plan_text(shell_scripts(greet=GREET, gate=GATE)))
    with Gate(sync / "release") as release:
        orchestrator = launch("run", str(plan))
        try:
            review_from_the_page(repo, browser, sync)
        finally:
            release.open()
        assert orchestrator.wait(timeout=120) == 0
    run_id = next(iter(status_ids(repo)))
    doc = status(repo, run_id)
    assert {t["id"]: t["state"] for t in doc["tasks"]} == {"greet": "done", "gate": "done"}
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", f"orchardist/{run_id}:greet.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Hello, " in shown  # the approved second patch is the one merged


def review_from_the_page(repo: Path, browser: Any, sync: Path) -> None:
    """The run's review on the dashboard: the change request, the next attempt, the approval."""
    wait_until("the run is recorded", lambda: has_run(repo), timeout_s=60)
    with serving(repo) as dash:
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{dash.base}/?token={dash.token}")

        # When: the runs list says a task awaits review, and links to the Review page
        page.wait_for_selector("#runs a.s-awaiting_review")
        assert page.locator("#runs a.s-awaiting_review").inner_text() == "1 awaiting review"
        # the person opens it: the task is listed
        page.click("#runs a.s-awaiting_review")
        page.wait_for_selector('#review-list tr[data-task="greet"]')
        keep_screenshot(page, "review-page.png")

        # and, on the task's page, comments on line 2 of greet.py and asks for changes
        page.click('#review-list tr[data-task="greet"] td a[href*="/tasks/"]')
        page.wait_for_selector("#review")
        page.evaluate("window.loadedOnce = 'yes'")
        page.click('tr.commentable[data-path="greet.py"][data-line="2"]')
        page.fill("textarea.line-comment-text", LINE_NOTE)
        page.click("button.line-comment-add")
        page.fill("#review-text", REQUEST)
        page.wait_for_selector("tr.line-comment")
        keep_screenshot(page, "task-under-review.png")
        page.click("#review-changes")

        # Then: a second attempt runs, told the request and the line it is about, and
        # comes back to review, on the page with no reload
        # (attempt 2 passed and is the one under review: its agent has run)
        page.wait_for_selector('section.attempt[data-attempt="2"][data-state="passed"]')
        page.wait_for_selector("#task-state .s-awaiting_review")
        page.wait_for_selector("#review")
        prompt = (sync / "prompt-2.txt").read_text()
        assert REQUEST in prompt and LINE_NOTE in prompt
        assert 'return "hi " + name' in prompt  # the quoted line
        assert "Hello" not in (sync / "prompt-1.txt").read_text()

        # When: the person approves; Then: the task turns done, still without a reload
        page.wait_for_selector("#review-approve")
        page.click("#review-approve")
        page.wait_for_selector("#task-state .s-done")
        assert page.evaluate("window.loadedOnce") == "yes"
        # and both decisions are on the page, acted on, the change request with its line
        page.wait_for_function("document.querySelectorAll('#reviews li.applied').length === 2")
        history = page.locator("#reviews").inner_text()
        assert REQUEST in history and f"greet.py:2: {LINE_NOTE}" in history
        assert page.locator("#review").count() == 0  # nothing left to decide


def status_ids(repo: Path) -> list[str]:
    ws = Workspace.open(repo)
    try:
        return [r.id for r in ws.store.runs()]
    finally:
        ws.store.close()
