"""One task driven through ``orchardist run`` with a real agent CLI against a fake model API.

Shared by tests/agents/test_real_claude.py and test_real_gemini.py: a repository whose add()
subtracts, a verify command that fails until it adds, a plan with no retries and a breaker that
opens at the first failure, and ways to read what happened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e_support import log_of
from modelapi.server import ModelServer
from orchardist import Workspace
from run_support import interpreter, only_run, status
from support import make_repo, write_plan

RUN_TIMEOUT_S = 300.0  # the whole `orchardist run`; each finishes in seconds when all is well
BUGGY = "def add(a, b):\n    return a - b\n"
VERIFY = "python -c 'import calc; assert calc.add(2, 3) == 5'"


def run_fix(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: ModelServer,
    base_url_var: str,
    profile: str,
    retries: int = 0,
    prepare: Callable[[Path], object] = lambda repo: None,
) -> dict[str, Any]:
    """``orchardist run`` of one task (fix add()) with the agent ``profile``, retried
    ``retries`` times, after ``prepare(repo)``; the status."""
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    prepare(repo)
    write_plan(
        repo,
        f"""
        [agents.real]
        timeout = "4m"
        circuit_breaker = 1
        {profile}

        [[task]]
        id = "fix"
        title = "Fix add"
        prompt = "add() in calc.py subtracts; make it add."
        agent = "real"
        verify = {json.dumps(VERIFY)}
        retries = {retries}
        """,
    )
    with api:
        monkeypatch.setenv(base_url_var, api.url)
        done = interpreter(repo, "run", "plan.toml", timeout_s=RUN_TIMEOUT_S)
    assert done.returncode in (0, 1), done.stderr
    doc = status(repo, only_run(repo))
    doc["_repo"] = str(repo)
    return doc


def only_task(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's one task."""
    (task,) = doc["tasks"]
    return task  # type: ignore[no-any-return]


def reported(attempt: dict[str, Any]) -> dict[str, Any]:
    """The final ``result`` event the tool printed in the attempt's log."""
    results = [
        json.loads(line)
        for line in log_of(attempt).splitlines()
        if line.startswith('{"') and '"type":"result"' in line
    ]
    assert len(results) == 1, log_of(attempt)[-3000:]
    result: dict[str, Any] = results[0]
    return result


def events(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The data of the run's events of one kind, from the store."""
    ws = Workspace.open(Path(doc["_repo"]))
    try:
        return [dict(e.data) for e in ws.store.events(doc["run"]) if e.kind == kind]
    finally:
        ws.store.close()
