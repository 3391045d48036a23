"""Shared by the pipeline end-to-end tests: a repository with a buggy ``mean`` and a real
pytest suite, and the shell scripts that play each stage's agent.

Each script checks what the contract promises it (``$ORCHARDIST_STAGE``, ``$ORCHARDIST_INPUTS``,
the prompt) and exits 3 when it is missing, so a broken contract fails the run.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from run_support import orchardist
from support import git, toml_str, write_plan

BUG = "mean() raises ZeroDivisionError on an empty list; it should return 0.0"
CALC = "def mean(xs):\n    return sum(xs) / len(xs)\n"
SUITE = "from calc import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n"
REPRO = "python -m pytest -q tests/test_bug.py"

# Reproduce: the first test passes on the base (it tests something easier), the second fails.
REPRODUCE_SH = f"""
[ "$ORCHARDIST_STAGE" = reproduce ] || exit 3
mkdir -p tests
if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then
  printf 'from calc import mean\\n\\n\\ndef test_bug():\\n    assert mean([2]) == 2\\n' \
    > tests/test_bug.py
else
  grep -q does_not_reproduce "$ORCHARDIST_PROMPT_FILE" || exit 3
  printf 'from calc import mean\\n\\n\\ndef test_bug():\\n    assert mean([]) == 0.0\\n' \
    > tests/test_bug.py
fi
printf '{{"handoff": {{"repro_cmd": "{REPRO}", "failing_test": "tests/test_bug.py::test_bug"}}}}' \
  > "$ORCHARDIST_OUTPUT"
"""
AUDIT_SH = """
[ "$ORCHARDIST_STAGE" = audit ] || exit 3
test -f tests/test_bug.py || exit 3
grep -q repro_cmd "$ORCHARDIST_INPUTS" || exit 3
printf '{"handoff": {"verdict": "ok", "notes": "tests the empty list"}}' > "$ORCHARDIST_OUTPUT"
"""
LOCALIZE_SH = """
[ "$ORCHARDIST_STAGE" = localize ] || exit 3
grep -q '"audit"' "$ORCHARDIST_INPUTS" || exit 3
printf '{"handoff": {"files": ["calc.py"], "symbols": ["mean"]}}' > "$ORCHARDIST_OUTPUT"
"""
# Fix: candidate 0 is wrong (breaks the suite), 1 bloated, 2 minimal.
FIX_SH = """
[ "$ORCHARDIST_STAGE" = fix ] || exit 3
test -f tests/test_bug.py || exit 3
grep -q '"calc.py"' "$ORCHARDIST_INPUTS" || exit 3
grep -q 'tests/test_bug.py' "$ORCHARDIST_PROMPT_FILE" || exit 3
case "$ORCHARDIST_CANDIDATE" in
  0) printf 'def mean(xs):\\n    return 0.0 if not xs else sum(xs)\\n' > calc.py ;;
  1) { printf 'def mean(xs):\\n'
       for i in 1 2 3 4 5 6 7 8 9 10; do printf '    # a needless comment %s\\n' "$i"; done
       printf '    if len(xs) == 0:\\n        return 0.0\\n    total = sum(xs)\\n'
       printf '    count = len(xs)\\n    return total / count\\n'; } > calc.py ;;
  2) printf 'def mean(xs):\\n    if not xs:\\n        return 0.0\\n' > calc.py
     printf '    return sum(xs) / len(xs)\\n' >> calc.py ;;
esac
"""


def add_project(repo: Path) -> Path:
    """Commit a buggy ``mean`` and its passing pytest suite into ``repo``."""
    for name, text in {"conftest.py": "", "calc.py": CALC, "tests/test_calc.py": SUITE}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc")
    return repo


def stage_plan(
    project: Path,
    shell_scripts: Callable[..., str],
    task: str,
    run: str = "",
    verify: str = "python -m pytest -q",
    **scripts: str,
) -> Path:
    """A plan of ``task`` (TOML) whose agents run ``scripts`` (by task id); ``run``: more of
    the [run] table; ``verify``: the run's verify command."""
    command = shell_scripts(**scripts)
    return write_plan(
        project,
        f"""
        [run]
        verify = {toml_str(verify)}
        max_parallel = 3
        {run}

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [agents.auditor]
        kind = "shell"
        command = {toml_str(command)}

        {task}
        """,
    )


def status_json(root: Path) -> dict[str, Any]:
    shown = orchardist(root, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    doc: dict[str, Any] = json.loads(shown.stdout)
    return doc


def tasks_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in doc["tasks"]}


def repro_exit(root: Path, commit: str, tmp_path: Path, name: str, files: Path | None) -> int:
    """The reproduction's exit code on a tree: ``commit`` (plus the test file from ``files``)."""
    where = tmp_path / name
    where.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    if files is not None:
        (where / "tests" / "test_bug.py").write_bytes(files.read_bytes())
    return subprocess.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_bug.py"],
        cwd=where,
        capture_output=True,
        check=False,
    ).returncode
