"""The commands that read a run: ``show``, ``logs``, ``status``, ``events`` and ``runs``."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EXIT_OK, UsageError
from ..terminal import plain
from .options import Commands, positive, repo_arg
from .summary import elapsed, print_summary, shown_state, status_text, when

if TYPE_CHECKING:
    import argparse

    from ..runs.start import Workspace


def add_show(sub: Commands) -> None:
    """Register ``orchardist show``."""
    p = sub.add_parser("show", help="print a candidate's diff and log")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("task", help="task id")
    p.add_argument("--candidate", type=int, metavar="K", help="candidate index (default: winner)")
    p.add_argument("--attempt", type=positive, metavar="N", help="attempt number")
    p.add_argument(
        "--raw", action="store_true", help="print the agent's escape sequences as they are"
    )
    repo_arg(p)
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    """``orchardist show RUN TASK [--candidate K]``."""
    from ..runs.start import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    attempts = attempts_of(ws, run, args.task, args.attempt)
    if args.candidate is not None:
        attempts = [a for a in attempts if a.candidate == args.candidate]
    if not attempts:
        raise UsageError(f"task {args.task!r} has no attempt of candidate {args.candidate}")
    merged = [a for a in attempts if a.state.value == "merged"]
    attempt = merged[-1] if merged and args.candidate is None else attempts[-1]
    shown = (lambda text: text) if args.raw else plain  # what agents wrote: detail, diff, log
    print(
        f"==> {args.task} attempt {attempt.n} candidate {attempt.candidate} "
        f"({attempt.agent}): {_outcome(attempt, shown)}"
    )
    print(f"    {shown(attempt.detail)}")
    if attempt.patch_commit:
        diff = ws.repo.git("diff", "--stat", "--patch", attempt.base_commit, attempt.patch_commit)
        print(shown(diff))
    else:
        print("(no patch: the attempt ended before its changes were taken)")
    _print_attempt_log(args.task, attempt, args.raw)
    return EXIT_OK


def _outcome(attempt: Any, shown: Callable[[str], str]) -> str:
    """The attempt's state, then its verdict and selection (what agents wrote, ``shown``)
    only where they say more (``failed``, not ``failed failed failed``)."""
    state = attempt.state.value
    parts = [state]
    if attempt.verdict and attempt.verdict != state:
        parts.append(f"verdict {attempt.verdict}")
    if attempt.selection and attempt.selection not in (state, attempt.verdict):
        parts.append(shown(str(attempt.selection)))
    return "; ".join(parts)


def attempts_of(ws: Any, run: Any, task: str, n: int | None) -> list[Any]:
    """The task's attempts (only number ``n`` if given): ``logs`` and ``show`` pick alike."""
    if not any(t.task_id == task for t in ws.store.tasks(run.id)):
        raise UsageError(f"run {run.id} has no task {task!r}")
    attempts = [a for a in ws.store.attempts(run.id, task) if n is None or a.n == n]
    if not attempts:
        raise UsageError(f"task {task!r} has no attempts" + (f" numbered {n}" if n else ""))
    return attempts


def _print_attempt_log(task: str, attempt: Any, raw: bool = False) -> None:
    """One attempt's log under the same header in ``logs`` and ``show``."""
    sys.stdout.write(f"==> {task} attempt {attempt.n} ({attempt.state.value}) {attempt.log_path}\n")
    sys.stdout.flush()
    _print_log(attempt.log_path, raw)


def _print_log(path: str, raw: bool = False) -> None:
    """An attempt's log on stdout, decoded leniently; escape sequences stripped unless ``raw``."""
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        data = b"(log not available)\n"
    text = data.decode("utf-8", errors="replace")
    sys.stdout.write(text if raw else plain(text))
    sys.stdout.flush()


def add_logs(sub: Commands) -> None:
    """Register ``orchardist logs``."""
    p = sub.add_parser("logs", help="print the log of a task's attempts")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("task", help="task id")
    p.add_argument("--attempt", type=positive, help="only this attempt (default: all)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing what the attempts write, new attempts too, until the run ends",
    )
    p.add_argument(
        "--raw", action="store_true", help="print the agent's escape sequences as they are"
    )
    repo_arg(p)
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    """``orchardist logs RUN TASK``."""
    from ..runs.start import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if not any(t.task_id == args.task for t in ws.store.tasks(run.id)):
        raise UsageError(f"run {run.id} has no task {args.task!r}")
    if args.follow:
        from ..runs.tail import follow_logs

        follow_logs(ws, run, args.task, args.attempt, raw=args.raw)
        return EXIT_OK
    for attempt in attempts_of(ws, run, args.task, args.attempt):
        _print_attempt_log(args.task, attempt, args.raw)
    return EXIT_OK


def add_status(sub: Commands) -> None:
    """Register ``orchardist status``."""
    p = sub.add_parser("status", help="show a run's tasks and attempts (default: newest run)")
    p.add_argument("run", nargs="?", help="run id or a unique prefix")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "-w", "--watch", action="store_true", help="redraw on each change until the run ends"
    )
    repo_arg(p)
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    """``orchardist status [RUN]``."""
    from ..runs.gc import run_disk_bytes
    from ..runs.start import Workspace
    from ..state.report import status_document

    ws = Workspace.open(args.repo, create=False)
    with contextlib.closing(ws.store):  # now: this process may end without its teardown
        run = ws.resolve_run(args.run)
        if args.watch:
            from ..runs.tail import watch_status

            watch_status(ws, run, lambda r: status_text(ws, r, args.json))
            return EXIT_OK
        doc = status_document(ws.store, run)
        doc["state"] = shown_state(ws, run)
        doc["disk_bytes"] = run_disk_bytes(ws, run.id)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_summary(doc, attempts=True)
    return EXIT_OK


def add_events(sub: Commands) -> None:
    """Register ``orchardist events``."""
    p = sub.add_parser(
        "events",
        help="print a run's events, one JSON object per line",
        description="Print the run's event log, one JSON object per line: seq, time (Unix "
        "seconds), kind (run, task, attempt, merge, ...), task, attempt, data. With --follow, "
        "keep printing new events as they are committed until the run's orchardist exits.",
    )
    p.add_argument("run", nargs="?", help="run id or a unique prefix (default: newest)")
    p.add_argument("-f", "--follow", action="store_true", help="wait for new events")
    p.add_argument("--after", type=int, default=0, metavar="SEQ", help="only events after SEQ")
    repo_arg(p)
    p.set_defaults(func=cmd_events)


def cmd_events(args: argparse.Namespace) -> int:
    """``orchardist events [RUN] [--follow]``."""
    from ..runs.start import Workspace
    from ..runs.tail import print_events

    ws = Workspace.open(args.repo, create=False)
    print_events(ws, ws.resolve_run(args.run), args.follow, args.after)
    return EXIT_OK


def add_runs(sub: Commands) -> None:
    """Register ``orchardist runs``."""
    p = sub.add_parser("runs", help="list runs in this repository, newest first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    repo_arg(p)
    p.set_defaults(func=cmd_runs)


def cmd_runs(args: argparse.Namespace) -> int:
    """``orchardist runs``."""
    from ..runs.start import Workspace

    ws = Workspace.existing(args.repo)
    rows: list[dict[str, Any]] = []
    if ws is not None:
        with contextlib.closing(ws.store):  # now: this process may end without its teardown
            rows = run_rows(ws)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no runs yet")
        return EXIT_OK
    wide = max(len("BRANCH"), *(len(row["branch"]) for row in rows))  # BRANCH over its column
    state = max(11, *(len(row["state"]) for row in rows))  # awaiting_review is 15 wide
    print(
        f"{'RUN':<20}  {'STATE':<{state}} {'DONE':>7}  {'STARTED':<16}  {'TOOK':>8}  "
        f"{'BRANCH':<{wide}}  PLAN"
    )
    for row in rows:
        took = "" if row["finished_at"] is None else elapsed(row["finished_at"] - row["created_at"])
        print(
            f"{row['run']:<20}  {row['state']:<{state}} {row['done']:>3}/{row['tasks']:<3}  "
            f"{when(row['created_at'])}  {took:>8}  {row['branch']:<{wide}}  {row['plan']}"
        )
    return EXIT_OK


def run_rows(ws: Workspace) -> list[dict[str, Any]]:
    """A row of ``orchardist runs`` for each run in ``ws``'s store, the newest first."""
    runs = ws.store.runs()
    counts = ws.store.run_counts()  # one query, not one a run
    rows: list[dict[str, Any]] = []
    for run in runs:
        tasks = counts[run.id].tasks if run.id in counts else {}
        rows.append(
            {
                "run": run.id,
                "state": shown_state(ws, run),
                "branch": run.branch,
                "tasks": sum(tasks.values()),
                "done": tasks.get("done", 0),
                "plan": run.plan_path,
                "created_at": run.created_at,
                "finished_at": run.finished_at,
            }
        )
    return rows
