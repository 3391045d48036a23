"""What ``status`` and the end of a run print: a run's tasks and attempts, what to try next,
and whether a live orchardist still drives the run."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..state.records import RunState
from ..terminal import plain

# A run's final summary lists at most this many tasks (counts by state say the rest), and of a
# longer list of ids the first few: a 10,000-task run must not print 10,000 lines.
SUMMARY_ROWS, SUMMARY_FEW = 20, 5


def print_summary(
    doc: dict[str, Any], attempts: bool = False, quiet: bool = False, limit: int | None = None
) -> None:
    """A run's tasks, one line each; with ``limit``, a large run shows its counts by state and
    at most ``limit`` tasks, those that did not end done first."""
    print(f"run {doc['run']}: {doc['state']}  branch {doc['branch']}")
    if doc["state"] == "dead":
        print(
            f"  no orchardist drives it any more (killed?): `orchardist resume {doc['run']}` "
            "continues it"
        )
    tasks = [t for t in doc["tasks"] if not (quiet and t["state"] in ("done", "skipped"))]
    if limit is not None and len(doc["tasks"]) > limit:
        counts = Counter(t["state"] for t in doc["tasks"])
        print("  tasks: " + ", ".join(f"{n} {state}" for state, n in counts.most_common()))
        tasks.sort(key=lambda t: t["state"] in ("done", "skipped"))  # stable: plan order kept
    hidden = tasks[limit:] if limit is not None else []
    for task in tasks[: len(tasks) - len(hidden)]:
        line = f"  {task['id']:<20} {task['state']:<10}"
        if task["commit"]:
            line += f" {task['commit'][:12]}"
        tries = len(task["attempts"])
        line += f"  {tries} attempt{'s' if tries != 1 else ''}"
        if task["reason"] and task["state"] != "done":
            line += f"  ({plain(task['reason'])})"  # reasons and details quote agents' words
        print(line)
        if task.get("rate_limited"):
            print(f"      {rate_limit_wait(task['rate_limited'])}")
        if attempts:
            for a in task["attempts"]:
                took = "" if a["duration_s"] is None else f"{a['duration_s']:.1f}s"
                failure = f" {a['failure']}" if a["failure"] else ""
                print(
                    f"      #{a['n']} c{a['candidate']} {a['agent']:<12} {a['state']:<11} "
                    f"{_exit_label(a)}{took}{failure}{_spent(a)} {plain(a['detail'])}"
                )
                if a["selection"]:
                    print(f"         {plain(a['selection'])}")
    if hidden:
        print(f"  ... and {len(hidden)} more (`orchardist status {doc['run']}` lists them all)")
    totals = doc.get("totals", {})
    if any(v is not None for v in totals.values()):
        print(f"  spent:{_spent(totals)}")
    if doc.get("unverified"):
        print(f"  merged without verify commands: {_first_few(doc['unverified'], limit)}")
    if "disk_bytes" in doc:
        print(f"  disk: {doc['disk_bytes'] / 1e6:.1f} MB of logs and worktrees")


def print_next(doc: dict[str, Any]) -> None:
    """The commands worth trying next, after a run's summary."""
    run = doc["run"]
    states = {t["id"]: t["state"] for t in doc["tasks"]}
    failed = [t for t, s in states.items() if s == "failed"]
    lines = []
    if failed:
        lines.append(f"orchardist logs {run} {failed[0]}")
        lines.append(f"orchardist show {run} {failed[0]} --attempt 1")
    if doc["state"] in ("failed", "cancelled"):
        lines.append(f"orchardist retry {run}")
    elif doc["state"] in ("interrupted", "stopped", "running"):
        lines.append(f"orchardist resume {run}")
    elif doc["state"] == "awaiting_review":
        lines.append(f"orchardist review {run}")
        lines.append(f"orchardist resume {run}    (once decided)")
    if any(s == "done" for s in states.values()):
        lines.append(f"git log --oneline {doc['base'][:12]}..{doc['branch']}")
    lines.append(f"orchardist status {run}")
    print("next:")
    for line in lines:
        print(f"  {line}")


def _exit_label(attempt: dict[str, Any]) -> str:
    """``agent exit 3 `` or ``verify exit 1 ``: whose exit code it is; nothing while unknown."""
    code = attempt["exit_code"]
    if code is None or (code == 0 and not attempt["failure"]):
        return ""
    by_verify = attempt["failure"] == "verify_failed" or str(attempt["detail"]).startswith(
        ("verify", "check")
    )
    return f"{'verify' if by_verify else 'agent'} exit {code} "


def _spent(usage: dict[str, Any]) -> str:
    """`` $0.0123 1200 in / 300 out tokens`` from whatever is known."""
    text = ""
    if usage.get("cost_usd") is not None:
        text += f" ${usage['cost_usd']:.4f}"
    if usage.get("input_tokens") is not None or usage.get("output_tokens") is not None:
        text += (
            f" {usage.get('input_tokens') or 0} in / {usage.get('output_tokens') or 0} out tokens"
        )
    return text


def _first_few(ids: Sequence[str], limit: int | None) -> str:
    """``a, b, c``; past ``limit``, the first few and how many more."""
    if limit is None or len(ids) <= limit:
        return ", ".join(ids)
    return f"{', '.join(ids[:SUMMARY_FEW])} and {len(ids) - SUMMARY_FEW} more ({len(ids)} in all)"


def status_text(ws: Any, run: Any, as_json: bool) -> str:
    """What ``status`` prints, as a string (``status --watch`` redraws it)."""
    import contextlib
    import io

    from ..state.report import status_document

    doc = status_document(ws.store, run)
    doc["state"] = shown_state(ws, run)
    if as_json:
        return json.dumps(doc)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_summary(doc, attempts=True)
    return buffer.getvalue().rstrip("\n")


def shown_state(ws: Any, run: Any) -> str:
    """The run's state, ``dead`` for a running run no live orchardist holds (killed by -9)."""
    from ..runs.control import lock_path

    if run.state is RunState.RUNNING and not lock_held(lock_path(ws.state_dir, run.id)):
        return "dead"
    return str(run.state.value)


def lock_held(path: Path) -> bool:
    """Whether some process holds a flock on ``path``, seen in /proc/locks.

    Looking must not take the lock, even shared for an instant: an orchestrator taking it at
    that moment would be refused its own run.
    """
    from ..runs.control import holder

    try:
        st = path.stat()
        table = Path("/proc/locks").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: the probe that briefly takes the lock is all there is
        return holder(path.parent.parent, path.stem) is not None
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        major, minor, inode = fields[5].split(":")
        same_device = (int(major, 16), int(minor, 16)) == (os.major(st.st_dev), os.minor(st.st_dev))
        if same_device and int(inode) == st.st_ino:
            return True
    return False


def rate_limit_wait(wait: dict[str, Any], now: float | None = None) -> str:
    """When a rate-limited task may run again, as its requeue recorded it."""
    import time

    at = wait.get("retry_at")
    if at is None:
        return "rate limited: requeued; the profile's back-off decides when it runs again"
    left = at - (time.time() if now is None else now)
    soon = f"in {elapsed(left)}" if left > 0 else "now"
    return f"rate limited: may run again at {when(at)} ({soon})"


def when(timestamp: float) -> str:
    """Local date and minute, as ``2026-12-02 01:05``."""
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def elapsed(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
