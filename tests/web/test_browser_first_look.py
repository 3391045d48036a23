"""What a new user saw on the dashboard, fixed, in a real browser (Debian's Chromium driven by
Playwright): no stray dashes for what is unknown, full task names in the graph, wrapped log
lines, time ticks on the timeline, the plan's name in the runs list, a Review page; and the
task page's verify results test by test, with agents' markup shown as text."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support import Finished, write_plan
from web.dashboard import serving
from web.test_browser import WAIT_MS, browser

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, used by name

RunPlan = Callable[..., Finished]
# Agents' output is hostile: markup in a transcript message and in a diff must stay text
HOSTILE = '<img src=x onerror="window.pwned=1">'
HOSTILE_CODE = f"# {HOSTILE}\nx = '<script>window.pwned=2</script>'\n"
MESSAGE = {"type": "assistant", "message": {"content": [{"type": "text", "text": HOSTILE}]}}
SUITE = (
    "import pytest\n\n\ndef test_good():\n    pass\n\n\n"
    "@pytest.mark.skip\ndef test_later():\n    pass\n"
)
PRINTED = "x" * 3000 + "\n" + json.dumps(MESSAGE)
LONG = "migrate-the-settings-loader-to-typed-records"  # 44 characters

PLAN = f"""
[run]
verify = "none"

[agents.fake]
kind = "scripted"
[agents.fake.script]
base = {{ write = {{ "a.txt" = "a" }} }}
"{LONG}" = {{ write = {{ "b.py" = {json.dumps(HOSTILE_CODE)} }}, print = {json.dumps(PRINTED)} }}
suite = {{ write = {{ "test_pair.py" = {json.dumps(SUITE)} }} }}

[[task]]
id = "base"
agent = "fake"

[[task]]
id = "suite"
agent = "fake"
verify = "python -m pytest -q -p no:cacheprovider test_pair.py"

[[task]]
id = "{LONG}"
agent = "fake"
depends_on = ["base"]
"""

UNKNOWN = re.compile(r"(^|· )-( ·|$)|cost -|exit -|·\s*$")


def test_a_finished_run_reads_cleanly(repo: Path, run_plan: RunPlan, browser: Any) -> None:
    # Given: a finished run of two scripted tasks (no cost reported), one with a long name,
    # whose agent printed a 3000-character line
    done = run_plan(write_plan(repo, PLAN))
    assert done.state.value == "done"
    with serving(repo) as dash:
        page = browser.new_context().new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{dash.base}/?token={dash.token}")

        # Then: the runs list names the plan
        page.wait_for_selector("#runs td.plan")
        assert page.locator("#runs td.plan").inner_text() == "plan.toml"

        # the run's meta line says only what is known: no "cost -", no trailing "·"
        page.goto(f"{dash.base}/runs/{done.run.id}")
        page.wait_for_selector("#run-meta")
        meta = page.locator("#run-meta").inner_text()
        assert not UNKNOWN.search(meta), meta
        # the long name is shown whole in the graph, and on hover
        label = page.locator(f'#graph g.node[data-task="{LONG}"] text').text_content()
        assert label == LONG
        assert LONG in page.locator(f'#graph g.node[data-task="{LONG}"] title').text_content()
        # the timeline has time ticks
        assert page.locator("#gantt line.tick").count() >= 2

        # the task page: an attempt line without dashes; the long log line wraps
        page.goto(f"{dash.base}/runs/{done.run.id}/tasks/{LONG}")
        page.wait_for_selector("section.attempt p.kv")
        line = page.locator("section.attempt p.kv").inner_text()
        assert not UNKNOWN.search(line), line
        page.click("details.raw-log summary")  # the raw log, under the transcript
        for shown in ("pre.log", ".tx-output pre.tx-text"):
            box = page.locator(shown)
            page.wait_for_function(  # the log is fetched after the page is shown
                "s => (document.querySelector(s)?.innerText ?? '').includes('xxxxxxxxxx')",
                arg=shown,
            )
            assert box.is_visible() and "x" * 3000 in box.inner_text().replace("\n", "")
            overflow = box.evaluate("p => p.scrollWidth - p.clientWidth")
            assert overflow <= 1, shown
        # the hostile markup shows as text in the transcript and the diff, and never ran
        assert HOSTILE in page.locator(".transcript").inner_text()
        assert "<script>window.pwned=2</script>" in page.locator(".diff-box").inner_text()
        assert page.evaluate("window.pwned") is None
        assert page.locator("main img, main script").count() == 0

        # verify's results, test by test: the skip in view, the pass folded (the run's events,
        # which redraw the page as they arrive, held back until the passes are opened)
        held: list[Any] = []

        def hold(route: Any) -> None:
            held.append(route)

        page.route("**/events", hold)
        page.goto(f"{dash.base}/runs/{done.run.id}/tasks/suite")
        page.wait_for_selector(".tests")
        assert "1 passed, 0 failed, 1 skipped" in page.locator(".tests p.kv").inner_text()
        assert page.locator(".tests tr.t-skipped").inner_text().split() == [
            "skipped",
            "test_pair::test_later",
        ]
        assert not page.locator(".tests tr.t-passed").is_visible()
        page.click(".tests details summary")
        page.locator(".tests tr.t-passed").wait_for(state="visible")  # opened, then laid out
        # and the redraw the events bring keeps the opened list open
        page.evaluate("document.querySelector('.tests').dataset.drawn = 'before'")
        assert held, "the page asked for no events"
        for route in held:
            route.continue_()
        page.unroute("**/events")
        page.wait_for_function("!document.querySelector('.tests[data-drawn]')")  # redrawn
        assert page.locator(".tests tr.t-passed").is_visible()
        assert page.locator(".tests tr.t-passed").inner_text().split()[-1] == "test_pair::test_good"

        # the Review page is one click away, and says when nothing awaits review
        page.click("#nav-review")
        page.wait_for_selector("#review-empty")
        assert page.url.endswith("/review")
