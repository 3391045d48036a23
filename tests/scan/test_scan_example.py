"""The bundled example's scanner section works as written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from realtools import require_modules
from run_support import orchardist
from support import git

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_the_quickstart_scanners_run_and_cache(tmp_path: Path) -> None:
    require_modules("ruff", "bandit")
    # Given: the example as a repository of its own (`python` is this interpreter: conftest)
    repo = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "textkit 0.1.0")

    # When: scanned twice
    first = orchardist(repo, "scan", "plan.toml", "--json", "-o", str(tmp_path / "out.sarif"))
    second = orchardist(repo, "scan", "plan.toml", "--json")

    # Then: both scanners ran cleanly on the package, and the second scan ran nothing
    assert first.returncode == 0, first.stdout + first.stderr
    scanners = json.loads(first.stdout)["scanners"]
    assert [(s["name"], s["error"]) for s in scanners] == [("ruff", None), ("bandit", None)]
    assert all(s["misses"] > 0 for s in scanners)
    assert [s["invocations"] for s in json.loads(second.stdout)["scanners"]] == [0, 0]
    log = json.loads((tmp_path / "out.sarif").read_text())
    assert [r["tool"]["driver"]["name"] for r in log["runs"]] == ["ruff", "Bandit"]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "scanners.md"


def test_every_toml_example_in_the_scanner_docs_is_a_valid_profile(tmp_path: Path) -> None:
    import re

    from orchardist.plan.loading import load_plan
    from support import make_repo

    repo = make_repo(tmp_path / "repo")
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 2
    names = set()
    for n, block in enumerate(blocks):
        path = repo / f"example{n}.toml"
        agents = "" if "[agents." in block else '[agents.reviewer]\nkind = "scripted"\n'
        path.write_text(agents + block)
        names |= set(load_plan(path, require_tasks=False).scanners)
    assert {"ruff", "bandit", "semgrep", "mypy", "review"} <= names
