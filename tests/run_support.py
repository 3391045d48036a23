"""Helpers for tests that drive whole runs: the CLI as a real process, and leak checks.

Shared by the resume, policy, containment and gc tests. Everything here works on a repository
in a temporary folder; nothing touches the repository the tests live in.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchardist import Workspace, status_document
from orchardist.confine.paths import repo_key, workdir_root
from support import git, processes_with_env

ORCHARDIST = [sys.executable, "-m", "orchardist"]


def orchardist(
    root: Path, *args: str, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in ``root`` to its end, stdin closed; output captured."""
    return subprocess.run(
        [*ORCHARDIST, *args],
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def spawn(root: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start the CLI in its own session (as from a terminal of its own), output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [*ORCHARDIST, *args],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Wait for something another process does (a file appearing, a state in the store)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def status(root: Path, run_id: str) -> dict[str, Any]:
    """The run's status document, read from the store."""
    ws = Workspace.open(root)
    try:
        return status_document(ws.store, ws.resolve_run(run_id))
    finally:
        ws.store.close()


def has_run(root: Path) -> bool:
    """Whether the repository's store records a run yet (a starting orchestrator may not have
    made the store, or committed its run, when its branch already exists)."""
    if not (root / ".git" / "orchardist" / "state.db").exists():
        return False
    ws = Workspace.open(root, create=False)
    try:
        return bool(ws.store.runs())
    finally:
        ws.store.close()


def only_run(root: Path) -> str:
    """The id of the repository's one run."""
    ws = Workspace.open(root)
    try:
        (run,) = ws.store.runs()
        return run.id
    finally:
        ws.store.close()


def leftovers(root: Path, run_id: str) -> list[str]:
    """What a run must not leave behind: live processes, worktrees, worktree folders."""
    found = []
    procs = processes_with_env("ORCHARDIST_RUN", run_id)
    if procs:
        found.append(f"processes {sorted(procs)}")
    worktrees = [
        line[len("worktree ") :]
        for line in git(root, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    if worktrees != [str(root)]:
        found.append(f"worktrees {worktrees[1:]}")
    folder = run_folder(root, run_id)
    if folder.exists() and any(folder.iterdir()):
        found.append(f"attempt folders {sorted(p.name for p in folder.iterdir())}")
    return found


def run_folder(root: Path, run_id: str) -> Path:
    """Where a run's attempt folders are (under the tests' ORCHARDIST_WORKDIR_ROOT)."""
    common = Path(git(root, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    return workdir_root() / repo_key(common) / "runs" / run_id


def task_trailers(root: Path, base: str, branch: str) -> list[str]:
    """The ``Orchardist-Task`` of each commit on ``base..branch``, oldest first."""
    out = git(
        root,
        "log",
        "--reverse",
        "--format=%(trailers:key=Orchardist-Task,valueonly)%x1e",
        f"{base}..{branch}",
    )
    return [chunk.strip() for chunk in out.split("\x1e") if chunk.strip()]


def attempt_states(doc: dict[str, Any], task_id: str) -> list[str]:
    """States of a task's attempts, oldest first."""
    return [a["state"] for t in doc["tasks"] if t["id"] == task_id for a in t["attempts"]]
