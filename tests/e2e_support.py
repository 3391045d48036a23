"""Helpers shared by the end-to-end tests of candidates, the oracle and regression checks.

Importable from every test module (``pythonpath = ["tests"]`` in pyproject.toml).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchardist.confine.paths import repo_key, workdir_root
from run_support import leftovers
from support import Finished, git


def toml_files(paths: Mapping[str, str]) -> str:
    """Path → text as a TOML inline table, for a scripted step's ``write`` or ``append``."""
    return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in paths.items()) + " }"


def by_candidate(task: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A task's attempts (status document) by candidate index, for a single round."""
    attempts = task["attempts"]
    assert len({a["candidate"] for a in attempts}) == len(attempts), attempts
    return {a["candidate"]: a for a in attempts}


def log_of(attempt: dict[str, Any]) -> str:
    """An attempt's log: the agent's output, orchardist's notes, and each verify command."""
    return Path(attempt["log"]).read_text(encoding="utf-8", errors="replace")


def assert_nothing_left(run: Finished) -> None:
    """No process or worktree (baselines' too) is left, and the user's checkout is untouched."""
    assert leftovers(run.root, run.run.id) == []
    folder = workdir_root() / repo_key(run.ws.repo.common_dir)
    assert [p for p in folder.rglob("*") if not p.is_dir()] == []
    assert git(run.root, "status", "--porcelain") == "?? plan.toml"
