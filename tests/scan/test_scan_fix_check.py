"""``scan --fix``'s check where users put things: the plan outside the repository, a scanner
the sandbox cannot read; and the reason a failed fix task gives (what is still there, what is
new, or that the check could not run), never the internal check command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scan_support import PYTHON

from orchardist.confine.confinement import SHARE_READONLY_VAR
from realtools import require_modules
from run_support import orchardist
from support import git, make_repo


@pytest.fixture(autouse=True)
def _ruff() -> None:
    require_modules("ruff")


MODULE = "import os\n\n\ndef f():\n    return 1\n"
FIXED = "def f():\n    return 1\n"
HALF_FIXED = "import os\nimport sys\n\n\ndef f():\n    return 1\n"  # os stays, sys is new


@pytest.fixture
def outside(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A folder outside the repository that confined commands cannot see, as a user's /tmp."""
    monkeypatch.delenv(SHARE_READONLY_VAR, raising=False)
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def fix(repo: Path, outside: Path, module: str, scanner: str) -> dict[str, Any]:
    """``scan PLAN --fix`` with the plan in ``outside``, a fixer writing ``module``; the outcome."""
    plan = outside / "scan.toml"
    plan.write_text(
        f"""
[run]
repo = {json.dumps(str(repo))}

[agents.fixer]
kind = "scripted"
script = {{ "fix-pkg-m.py" = {{ write = {{ "pkg/m.py" = {json.dumps(module)} }} }} }}

[scanners.ruff]
command = {json.dumps(scanner)}
include = ["**/*.py"]
"""
    )
    result = orchardist(
        repo, "scan", str(plan), "--fix", "--agent", "fixer", "--json", timeout_s=300.0
    )
    assert result.stdout, result.stderr
    outcome: dict[str, Any] = json.loads(result.stdout)
    outcome["exit_code"] = result.returncode
    return outcome


RUFF = f"{PYTHON} -m ruff check --output-format sarif {{files}}"


def test_a_fix_is_checked_with_the_plan_outside_the_repository(
    tmp_path: Path, outside: Path
) -> None:
    # Given: a finding, and the plan in a folder the fix check cannot read
    repo = make_repo(tmp_path / "repo", {"pkg/m.py": MODULE})

    # When: a fixer removes it
    outcome = fix(repo, outside, FIXED, RUFF)

    # Then: the check ran, the fix landed, and the scanner's cache is not in the commit
    assert outcome["exit_code"] == 0, outcome
    assert [(f["path"], f["rule"]) for f in outcome["fixed"]] == [("pkg/m.py", "F401")]
    files = git(repo, "ls-tree", "-r", "--name-only", f"refs/heads/{outcome['branch']}")
    assert files.split() == ["pkg/m.py"]


def test_a_failed_fix_says_what_is_still_there_and_what_is_new(
    tmp_path: Path, outside: Path
) -> None:
    # Given: a finding
    repo = make_repo(tmp_path / "repo", {"pkg/m.py": MODULE})

    # When: the fixer leaves it and adds another
    outcome = fix(repo, outside, HALF_FIXED, RUFF)

    # Then: the open finding says so, in the finding's own terms
    assert outcome["exit_code"] == 1
    (still,) = outcome["open"]
    assert still["why"] == (
        "fix-pkg-m.py failed: still there: pkg/m.py:1 F401; new finding: pkg/m.py:2 F401"
    )


def test_a_check_that_cannot_run_reads_differently_from_a_failing_one(
    tmp_path: Path, outside: Path
) -> None:
    # Given: a scanner whose wrapper script lives where confined commands cannot read it
    repo = make_repo(tmp_path / "repo", {"pkg/m.py": MODULE})
    wrapper = outside / "ruff.sh"
    wrapper.write_text(f'exec {PYTHON} -m ruff check --output-format sarif "$@"\n')

    # When: a fixer that fixes it runs
    outcome = fix(repo, outside, FIXED, f"sh {wrapper} {{files}}")

    # Then: the finding is open because the check could not run, and it says why
    (still,) = outcome["open"]
    assert still["why"].startswith("fix-pkg-m.py failed: the check could not run: ")
    assert "ruff.sh" in still["why"]
    assert "fixcheck" not in still["why"] and "still" not in still["why"]
