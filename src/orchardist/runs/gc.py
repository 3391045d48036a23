"""Cleaning up after finished runs: logs, leftover worktrees, attempt refs, old baselines, and
scan results not used for as long."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..state import scancache
from ..state.records import RunState
from .folders import forget_run, recorded_run_folder
from .start import Workspace

FINISHED = (RunState.DONE, RunState.FAILED, RunState.CANCELLED)


# A run's folders in the state folder: its logs, attempt folders, and the session files its
# agents kept for their tasks' next attempts (agents/sessions.py)
RUN_FOLDERS = ("logs", "worktrees", "sessions")


def disk_bytes(path: Path) -> int:
    """Bytes used by the files under ``path`` (0 if it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def run_disk_bytes(ws: Workspace, run_id: str) -> int:
    """Disk used by a run's logs, attempt folders and its agents' kept sessions."""
    folders = [ws.state_dir / kind / run_id for kind in RUN_FOLDERS]
    folders += [f for f in [recorded_run_folder(ws.state_dir, run_id)] if f is not None]
    return sum(disk_bytes(folder) for folder in folders)


def collect(
    ws: Workspace,
    older_than_s: float,
    branches: bool = False,
    dry_run: bool = False,
    now: float | None = None,
) -> dict[str, Any]:
    """Remove what finished runs older than ``older_than_s`` left; the store keeps their history."""
    from shutil import rmtree  # (not for status, which only counts: see git.which)

    now = time.time() if now is None else now
    report: dict[str, Any] = {
        "runs": [],
        "bytes": 0,
        "refs": 0,
        "branches": 0,
        "baselines": 0,
        "scan_results": 0,
    }
    for run in ws.store.runs():
        ended = run.finished_at or run.created_at
        if run.state not in FINISHED or now - ended < older_than_s:
            continue
        report["runs"].append(run.id)
        report["bytes"] += run_disk_bytes(ws, run.id)
        refs = ws.repo.git("for-each-ref", "--format=%(refname)", f"refs/orchardist/runs/{run.id}/")
        names = [r for r in refs.splitlines() if r]
        report["refs"] += len(names)
        has_branch = ws.repo.try_rev_parse(f"refs/heads/{run.branch}") is not None
        report["branches"] += int(branches and has_branch)
        if dry_run:
            continue
        for kind in RUN_FOLDERS:
            rmtree(ws.state_dir / kind / run.id, ignore_errors=True)
        forget_run(ws.state_dir, run.id)
        for name in names:
            ws.repo.delete_ref(name)
        if branches and has_branch:
            ws.repo.delete_ref(f"refs/heads/{run.branch}")
    report["baselines"] = _old_baselines(ws, now - older_than_s, dry_run)
    report["scan_results"] = scancache.forget(ws.store, now - older_than_s, dry_run)
    if not dry_run:
        ws.repo.prune_worktrees()
    return report


def _old_baselines(ws: Workspace, before: float, dry_run: bool) -> int:
    from shutil import rmtree

    rows = ws.store.old_baselines(before)
    if not dry_run:
        for key in rows:
            folder = ws.state_dir / "logs" / "baselines"
            (folder / f"baseline-{key[:16]}.log").unlink(missing_ok=True)
            rmtree(folder / f"baseline-{key[:16]}.io", ignore_errors=True)
        ws.store.forget_baselines(rows)
    return len(rows)
