"""The command line: ``orchardist run | validate | status | runs | logs``.

Exit codes: 0 every task done; 1 some task failed or blocked; 2 bad plan or usage;
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from . import __version__
from .errors import OrchardistError, PlanError, UsageError
from .hooks import Hook, Hooks
from .plan import load_plan
from .records import RunState

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchardist`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = args.func(args)
        return code
    except PlanError as exc:
        print(f"error: the plan has {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OrchardistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchardist",
        description="Run coding agents in parallel git worktrees; keep only what real runs prove.",
        epilog="Exit codes: 0 all tasks done, 1 a task failed or was blocked, 2 bad plan or "
        "usage, 130 interrupted. State lives under $(git rev-parse --git-common-dir)/orchardist.",
    )
    parser.add_argument("--version", action="version", version=f"orchardist {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    p = sub.add_parser(
        "run",
        help="run a plan to its end",
        description="Run a plan: schedule "
        "its tasks in worktrees, verify each, merge each onto a new run branch.",
    )
    p.add_argument("plan", type=Path, help="plan file (.toml, .yaml or .yml)")
    p.add_argument(
        "--max-parallel",
        type=_positive,
        metavar="N",
        help="attempts running at once (overrides [run] max_parallel)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the final status as JSON on stdout (progress goes to stderr)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a plan without running it")
    p.add_argument("plan", type=Path)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("status", help="show a run's tasks and attempts (default: newest run)")
    p.add_argument("run", nargs="?", help="run id or a unique prefix")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("runs", help="list runs in this repository, newest first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("logs", help="print the log of a task's attempts")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("task", help="task id")
    p.add_argument("--attempt", type=_positive, help="only this attempt (default: all)")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_logs)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# -- commands ------------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    """``orchardist validate PLAN``."""
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        if not args.json:
            raise
        problems = [p.__dict__ for p in exc.problems]
        print(json.dumps({"valid": False, "problems": problems}, indent=2))
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"valid": True, "tasks": len(plan.tasks), "repo": str(plan.repo)}))
    else:
        print(f"{args.plan}: ok ({len(plan.tasks)} tasks, {len(plan.agents)} agent profiles)")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``orchardist run PLAN``."""
    from .report import status_document
    from .runs import Workspace, create_run, execute

    plan = load_plan(args.plan)
    ws = Workspace.open(plan.repo)
    run = create_run(ws, plan)
    hooks = _progress_hooks(plan, args.json)
    stops: list[Callable[[], None]] = []
    restore = _on_signals(lambda: [stop() for stop in stops])
    try:
        state = execute(
            ws,
            plan,
            run,
            hooks=hooks,
            max_parallel=args.max_parallel,
            on_scheduler=lambda s: stops.append(s.stop),
        )
    finally:
        hooks.close()
        restore()
    doc = status_document(ws.store, ws.resolve_run(run.id))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_summary(doc)
    return {RunState.DONE: EXIT_OK, RunState.INTERRUPTED: EXIT_INTERRUPTED}.get(state, EXIT_FAILED)


def cmd_status(args: argparse.Namespace) -> int:
    """``orchardist status [RUN]``."""
    from .report import status_document
    from .runs import Workspace

    ws = Workspace.open(args.repo)
    doc = status_document(ws.store, ws.resolve_run(args.run))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_summary(doc, attempts=True)
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    """``orchardist runs``."""
    from .runs import Workspace

    ws = Workspace.open(args.repo)
    rows = []
    for run in ws.store.runs():
        tasks = ws.store.tasks(run.id)
        done = sum(t.state.value == "done" for t in tasks)
        rows.append(
            {
                "run": run.id,
                "state": run.state.value,
                "branch": run.branch,
                "tasks": len(tasks),
                "done": done,
                "plan": run.plan_path,
                "created_at": run.created_at,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no runs yet")
    for row in rows:
        print(
            f"{row['run']}  {row['state']:<11} {row['done']}/{row['tasks']} done  "
            f"{row['branch']}  {row['plan']}"
        )
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    """``orchardist logs RUN TASK``."""
    from .runs import Workspace

    ws = Workspace.open(args.repo)
    run = ws.resolve_run(args.run)
    attempts = ws.store.attempts(run.id, args.task)
    if not any(t.task_id == args.task for t in ws.store.tasks(run.id)):
        raise UsageError(f"run {run.id} has no task {args.task!r}")
    if args.attempt is not None:
        attempts = [a for a in attempts if a.n == args.attempt]
    if not attempts:
        raise UsageError(
            f"task {args.task!r} has no attempts"
            + (f" numbered {args.attempt}" if args.attempt else "")
        )
    out = sys.stdout
    for attempt in attempts:
        out.write(
            f"==> {args.task} attempt {attempt.n} ({attempt.state.value}) {attempt.log_path}\n"
        )
        try:
            data = Path(attempt.log_path).read_bytes() if attempt.log_path else b""
        except OSError:
            data = b"(log not available)\n"
        out.write(data.decode("utf-8", errors="replace"))
        out.flush()
    return EXIT_OK


# -- helpers -------------------------------------------------------------------------------


def _progress_hooks(plan: Any, json_mode: bool) -> Hooks:
    from .display import LiveTable, PlainLines

    hooks: list[Hook]
    if not json_mode and sys.stdout.isatty():
        from rich.console import Console

        hooks = [LiveTable(plan, Console())]
    else:
        hooks = [PlainLines(sys.stderr if json_mode else sys.stdout)]
    return Hooks(hooks)


def _on_signals(stop: Callable[[], object]) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to a graceful stop; a second signal is not needed to end."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _print_summary(doc: dict[str, Any], attempts: bool = False) -> None:
    print(f"run {doc['run']}: {doc['state']}  branch {doc['branch']}")
    for task in doc["tasks"]:
        line = f"  {task['id']:<20} {task['state']:<10}"
        if task["commit"]:
            line += f" {task['commit'][:12]}"
        tries = len(task["attempts"])
        line += f"  {tries} attempt{'s' if tries != 1 else ''}"
        if task["reason"] and task["state"] != "done":
            line += f"  ({task['reason']})"
        print(line)
        if attempts:
            for a in task["attempts"]:
                took = "" if a["duration_s"] is None else f"{a['duration_s']:.1f}s"
                failure = f" {a['failure']}" if a["failure"] else ""
                print(
                    f"      #{a['n']} {a['agent']:<12} {a['state']:<11} exit={a['exit_code']} "
                    f"{took}{failure} {a['detail']}"
                )
    totals = doc.get("totals", {})
    if totals.get("cost_usd") is not None:
        print(f"  cost ${totals['cost_usd']:.4f}")
