"""Acceptance: ruff and bandit through SARIF on a fixture package, and an agent reviewer.

The merged, deduplicated count must equal what each tool reports when run on its own, the log
must validate against the official SARIF 2.1.0 schema, a second scan must run no scanner, and
an edit to one file must re-run the file-scoped scanners on that file only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scan_support import PYTHON, fixture_repo, validate_sarif

from realtools import require_modules
from run_support import orchardist
from support import git, write_plan


@pytest.fixture(autouse=True)
def scanner_tools() -> None:
    """The scanners these tests run: ruff and bandit."""
    require_modules("ruff", "bandit")


SCANNERS = f"""
[scanners.ruff]
command = "{PYTHON} -m ruff check --no-cache --exit-zero --output-format sarif {{files}}"
include = ["**/*.py"]
config = ["pyproject.toml"]
version = "{PYTHON} -m ruff --version"

[scanners.bandit]
command = "{PYTHON} -m bandit -q -f sarif {{files}}"
include = ["**/*.py"]
version = "{PYTHON} -m bandit --version"
"""


def direct(repo: Path, *argv: str) -> Any:
    """Run a tool on the repository directly and return its JSON output."""
    out = subprocess.run(
        [sys.executable, "-m", *argv], cwd=repo, capture_output=True, text=True, check=False
    )
    return json.loads(out.stdout)


def toml_table(data: dict[str, Any]) -> str:
    """``data`` as a TOML inline table."""
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in data.items()) + " }"


def runs_by_tool(log: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {run["properties"]["orchardist"]["scanner"]: run["results"] for run in log["runs"]}


def test_ruff_and_bandit_findings_merge_to_exactly_what_the_tools_report(tmp_path: Path) -> None:
    # Given: the fixture package in a repository, and what the tools say on their own
    repo = fixture_repo(tmp_path / "repo")
    plan = write_plan(repo, SCANNERS, name="scan.toml")
    ruff_alone = direct(
        repo, "ruff", "check", "--no-cache", "--exit-zero", "--output-format", "json", "."
    )
    bandit_alone = direct(repo, "bandit", "-q", "-r", ".", "-f", "json")["results"]
    assert len(ruff_alone) >= 20 and len(bandit_alone) >= 10  # the fixture has real issues

    # When: scanned through orchardist into a SARIF file
    out = tmp_path / "findings.sarif"
    first = orchardist(repo, "scan", str(plan), "-o", str(out), "--json")

    # Then: exit 1 (ruff reports errors), a valid log, exactly the tools' own counts
    assert first.returncode == 1, first.stderr
    log = json.loads(out.read_text())
    validate_sarif(log)
    results = runs_by_tool(log)
    assert len(results["ruff"]) == len(ruff_alone)
    assert len(results["bandit"]) == len(bandit_alone)
    ruff_places = sorted(
        (r["filename"].split("repo/", 1)[1], r["location"]["row"], r["code"]) for r in ruff_alone
    )
    ours = sorted(
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["ruleId"],
        )
        for r in results["ruff"]
    )
    assert ours == ruff_places
    fingerprints = [
        r["partialFingerprints"]["orchardist/v1"] for rs in results.values() for r in rs
    ]
    assert len(set(fingerprints)) == len(fingerprints)
    summary = json.loads(first.stdout)
    assert [s["misses"] for s in summary["scanners"]] == [6, 6]  # six .py files

    # When: scanned again, unchanged
    second = json.loads(orchardist(repo, "scan", str(plan), "--json").stdout)

    # Then: no scanner ran, same findings
    assert [s["invocations"] for s in second["scanners"]] == [0, 0]
    assert [s["hits"] for s in second["scanners"]] == [6, 6]
    assert second["findings"] == summary["findings"]

    # When: one file is edited (a line inserted above its findings) and scanned again
    path = repo / "inventory" / "store.py"
    path.write_text("# moved down by one line\n" + path.read_text())
    git(repo, "commit", "-qam", "shift store.py")
    third = json.loads(orchardist(repo, "scan", str(plan), "--json").stdout)

    # Then: each file-scoped scanner ran on that file only; every fingerprint survived the shift
    assert [(s["hits"], s["misses"]) for s in third["scanners"]] == [(5, 1), (5, 1)]
    assert sorted(r["fingerprint"] for r in third["results"]) == sorted(
        r["fingerprint"] for r in summary["results"]
    )


def test_an_agent_reviewer_repeating_two_linter_findings_adds_exactly_one(tmp_path: Path) -> None:
    # Given: ruff, and a scripted reviewer that repeats two of ruff's findings and adds its own
    repo = fixture_repo(tmp_path / "repo")
    findings = [
        {
            "rule": "F401",
            "message": "os is unused",
            "path": "inventory/__init__.py",
            "start_line": 3,
            "severity": "warning",
        },
        {
            "rule": "E711",
            "message": "compare with is",
            "path": "inventory/store.py",
            "start_line": 25,
            "severity": "warning",
        },
        {
            "rule": "swallowed-error",
            "message": "percent() hides a division by zero",
            "path": "inventory/report.py",
            "start_line": 53,
            "end_line": 54,
            "severity": "warning",
        },
    ]
    plan = write_plan(
        repo,
        SCANNERS.split("[scanners.bandit]")[0]
        + f"""
[agents.reviewer]
kind = "scripted"
script = {{ review = {{ findings = [{", ".join(map(toml_table, findings))}] }} }}

[scanners.review]
format = "agent"
agent = "reviewer"
prompt = "Review inventory/ for error handling bugs."
""",
        name="scan.toml",
    )

    # When: scanned
    result = orchardist(repo, "scan", str(plan), "--format", "json", "--fail-on", "note")
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)["findings"]

    # Then: the reviewer's run holds exactly its one new finding; the repeats are ruff's,
    # noted as reported by both
    mine = [f for f in found if f["scanner"] == "review"]
    assert [(f["rule"], f["path"]) for f in mine] == [("swallowed-error", "inventory/report.py")]
    both = sorted((f["rule"], f["path"]) for f in found if f["reporters"] == ["ruff", "review"])
    assert both == [("E711", "inventory/store.py"), ("F401", "inventory/__init__.py")]
    ruff_alone = direct(
        repo, "ruff", "check", "--no-cache", "--exit-zero", "--output-format", "json", "."
    )
    assert len(found) == len(ruff_alone) + 1
