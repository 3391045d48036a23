"""Read-side views of a run: the status document, and one-line event descriptions."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..terminal import plain
from .eventlog import Event
from .events import AttemptEvent, Kind, ReviewEvent
from .records import AttemptRecord, AttemptState, Run, TaskRecord
from .store import Store


def status_document(
    store: Store, run: Run, records: list[AttemptRecord] | None = None
) -> dict[str, Any]:
    """The ``status --json`` document of a run (from its attempts ``records`` when the caller
    has read them already)."""
    attempts = by_task(store.attempts(run.id) if records is None else records)
    found = store.tasks(run.id)
    waits = rate_limit_waits(store, run.id, found)
    tasks = [task_entry(t, attempts.get(t.task_id, []), waits.get(t.task_id)) for t in found]
    return run_entry(run, tasks, [a for mine in attempts.values() for a in mine])


def by_task(records: list[AttemptRecord]) -> dict[str, list[AttemptRecord]]:
    """Attempts grouped by their task, each task's by number."""
    attempts: dict[str, list[AttemptRecord]] = {}
    for attempt in records:
        attempts.setdefault(attempt.task_id, []).append(attempt)
    for mine in attempts.values():
        mine.sort(key=lambda a: a.n)
    return attempts


def rate_limit_waits(
    store: Store, run_id: str, tasks: list[TaskRecord]
) -> dict[str, dict[str, Any]]:
    """The tasks of ``tasks`` a rate limit holds back (a finished run's: none, and no query)."""
    waiting = any(not task.state.terminal for task in tasks)
    return _rate_limit_waits(store.last_events(run_id, Kind.ATTEMPT) if waiting else [])


def rate_limit_wait(store: Store, task: TaskRecord) -> dict[str, Any] | None:
    """:func:`rate_limit_waits` for one task, reading only its own latest attempt event."""
    if task.state.terminal:
        return None
    events = store.last_events(task.run_id, Kind.ATTEMPT, task_id=task.task_id)
    return _rate_limit_waits(events).get(task.task_id)


def task_entry(
    task: TaskRecord, mine: list[AttemptRecord], wait: dict[str, Any] | None
) -> dict[str, Any]:
    """A task's part of the status document, from its attempts ``mine`` (by number) and its
    rate limit's ``wait`` (see :func:`rate_limit_waits`)."""
    merged = [a for a in mine if a.state is AttemptState.MERGED]
    winner = {"candidate": merged[-1].candidate, "attempt": merged[-1].n} if merged else None
    stage = {}
    if task.stage:  # a pipeline's stage, and what it handed over
        handoff = _json(merged[-1].handoff) if merged else None
        stage = {"stage": task.stage, "pipeline": task.pipeline_task, "handoff": handoff}
    return {
        "id": task.task_id,
        "state": task.state.value,
        "commit": task.commit,
        "reason": task.reason,
        **stage,
        "winner": winner,
        "attempts": [_attempt(a) for a in mine],
        **_totals(mine),
        "rate_limited": None if task.state.terminal else wait,
    }


def run_entry(
    run: Run, tasks: list[dict[str, Any]], attempts: list[AttemptRecord]
) -> dict[str, Any]:
    """The status document of ``run`` around its task entries ``tasks``."""
    return {
        "run": run.id,
        "state": run.state.value,
        "branch": run.branch,
        "base": run.base_commit,
        "plan": run.plan_path,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "reason": run.reason,
        "tasks": tasks,
        "totals": _totals(attempts),
        "summary": dict(Counter(t["state"] for t in tasks)),
        "unverified": [t["id"] for t in tasks if _merged_verdict(t) == "unverified"],
    }


def _rate_limit_waits(events: list[Event]) -> dict[str, dict[str, Any]]:
    """Tasks whose latest attempt event (of ``events``, each task's latest) is a rate limit's
    requeue: when they may run again.

    ``retry_at`` is the requeue's time plus the reset the backend reported (Unix seconds); null
    when it reported none (the profile's back-off decides). A later attempt event clears it.
    """
    waits: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.kind != Kind.ATTEMPT or event.task_id is None:
            continue
        data = event.data
        waits.pop(event.task_id, None)
        if data.get("state") == AttemptEvent.REQUEUED and data.get("failure") == "rate_limited":
            after = data.get("retry_after_s")
            timed = isinstance(after, int | float) and not isinstance(after, bool)
            at = round(event.ts + float(after), 3) if timed and after is not None else None
            waits[event.task_id] = {"since": event.ts, "retry_after_s": after, "retry_at": at}
    return waits


def _merged_verdict(task: dict[str, Any]) -> str:
    merged = [a for a in task["attempts"] if a["state"] == "merged"]
    return str(merged[-1]["verdict"]) if merged else ""


def _attempt(a: AttemptRecord) -> dict[str, Any]:
    duration = a.duration_s
    return {
        "n": a.n,
        "candidate": a.candidate,
        "agent": a.agent,
        "state": a.state.value,
        "exit_code": a.exit_code,
        "failure": a.failure.value if a.failure else None,
        "detail": a.detail,
        "duration_s": None if duration is None else round(duration, 3),
        "base": a.base_commit,
        "patch": a.patch_commit,
        "changed_lines": a.changed_lines,
        "verdict": a.verdict,
        "selection": a.selection,
        "won": a.won,
        "cost_usd": a.usage.cost_usd,
        "input_tokens": a.usage.input_tokens,
        "output_tokens": a.usage.output_tokens,
        "turns": a.usage.turns,
        "session_id": a.usage.session_id,  # the tool's own, which its task's retry continues
        "log": a.log_path,
        **({"handoff": _json(a.handoff)} if a.handoff else {}),
    }


def _json(text: str) -> Any:
    """A stored handoff, parsed (None when there is none)."""
    return json.loads(text) if text else None


def _totals(attempts: list[AttemptRecord]) -> dict[str, Any]:
    """Each of the costs summed over ``attempts`` (None where none reported it), in one pass:
    a 500-task run's page sums them for every task."""
    totals: dict[str, Any] = {"cost_usd": None, "input_tokens": None, "output_tokens": None}
    for a in attempts:
        for name, value in (
            ("cost_usd", a.usage.cost_usd),
            ("input_tokens", a.usage.input_tokens),
            ("output_tokens", a.usage.output_tokens),
        ):
            if value is not None:
                totals[name] = (totals[name] or 0) + value  # as sum() adds, from 0
    return totals


def describe(event: Event) -> str:
    """One line for a person, e.g. ``task slugify: failed (verify_failed: ...)``."""
    data = dict(event.data)
    state = data.pop("state", "")
    reason = data.pop("reason", "") or data.pop("detail", "")
    if event.kind == Kind.RUN:
        text = f"run {event.run_id}: {state}"
        if "branch" in data:
            text += f" (branch {data['branch']}, {data.get('tasks', '?')} tasks)"
    elif event.kind == Kind.ATTEMPT:
        text = f"  {event.task_id} attempt {event.attempt}: {state}"
        if "agent" in data:  # which profile: a fallback's name when the task's own is resting
            text += f" on {data['agent']}"
        if "duration_s" in data:
            text += f" in {data['duration_s']:.1f}s"
    elif event.kind == Kind.MERGE:
        text = f"  {event.task_id} merge: {state}"
        if "commit" in data:
            text += f" {str(data['commit'])[:12]}"
    elif event.kind == Kind.REVIEW:
        text = f"  review {event.task_id}: {state}"
        if "verdict" in data and "who" in data:  # a decision, recorded or acted on
            text += f" {data['verdict']} by {data['who']}"
        if state == ReviewEvent.REQUESTED:
            text += f" (orchardist review {event.run_id} {event.task_id})"
    elif event.kind == Kind.TASK:
        text = f"{event.task_id}: {state}"
        if "retry" in data:
            text += f" (retry {data['retry']} in {data.get('retry_in_s', 0):.1f}s)"
        if "rerun" in data:
            text += f" (re-run {data['rerun']})"
    else:
        subject = f" {event.task_id}" if event.task_id else ""
        text = f"  {event.kind}{subject}: {state}"
        if "commit" in data:
            text += f" {str(data['commit'])[:12]}"
        if "agent" in data:
            text += f" ({data['agent']})"
    if reason:
        text += f" — {reason}"
    return plain(text)  # a reason can quote what an agent wrote (a handoff's file names, say)
