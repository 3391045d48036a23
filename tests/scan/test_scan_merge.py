"""Reading scanner output and merging findings: fingerprints, deduplication, SARIF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scan_support import validate_sarif

from orchardist.scan.findings import (
    Finding,
    ScanOutputError,
    parse_findings_json,
    parse_sarif,
    source_of,
)
from orchardist.scan.sarif import ScannerReport, merge, to_sarif, to_table


def finding(rule: str, path: str, line: int, source: str, message: str = "m") -> Finding:
    return Finding(rule, message, path, line, line, "warning", source=source)


def test_a_fingerprint_survives_the_lines_moving_and_whitespace_changing() -> None:
    text = "a = 1\nimport os\n"
    moved = "\n\n# new comment\na = 1\n    import   os\n"
    before = finding("F401", "m.py", 2, source_of(text.splitlines(), 2, 2))
    after = finding("F401", "m.py", 5, source_of(moved.splitlines(), 5, 5))
    assert before.base_fingerprint() == after.base_fingerprint()
    assert before.base_fingerprint() != finding("F401", "n.py", 2, "import os").base_fingerprint()
    assert before.base_fingerprint() != finding("E401", "m.py", 2, "import os").base_fingerprint()


def test_identical_findings_in_one_file_stay_distinct_by_occurrence() -> None:
    report = ScannerReport(
        "bandit", (finding("B101", "s.py", 3, "assert x"), finding("B101", "s.py", 9, "assert x"))
    )
    merged = merge([report])
    assert [m.finding.start_line for m in merged] == [3, 9]
    assert [m.fingerprint.split(":")[1] for m in merged] == ["0", "1"]


def test_one_scanner_over_overlapping_scopes_reports_each_finding_once() -> None:
    same = finding("F401", "m.py", 2, "import os")
    merged = merge([ScannerReport("ruff", (same, same, same))])
    assert len(merged) == 1 and merged[0].reporters == ("ruff",)


def test_a_finding_reported_by_two_scanners_appears_once_with_both_noted() -> None:
    ruff = ScannerReport("ruff", (finding("F401", "m.py", 2, "import os"),))
    review = ScannerReport(
        "review",
        (
            finding("f401", "m.py", 2, "import os", "unused import"),  # rule case differs
            finding("naming", "m.py", 7, "def Bad():"),
        ),
    )
    merged = merge([ruff, review])
    assert [(m.scanner, m.finding.rule, m.reporters) for m in merged] == [
        ("ruff", "F401", ("ruff", "review")),
        ("review", "naming", ("review",)),
    ]


def test_the_merged_log_is_valid_sarif_with_a_run_per_scanner(tmp_path: Path) -> None:
    ruff = ScannerReport(
        "ruff", (finding("F401", "m.py", 2, "import os"),), hits=3, misses=1, invocations=1
    )
    broken = ScannerReport("semgrep", (), error="timed out after 60s")
    whole_file = ScannerReport("agent", (Finding("design", "too big", "m.py", 0, 0, "note"),))
    reports = [ruff, broken, whole_file]
    log = to_sarif(reports, merge(reports), tmp_path, "0" * 40)
    validate_sarif(log)
    assert [r["tool"]["driver"]["name"] for r in log["runs"]] == ["ruff", "semgrep", "agent"]
    assert log["runs"][1]["invocations"][0]["executionSuccessful"] is False
    result = log["runs"][0]["results"][0]
    assert result["ruleIndex"] == 0 and log["runs"][0]["tool"]["driver"]["rules"][0]["id"] == "F401"
    assert "m.py:2" in to_table(merge(reports))


def test_the_schema_check_can_fail(tmp_path: Path) -> None:
    import jsonschema

    log = to_sarif([], [], tmp_path, "0" * 40)
    log["runs"] = [{"results": []}]  # a run without its tool
    with pytest.raises(jsonschema.ValidationError):
        validate_sarif(log)


def test_sarif_paths_become_relative_and_rules_are_found_by_index(tmp_path: Path) -> None:
    log = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "T",
                        "version": "1.2",
                        "rules": [{"id": "R1", "defaultConfiguration": {"level": "error"}}],
                    }
                },
                "results": [
                    {
                        "ruleIndex": 0,
                        "message": {"text": "bad"},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {
                                        "uri": (tmp_path / "pkg" / "a b.py").as_uri()
                                    },
                                    "region": {"startLine": 4},
                                }
                            }
                        ],
                    },
                    {
                        "ruleId": "R2",
                        "level": "note",
                        "message": {"text": "meh"},
                        "locations": [
                            {"physicalLocation": {"artifactLocation": {"uri": "./pkg/c.py"}}}
                        ],
                    },
                ],
            }
        ],
    }
    found, tool = parse_sarif(json.dumps(log).encode(), tmp_path)
    assert [(f.rule, f.path, f.start_line, f.end_line, f.level) for f in found] == [
        ("R1", "pkg/a b.py", 4, 4, "error"),
        ("R2", "pkg/c.py", 0, 0, "note"),
    ]
    assert tool is not None and tool.name == "T" and tool.version == "1.2"
    with pytest.raises(ScanOutputError):
        parse_sarif(b"[]", tmp_path)


def test_findings_json_in_every_documented_shape() -> None:
    one = {"rule": "r", "message": "m", "path": "a.py", "start_line": 2, "severity": "high"}
    for data in (
        json.dumps({"findings": [one]}),
        json.dumps([one]),
        json.dumps(one) + "\n",
    ):
        (f,) = parse_findings_json(data.encode())
        assert (f.rule, f.path, f.start_line, f.end_line, f.level) == ("r", "a.py", 2, 2, "error")
    assert parse_findings_json(b"") == []
    with pytest.raises(ScanOutputError):
        parse_findings_json(b'{"findings": [{"rule": "no path"}]}')


def test_a_tools_own_json_is_read_through_a_field_mapping() -> None:
    mypy_line = {
        "file": "m.py",
        "line": 3,
        "column": 4,
        "message": "bad type",
        "code": "arg-type",
        "severity": "error",
    }
    fields = {"path": "file", "start_line": "line", "rule": "code"}
    (f,) = parse_findings_json((json.dumps(mypy_line) + "\n").encode(), fields)
    assert (f.rule, f.path, f.start_line, f.level, f.message) == (
        "arg-type",
        "m.py",
        3,
        "error",
        "bad type",
    )
