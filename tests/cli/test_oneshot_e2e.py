"""``orchardist fix`` and ``orchardist debug`` end to end: the real CLI, a config profile whose
shell agent acts by ``$ORCHARDIST_STAGE``, a real pytest suite."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from run_support import orchardist as run_cli
from support import git, make_repo

PY = "python"  # this interpreter, without pytest's plugins: conftest
REPRO = f"{PY} -m pytest -q tests/test_empty.py"
CALC = "def mean(xs):\n    return sum(xs) / len(xs)\n"
FIXED = "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0\n"
SUITE = "from calc import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n"
EMPTY = "from calc import mean\n\n\ndef test_empty():\n    assert mean([]) == 0.0\n"
# The fix's verify: the suite's one assertion run by python -c, not pytest (how a suite is judged
# is not what these tests are about; the reproduction stays a pytest run)
VERIFY = f"{PY} -c " + shlex.quote("from calc import mean; assert mean([1, 2, 3]) == 2")

# The stages' agent: the shot (a fix stage with nothing handed over) changes nothing; after the
# escalation each stage does its part and leaves the handoff the contract asks for.
AGENT = f"""\
set -eu
case "$ORCHARDIST_STAGE" in
  reproduce)
    mkdir -p tests && printf '%s' {shlex.quote(EMPTY)} > tests/test_empty.py
    printf '{{"handoff": {{"repro_cmd": %s}}}}' {shlex.quote(json.dumps(REPRO))} \\
      > "$ORCHARDIST_OUTPUT" ;;
  audit)
    printf '{{"handoff": {{"verdict": "ok"}}}}' > "$ORCHARDIST_OUTPUT" ;;
  localize)
    printf '{{"handoff": {{"files": ["calc.py"]}}}}' > "$ORCHARDIST_OUTPUT" ;;
  fix)
    if grep -q '"localize"' "$ORCHARDIST_INPUTS"; then
      printf '%s' {shlex.quote(FIXED)} > calc.py
    fi ;;
esac
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with a buggy mean(), a passing suite, and the stage agent configured."""
    repo = make_repo(
        tmp_path / "repo",
        {"calc.py": CALC, "tests/test_calc.py": SUITE, ".gitignore": "__pycache__/\n"},
    )
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    (repo / ".orchardist.toml").write_text(
        f'[agents.stages]\nkind = "shell"\ncommand = "bash {script}"\n'
    )
    return repo


def orchardist(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(repo, *args, timeout_s=600)


def attempts(repo: Path, run_id: str) -> dict[str, list[str]]:
    """Each task's attempts' states, from ``status --json``."""
    doc = json.loads(orchardist(repo, "status", run_id, "--json").stdout)
    return {t["id"]: [a["state"] for a in t["attempts"]] for t in doc["tasks"]}


def lands_the_test_and_the_fix_in_one_commit(repo: Path, branch: str, test: str) -> None:
    base = git(repo, "rev-parse", "HEAD")
    assert git(repo, "rev-list", "--count", f"{base}..{branch}") == "1"
    assert sorted(git(repo, "diff", "--name-only", base, branch).split()) == ["calc.py", test]
    assert git(repo, "show", f"{branch}:calc.py") + "\n" == FIXED


def test_fix_escalates_a_shot_that_changed_nothing_and_lands_the_debug_pipelines_fix(
    project: Path,
) -> None:
    # When
    out = orchardist(project, "fix", "mean([]) divides by zero", "--verify", VERIFY)

    # Then: the shot changed nothing, every debug stage ran once, and the run is done
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = re.search(r"^run (\S+): done", out.stdout, re.M).group(1)  # type: ignore[union-attr]
    ran = attempts(project, run_id)
    assert len(ran.pop("fix.shot")) == 1
    assert {task: len(states) for task, states in ran.items()} == {
        "fix.reproduce": 1,
        "fix.audit": 1,
        "fix.localize": 1,
        "fix": 1,
    }
    lands_the_test_and_the_fix_in_one_commit(project, f"orchardist/{run_id}", "tests/test_empty.py")
    events = [
        json.loads(line) for line in orchardist(project, "events", run_id).stdout.splitlines()
    ]
    doc = json.loads(orchardist(project, "status", run_id, "--json").stdout)
    [shot] = [t for t in doc["tasks"] if t["id"] == "fix.shot"]
    assert shot["state"] == "skipped"
    assert shot["reason"].startswith("escalated to the debug pipeline: ")
    [escalation] = [e for e in events if e["kind"] == "escalation"]
    assert escalation["task"] == "fix" and "no_changes" in escalation["data"]["detail"]


def test_debug_with_a_check_skips_reproduce_and_audit(project: Path) -> None:
    # Given: a check that fails on the bug (EMPTY's assertion, run by python -c: how a pytest
    # suite is judged is not the point here)
    check = f"{PY} -c " + shlex.quote("from calc import mean; assert mean([]) == 0.0")

    # When
    out = orchardist(project, "debug", "mean([]) divides by zero", "--check", check, "--json")

    # Then: localize and fix only; the fix lands alone
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {t["id"]: t["state"] for t in doc["tasks"]} == {
        "debug.localize": "done",
        "debug": "done",
    }
    branch = doc["branch"]
    assert git(project, "diff", "--name-only", f"{branch}~1", branch) == "calc.py"
