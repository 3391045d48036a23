"""The commands that drive a run: ``run``, ``resume``, ``retry``, and ``cancel`` (from another
terminal)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import EXIT_FAILED, EXIT_OK, PlanError, UsageError
from ..state.records import RunState
from .drive import (
    checkout_note,
    cluster_reachable,
    confirm,
    drive,
    interactive,
    isolation_note,
    plan_of,
    refuse_if_driven,
    select,
)
from .options import (
    GRAPH_FORMATS,
    Commands,
    check_selection,
    driving_args,
    duration,
    executor_args,
    positive,
    positive_float,
    read_plan,
    repo_arg,
    root_parser,
    selection_args,
    with_executor,
)
from .plans import preflight, print_forecast
from .summary import elapsed, shown_state


def add_run(sub: Commands) -> None:
    """Register ``orchardist run``."""
    p = sub.add_parser(
        "run",
        help="run a plan to its end",
        description="Run a plan: schedule "
        "its tasks in worktrees, verify each, merge each onto a new run branch.",
    )
    p.add_argument("plan", type=Path, help="plan file (.toml, .yaml or .yml)")
    p.add_argument(
        "--max-parallel",
        type=positive,
        metavar="N",
        help="attempts running at once (overrides [run] max_parallel)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the final status as JSON on stdout (progress goes to stderr)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the launch order, critical path and expected makespan; run nothing",
    )
    p.add_argument(
        "--format",
        choices=GRAPH_FORMATS,
        default="text",
        help="with --dry-run: how to draw the graph (default: text)",
    )
    selection_args(p)
    executor_args(p)
    choice = p.add_mutually_exclusive_group()
    choice.add_argument(
        "--resume", action="store_true", help="resume this plan's unfinished run without asking"
    )
    choice.add_argument(
        "--fresh", action="store_true", help="start a new run even if an unfinished one exists"
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the live web dashboard while the run goes on (prints its URL)",
    )
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """``orchardist run PLAN``."""
    from ..runs.start import Workspace, create_run, unfinished_runs

    if args.format != "text" and not args.dry_run:  # a drawing was asked for, not a run
        raise UsageError(f"--format {args.format} draws the graph: it needs --dry-run")
    plan, found = read_plan(args.plan)
    plan = with_executor(plan, args)
    if args.dry_run:
        return print_forecast(plan, args)
    check_selection(plan, args.only, args.skip)
    isolation_note(plan)  # "required" without namespaces: refused before anything is made
    cluster_reachable(plan)  # an unreachable Ray cluster too
    note = checkout_note(plan)  # an editable install verify would test instead of the attempt
    if note and not args.quiet:
        print(note, file=sys.stderr, flush=True)
    # Read-only until every check passed: a refused run leaves nothing behind. The repository
    # is set up once, for the checks, the workspace and the run: where the plan's loader found
    # it (plan.repo, its top level), at the plan's base.
    repo = found.for_commits()
    where = (plan.repo, repo.common_dir)
    existing = Workspace.in_repo(where, repo) if Workspace.stored(where) else None
    unfinished = [] if args.fresh or existing is None else unfinished_runs(existing, plan)
    checked = preflight(plan, quiet=args.quiet, resumable=unfinished, repo=repo)
    if checked.problems:
        raise PlanError(list(checked.problems))
    ws = existing or Workspace.in_repo(where, repo)
    if unfinished:
        old = unfinished[0]
        refuse_if_driven(ws, old)
        state = shown_state(ws, old)  # "dead", as status says, for one whose orchardist died
        question = f"run {old.id} of this plan is {state}; resume it?"
        if args.resume:
            return drive(ws, plan, old, args, resuming=True, prepare=select(ws, plan, args))
        if not interactive():
            raise UsageError(
                f"run {old.id} of this plan is {state}: pass --resume to continue it "
                "or --fresh to start a new run"
            )
        if confirm(question):
            return drive(ws, plan, old, args, resuming=True, prepare=select(ws, plan, args))
    elif args.resume:
        raise UsageError(f"no unfinished run of {args.plan} to resume")
    return drive(ws, plan, create_run(ws, plan), args, prepare=select(ws, plan, args))


def drive_as_run(ws: Any, plan: Any, run: Any, *, json: bool, max_parallel: int | None) -> int:
    """``drive`` with the options ``orchardist run PLAN`` would have, but for these two."""
    parser = root_parser()
    add_run(parser.add_subparsers())
    driven = parser.parse_args(["run", str(plan.path)])
    driven.json, driven.max_parallel = json, max_parallel
    return drive(ws, plan, run, driven)


def unfinished_run(args: argparse.Namespace, verb: str) -> tuple[Any, Any]:
    """The workspace and the run ``args.run`` names; a UsageError when it already ended."""
    from ..runs.start import Workspace
    from ..state.records import UNFINISHED

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if run.state not in UNFINISHED:
        raise UsageError(f"run {run.id} already ended ({run.state.value}); nothing to {verb}")
    return ws, run


def add_resume(sub: Commands) -> None:
    """Register ``orchardist resume``."""
    p = sub.add_parser(
        "resume",
        help="continue an interrupted or stopped run",
        description="Continue a run that did not end: crashed (kill -9 included), "
        "interrupted or stopped by a deadline or budget. Leftover processes and worktrees are "
        "cleaned up, merged work is kept. (`retry` re-runs the failed tasks of a run that "
        "ended.)",
    )
    p.add_argument("run", nargs="?", help="run id or a unique prefix (default: newest)")
    p.add_argument("--deadline", metavar="DURATION", help="a new [run] deadline, e.g. 3h")
    p.add_argument(
        "--max-cost-usd", type=positive_float, metavar="USD", help="a new run cost budget"
    )
    driving_args(p)
    p.set_defaults(func=cmd_resume)


def cmd_resume(args: argparse.Namespace) -> int:
    """``orchardist resume [RUN]``."""
    from dataclasses import replace

    ws, run = unfinished_run(args, "resume")
    plan = plan_of(ws, run)
    changes: dict[str, Any] = {}
    if args.deadline is not None:
        changes["deadline_s"] = duration("--deadline", args.deadline)
        if run.created_at + changes["deadline_s"] <= time.time():
            raise UsageError(
                f"--deadline {args.deadline} has already passed: deadlines count from the "
                f"run's start, {elapsed(time.time() - run.created_at)} ago; give a longer one"
            )
    if args.max_cost_usd is not None:
        changes["max_cost_usd"] = args.max_cost_usd
    if changes:
        plan = replace(plan, run=replace(plan.run, **changes))
    return drive(ws, plan, run, args, resuming=True)


def add_retry(sub: Commands) -> None:
    """Register ``orchardist retry``."""
    p = sub.add_parser(
        "retry",
        help="re-run the failed, blocked and cancelled tasks of a run that ended",
        description="Re-run the failed, blocked and cancelled tasks of a run that ended (failed "
        "or cancelled), on the same run branch: what merged stays merged, their retry counts "
        "start again. With TASK..., only those tasks and their unfinished dependencies. "
        "(`resume` continues a run that did not end: crashed, interrupted or stopped.)",
    )
    p.add_argument("run", nargs="?", help="run id or a unique prefix (default: newest)")
    p.add_argument("tasks", nargs="*", metavar="TASK", help="only these tasks (default: all)")
    driving_args(p)
    p.set_defaults(func=cmd_retry)


def cmd_retry(args: argparse.Namespace) -> int:
    """``orchardist retry [RUN] [TASK...]``."""
    from ..runs.start import Workspace, check_known, prepare_retry

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if run.state is RunState.DONE:
        raise UsageError(
            f"run {run.id} is done: every task ended done or skipped; nothing to retry"
        )
    if run.state not in (RunState.FAILED, RunState.CANCELLED):
        raise UsageError(
            f"run {run.id} is {shown_state(ws, run)}: retry re-runs the failed tasks of a run "
            f"that ended failed or cancelled; continue this one with `orchardist resume {run.id}`"
        )
    plan = plan_of(ws, run)
    check_known(plan, args.tasks)
    return drive(
        ws, plan, run, args, resuming=True, prepare=lambda r: prepare_retry(ws, plan, r, args.tasks)
    )


def add_cancel(sub: Commands) -> None:
    """Register ``orchardist cancel``."""
    p = sub.add_parser(
        "cancel",
        help="end a live run from another terminal",
        description="Ask the orchardist driving a run to cancel it: running attempts are "
        "ended and recorded interrupted, nothing more is merged, unfinished tasks become "
        "cancelled and the run cancelled (retry it later with `orchardist retry`). A run whose "
        "orchestrator died is cleaned up and marked cancelled here. Waits until it has ended.",
    )
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--no-wait", action="store_true", help="return once the request is sent")
    repo_arg(p)
    p.set_defaults(func=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    """``orchardist cancel RUN``."""
    from ..runs.control import REVIEW_SIGNAL, Orchestrator
    from ..runs.start import cancel_abandoned, run_lock

    ws, run = unfinished_run(args, "cancel")
    orchestrator = Orchestrator.find(ws.state_dir, run.id)
    if orchestrator is None:
        # holding the lock, this process is who a review decision wakes: not a reason to die
        signal.signal(REVIEW_SIGNAL, signal.SIG_IGN)
        with run_lock(ws, run.id):
            cancel_abandoned(ws, run)
        print(f"run {run.id}: cancelled (no orchardist was driving it; cleaned up)")
        return EXIT_OK
    with orchestrator:
        if not orchestrator.signal():
            raise UsageError(f"run {run.id}: its orchestrator ended meanwhile; try again")
        print(f"run {run.id}: asked orchardist (pid {orchestrator.pid}) to cancel it", flush=True)
        if args.no_wait:
            return EXIT_OK
        orchestrator.wait()
    ended = ws.resolve_run(run.id)
    print(f"run {run.id}: {ended.state.value}")
    return EXIT_OK if ended.state is RunState.CANCELLED else EXIT_FAILED
