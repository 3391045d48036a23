"""Per-test verify results kept beside an attempt's log: read from the JUnit reports verify left
in the attempt's folder, through no symlink the agent's code put there."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.verify import reports
from orchardist.verify.reports import load_reports, reports_path, save_reports

JUNIT = """<testsuite>
<testcase classname="t" name="ok"/>
<testcase classname="t" name="bad"><failure/></testcase>
<testcase classname="t" name="later"><skipped/></testcase>
</testsuite>"""


def test_the_reports_of_each_command_and_the_check_are_kept_beside_the_log(
    tmp_path: Path,
) -> None:
    # Given: verify's scratch folder with reports for command 0 and the check; none for 1
    scratch, log = tmp_path / "junit", tmp_path / "logs" / "task.1.log"
    scratch.mkdir()
    log.parent.mkdir()
    (scratch / "0.xml").write_text(JUNIT)
    (scratch / "check.xml").write_text(JUNIT.replace("bad", "also_bad"))
    # When
    save_reports(scratch, ["pytest -q", "ruff check"], "pytest -q t.py", log)
    # Then
    kept = load_reports(log)
    assert [k["command"] for k in kept] == ["pytest -q", "pytest -q t.py"]
    assert kept[0]["failed"] == ["t::bad"] and kept[0]["passed"] == ["t::ok"]
    assert kept[0]["skipped"] == ["t::later"]
    assert kept[1]["failed"] == ["t::also_bad"]
    assert reports_path(log).name == "task.1.tests.json"


def test_a_report_the_agent_linked_elsewhere_is_not_read(tmp_path: Path) -> None:
    # Given: the agent's code replaced the report by a symlink to a file of its choosing
    outside = tmp_path / "elsewhere.xml"
    outside.write_text(JUNIT.replace("ok", "SECRET_NAME"))
    scratch, log = tmp_path / "junit", tmp_path / "task.1.log"
    scratch.mkdir()
    (scratch / "0.xml").symlink_to(outside)
    # When
    save_reports(scratch, ["pytest -q"], None, log)
    # Then: nothing is kept (no report), and the linked file's contents never are
    assert not reports_path(log).exists()
    assert load_reports(log) == []


def test_a_huge_suite_keeps_the_failures_first_and_says_it_was_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch, log = tmp_path / "junit", tmp_path / "task.1.log"
    scratch.mkdir()
    cases = "".join(f'<testcase classname="t" name="p{i}"/>' for i in range(30))
    cases += '<testcase classname="t" name="zz_bad"><failure/></testcase>'
    (scratch / "0.xml").write_text(f"<testsuite>{cases}</testsuite>")
    monkeypatch.setattr(reports, "MAX_TESTS_KEPT", 10)
    save_reports(scratch, ["pytest"], None, log)
    (kept,) = load_reports(log)
    assert kept["failed"] == ["t::zz_bad"] and len(kept["passed"]) == 9
    assert kept["cut"] and kept["counts"] == {"failed": 1, "skipped": 0, "passed": 30}
