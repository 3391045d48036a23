"""``[run] notify``: tell someone when a run ends or needs a person (it ended awaiting review),
so a long run can be left alone.

The target is a command or an http(s) URL (``plan.notify_target`` tells them apart). A command
runs outside any attempt, as the user who started the run, in the repository's folder, in a
process group of its own: the notice comes as JSON on stdin (and ``ORCHARDIST_RUN_ID``,
``ORCHARDIST_RUN_STATE``, ``ORCHARDIST_NOTICE`` in its environment), and at ``notify_timeout``
the whole group is killed. A URL gets the same JSON as a POST. Either way a notifier that fails
(exits non-zero, times out, refuses the POST) is recorded as a ``notify`` event and logged,
never the run's failure: the run's outcome is already in the store.

The notice::

    {"notice": "ended", "run": ID, "state": STATE, "plan": PATH, "branch": BRANCH,
     "counts": {TASK_STATE: N, ...}, "failed": [{"task": ID, "state": ..., "reason": ...}],
     "review": [TASK ID, ...], "dashboard": URL or null, "cost_usd": X}
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..confine.procs import ProcessRequest, run_process
from ..plan.fields import is_url
from ..state.eventlog import Event
from ..state.events import Kind, NotifyEvent
from ..state.records import Run, RunState, TaskState
from ..state.report import status_document
from ..state.store import Store

log = logging.getLogger("orchardist")

SHOWN_TASKS = 50  # failed tasks listed in one notice (the counts cover the rest)
REASON_CHARS = 500
_FAILED = ("failed", "blocked")


class Notice(enum.StrEnum):
    """Why a run tells its notifier."""

    ENDED = "ended"  # the run reached a final state (done, failed, stopped, ...)
    NEEDS_REVIEW = "needs_review"  # the run ended awaiting review: tasks wait for decisions


@dataclass(frozen=True)
class Delivery:
    """How one notice went."""

    ok: bool
    detail: str  # "exit 0", "HTTP 204", or what went wrong
    duration_s: float


def notice_for(run: Run) -> Notice:
    """A run that ended awaiting review needs a person; any other final state has ended."""
    return Notice.NEEDS_REVIEW if run.state is RunState.AWAITING_REVIEW else Notice.ENDED


def notice_document(
    store: Store,
    run: Run,
    notice: Notice,
    dashboard: str | None = None,
    review: Sequence[str] = (),
) -> dict[str, Any]:
    """What the notifier is told: the run, its counts, the tasks that failed or await review
    (``review``, else those the store has awaiting it)."""
    doc = status_document(store, run)
    tasks = doc["tasks"]
    waiting = [t["id"] for t in tasks if t["state"] == TaskState.AWAITING_REVIEW]
    failed = [
        {"task": t["id"], "state": t["state"], "reason": (t["reason"] or "")[:REASON_CHARS]}
        for t in tasks
        if t["state"] in _FAILED
    ]
    return {
        "notice": notice.value,
        "run": run.id,
        "state": run.state.value,
        "plan": run.plan_path,
        "branch": run.branch,
        "counts": dict(Counter(t["state"] for t in tasks)),
        "failed": failed[:SHOWN_TASKS],
        "review": list(review or waiting),
        "dashboard": run_page(dashboard, run.id) if dashboard else None,
        "cost_usd": doc.get("cost_usd"),
    }


def notify(
    store: Store,
    run: Run,
    target: str,
    timeout_s: float,
    notice: Notice,
    *,
    cwd: Path,
    log_dir: Path,
    dashboard: str | None = None,
    review: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Delivery:
    """Send ``notice`` about ``run`` to ``target``; record a ``notify`` event either way.
    Never raises for the notifier's failure (the run's outcome does not depend on it)."""
    document = notice_document(store, run, notice, dashboard, review)
    body = json.dumps(document, indent=2).encode()
    if is_url(target):
        delivery = post(target, body, timeout_s)
    else:
        env = {
            **(os.environ if environ is None else environ),
            "ORCHARDIST_RUN_ID": run.id,
            "ORCHARDIST_RUN_STATE": run.state.value,
            "ORCHARDIST_NOTICE": notice.value,
        }
        delivery = run_command(target, body, timeout_s, cwd=cwd, env=env, log_dir=log_dir)
    if not delivery.ok:
        log.warning("notify %s failed: %s", _shown(target), delivery.detail)
    with store.transaction() as tx:
        tx.emit(
            Event(
                run.id,
                Kind.NOTIFY,
                time.time(),
                None,
                None,
                data={
                    "state": NotifyEvent.SENT if delivery.ok else NotifyEvent.FAILED,
                    "notice": notice.value,
                    "target": _shown(target),
                    "detail": delivery.detail,
                    "duration_s": round(delivery.duration_s, 3),
                },
            )
        )
    return delivery


def run_command(
    command: str, body: bytes, timeout_s: float, *, cwd: Path, env: Mapping[str, str], log_dir: Path
) -> Delivery:
    """The notify command under ``sh -c``, the notice on stdin, its output in ``notify.log``;
    its whole process group killed at ``timeout_s``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    notice_file = log_dir / "notify.json"
    notice_file.write_bytes(body)
    started = time.monotonic()
    try:
        proc = run_process(
            ProcessRequest(
                argv=["/bin/sh", "-c", command],
                cwd=cwd,
                env=env,
                log=log_dir / "notify.log",
                timeout_s=timeout_s,
                stdin_file=notice_file,
            )
        )
    except OSError as exc:
        return Delivery(False, f"could not start: {exc}", time.monotonic() - started)
    if proc.timed_out:
        return Delivery(False, f"timed out after {timeout_s:g}s (killed)", proc.duration_s)
    detail = f"exit {proc.exit_code}"
    return Delivery(proc.exit_code == 0, detail, proc.duration_s)


def post(url: str, body: bytes, timeout_s: float) -> Delivery:
    """POST the notice as JSON; any answer but 2xx, or no answer in time, is a failure."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "orchardist"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # http(s) only
            status = answer.status
    except urllib.error.HTTPError as exc:
        return Delivery(False, f"HTTP {exc.code}", time.monotonic() - started)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Delivery(False, f"no answer: {reason}", time.monotonic() - started)
    return Delivery(200 <= status < 300, f"HTTP {status}", time.monotonic() - started)


def run_page(dashboard: str, run_id: str) -> str:
    """The run's page on the dashboard served with the run, with the token its URL carries
    (every request needs it; the dashboard listens on 127.0.0.1 only)."""
    parts = urllib.parse.urlsplit(dashboard)
    return urllib.parse.urlunsplit(parts._replace(path=f"/runs/{run_id}", fragment=""))


def _shown(target: str) -> str:
    """The target as events and logs show it: a URL without its user, query and fragment
    (they may hold a secret), a command's first word."""
    if is_url(target):
        parts = urllib.parse.urlsplit(target)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return target.split(None, 1)[0] if target.strip() else target
