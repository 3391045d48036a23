"""An ``llm`` agent as a scanner, against the local chat server: it repeats two of ruff's
findings and adds one of its own, and the merged log holds exactly one new finding."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from agent_testing import ChatServer

from orchardist import Workspace
from orchardist.agents.llm import DONE
from orchardist.plan.loading import load_plan
from orchardist.scan.engine import Scanner
from realtools import require_modules
from support import git

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "scan_repo"


@pytest.fixture(autouse=True)
def scanner_tools() -> None:
    """The scanner these tests run: ruff."""
    require_modules("ruff")


def test_an_llm_reviewer_repeating_two_ruff_findings_adds_exactly_one(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # Given: the fixture package, ruff, and a model that writes three findings and stops
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fixture")
    findings = {
        "findings": [
            {
                "rule": "F401",
                "message": "sys is unused",
                "path": "inventory/__init__.py",
                "start_line": 3,
            },
            {
                "rule": "E722",
                "message": "bare except",
                "path": "inventory/store.py",
                "start_line": 47,
            },
            {
                "rule": "swallowed-error",
                "message": "percent() hides a division by zero",
                "path": "inventory/report.py",
                "start_line": 53,
                "end_line": 54,
            },
        ]
    }
    command = f"cat > \"$ORCHARDIST_FINDINGS\" <<'EOF'\n{json.dumps(findings)}\nEOF"
    chat_server.reply(f"Writing what I found.\n```bash\n{command}\n```")
    chat_server.reply(DONE)
    python = shlex.quote(sys.executable)
    plan = repo / "scan.toml"
    plan.write_text(
        f"""
[agents.model]
kind = "llm"
base_url = "{chat_server.url}"
model = "fake-model"

[scanners.ruff]
command = "{python} -m ruff check --no-cache --exit-zero --output-format sarif {{files}}"
include = ["**/*.py"]

[scanners.review]
format = "agent"
agent = "model"
prompt = "Review inventory/ for error handling bugs."
"""
    )

    # When: scanned
    loaded = load_plan(plan, require_tasks=False)
    ws = Workspace.open(repo)
    result = Scanner(ws.repo, ws.store, loaded.agents, max_parallel=2).scan(
        list(loaded.scanners.values()), "HEAD"
    )

    # Then: the reviewer ran, was asked to write $ORCHARDIST_FINDINGS, and added one finding
    ruff, review = result.reports
    assert review.error is None and ruff.error is None
    assert "ORCHARDIST_FINDINGS" in json.dumps(chat_server.requests[0]["body"])
    mine = [m for m in result.merged if m.scanner == "review"]
    assert [(m.finding.rule, m.finding.path) for m in mine] == [
        ("swallowed-error", "inventory/report.py")
    ]
    repeated = sorted(m.finding.rule for m in result.merged if m.reporters == ("ruff", "review"))
    assert repeated == ["E722", "F401"]
    assert len(result.merged) == len(ruff.findings) + 1
