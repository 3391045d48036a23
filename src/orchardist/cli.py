"""The command line: ``orchardist run | resume | show | gc | validate | status | runs | logs |
doctor | scan``.

Exit codes: 0 every task done; 1 some task failed or blocked, the run was stopped by a deadline
or budget, or git or the store failed; 2 bad plan or usage, or the run is locked by another
orchardist; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from . import __version__
from .control import CANCEL_SIGNAL
from .errors import OrchardistError, PlanError, RunLockedError, UsageError
from .hooks import Hook, Hooks
from .plan import load_plan
from .records import RunState
from .terminal import plain, visible

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# A run's final summary lists at most this many tasks (counts by state say the rest), and of a
# longer list of ids the first few: a 10,000-task run must not print 10,000 lines.
SUMMARY_ROWS, SUMMARY_FEW = 20, 5


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchardist`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:  # `orchardist status | head`: the reader left; so do we, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except PlanError as exc:
        print(f"error: the plan has {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:  # a key may hold escape sequences: shown, never obeyed
            print(f"  {visible(str(problem))}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, RunLockedError) as exc:
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
        epilog="Exit codes: 0 all tasks done, 1 a task failed or was blocked or the run was "
        "stopped by a budget, 2 bad plan or usage (or the run is locked by another orchardist), "
        "130 interrupted. State lives under $(git rev-parse --git-common-dir)/orchardist.",
    )
    parser.add_argument("--version", action="version", version=f"orchardist {__version__}")
    _output_args(parser, argparse.SUPPRESS)
    parser.set_defaults(quiet=False, verbose=0, no_color=False)
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
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the launch order, critical path and expected makespan; run nothing",
    )
    p.add_argument(
        "--format",
        choices=("text", "dot", "mermaid"),
        default="text",
        help="with --dry-run: how to draw the graph (default: text)",
    )
    _selection_args(p)
    _executor_args(p)
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
        "--max-cost-usd", type=_positive_float, metavar="USD", help="a new run cost budget"
    )
    _driving_args(p)
    p.set_defaults(func=cmd_resume)

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
    _driving_args(p)
    p.set_defaults(func=cmd_retry)

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
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("show", help="print a candidate's diff and log")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("task", help="task id")
    p.add_argument("--candidate", type=int, metavar="K", help="candidate index (default: winner)")
    p.add_argument("--attempt", type=_positive, metavar="N", help="attempt number")
    p.add_argument(
        "--raw", action="store_true", help="print the agent's escape sequences as they are"
    )
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("gc", help="remove logs, worktrees and refs of old finished runs")
    p.add_argument("--older-than", default="7d", metavar="AGE", help="age, e.g. 12h or 7d")
    p.add_argument("--branches", action="store_true", help="also delete their run branches")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("validate", help="check a plan without running it")
    p.add_argument("plan", type=Path)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "schema",
        help="print the plan file's JSON Schema, for editors",
        description="Print the JSON Schema (draft 2020-12) of plan files, TOML or YAML, for "
        "editors: save it as plan.schema.json and start a TOML plan with `#:schema "
        "./plan.schema.json` (taplo, Even Better TOML) or a YAML plan with `# "
        "yaml-language-server: $schema=./plan.schema.json`. `orchardist validate` stays the judge.",
    )
    p.set_defaults(func=cmd_schema)

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
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("status", help="show a run's tasks and attempts (default: newest run)")
    p.add_argument("run", nargs="?", help="run id or a unique prefix")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "-w", "--watch", action="store_true", help="redraw on each change until the run ends"
    )
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("runs", help="list runs in this repository, newest first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser(
        "stats",
        help="numbers across runs: green at first shot, retries, cost, durations per profile",
        description="Figures across the runs of this repository, per agent profile and overall, "
        "computed from the store and the event log: tasks, green at first shot, attempts per "
        "task, retries by failure class, fallbacks, candidates per win and which profile wins, "
        "cost and tokens per merged task, median and p90 durations of agent, verify and merge, "
        "the slowest tasks, and the window compared with the one before it.",
    )
    p.add_argument("--since", metavar="DURATION", help="only runs created in this window (e.g. 7d)")
    p.add_argument("--plan", type=Path, help="only runs of this plan file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser(
        "serve",
        help="a live web dashboard of this repository's runs (needs the web extra)",
        description="Serve the dashboard: runs, each run's task graph, timeline and tasks, each "
        "task's logs and diffs, updated live from the event log; JSON under /api and Prometheus "
        "metrics at /metrics. Binds 127.0.0.1 and prints the URL to open, with a token every "
        "request needs (generated unless --token is given).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks one)")
    p.add_argument("--token", help="the access token (default: a random one)")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "plan",
        help="have an agent write a plan from a spec; validated, corrected, then shown",
        description="A planner agent reads SPEC and a copy of the repository's HEAD and writes a "
        "plan to $ORCHARDIST_PLAN_FILE. orchardist validates it as `validate` would at the "
        "output path; while it has problems (at most --rounds rounds) they are sent back to the "
        "agent. The valid plan is written, and its graph and critical path printed. Agent "
        "profiles come from .orchardist.toml at the repository root, then "
        "~/.config/orchardist/config.toml ([agents.NAME] tables as in plans).",
    )
    p.add_argument("spec", type=Path, help="the specification (Markdown or text)")
    p.add_argument("--agent", required=True, help="the planner's agent profile")
    p.add_argument("-o", dest="out", type=Path, default=Path("plan.toml"), help="plan to write")
    p.add_argument("--rounds", type=int, default=3, help="validation rounds at most (default 3)")
    p.add_argument("--run", action="store_true", help="run the plan once it is valid")
    p.add_argument("--yes", action="store_true", help="with --run: do not ask first")
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("logs", help="print the log of a task's attempts")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("task", help="task id")
    p.add_argument("--attempt", type=_positive, help="only this attempt (default: all)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing what the attempts write, new attempts too, until the run ends",
    )
    p.add_argument(
        "--raw", action="store_true", help="print the agent's escape sequences as they are"
    )
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser(
        "graph",
        help="print a plan's launch order, critical path, expected makespan and graph",
        description="Simulate the plan with each attempt taking its task's `estimate`, no "
        "failures, and max_parallel slots: the order tasks launch in, the critical path and its "
        "length, the expected makespan, and the dependency graph (text, Graphviz dot or "
        "mermaid). Runs nothing and creates nothing.",
    )
    p.add_argument("plan", type=Path, help="plan file (.toml, .yaml or .yml)")
    p.add_argument("--max-parallel", type=_positive, metavar="N", help="slots to simulate")
    p.add_argument("--only", nargs="+", metavar="TASK", default=[], help="as `run --only`")
    p.add_argument("--skip", nargs="+", metavar="TASK", default=[], help="as `run --skip`")
    p.add_argument(
        "--format", choices=("text", "dot", "mermaid"), default="text", help="(default: text)"
    )
    p.add_argument("--json", action="store_true", help="the forecast as JSON")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser(
        "doctor",
        help="check that every agent profile of a plan can run here",
        description="For each agent profile: is its CLI on PATH (and its version), are its "
        "credentials set (names only, never values); with --probe, does one tiny real request "
        "through it succeed. Exit 0 if all is well, 1 otherwise.",
    )
    p.add_argument("plan", type=Path)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--probe",
        action="store_true",
        help="also make one tiny real request per profile (costs one small model call each)",
    )
    _executor_args(p)
    p.set_defaults(func=cmd_doctor)

    from .oneshot import add_parsers as add_oneshot_parsers
    from .scan.cli import add_parser as add_scan_parser

    add_scan_parser(sub, _positive, _drive_as_run)
    add_oneshot_parsers(sub, main)

    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script: `source <(orchardist completion bash)` in "
        "~/.bashrc, `source <(orchardist completion zsh)` in ~/.zshrc (after compinit), "
        "`orchardist completion fish | source` in ~/.config/fish/config.fish.",
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=cmd_completion)

    for command in sub.choices.values():  # the output options work after the command too
        _output_args(command, argparse.SUPPRESS)
    _fill_help(sub)
    return parser


_ARG_HELP = {
    "plan": "plan file (.toml, .yaml or .yml)",
    "max_parallel": "attempts running at once (overrides [run] max_parallel)",
    "shell": "the shell to complete for",
}


def _fill_help(sub: Any) -> None:
    """Every subcommand's ``--help`` says what it does, and what each argument is."""
    summaries = {action.dest: action.help for action in sub._choices_actions}
    for name, command in sub.choices.items():
        if command.description is None and summaries.get(name):
            summary = str(summaries[name])
            command.description = summary[0].upper() + summary[1:] + "."
        for action in command._actions:
            if action.help is None and action.dest in _ARG_HELP:
                action.help = _ARG_HELP[action.dest]


def _output_args(p: argparse.ArgumentParser, default: Any) -> None:
    p.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no progress; a short summary"
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="every event with its details, and debug logging on stderr",
    )
    p.add_argument(
        "--no-color",
        action="store_true",
        default=default,
        help="no colours (also when NO_COLOR is set)",
    )


def _selection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        nargs="+",
        metavar="TASK",
        default=[],
        help="run only these tasks and what they depend on (done ones are reused)",
    )
    p.add_argument(
        "--skip",
        nargs="+",
        metavar="TASK",
        default=[],
        help="leave these tasks out, and the tasks that depend on them (state skipped)",
    )
    _fail_fast_arg(p)


def _driving_args(p: argparse.ArgumentParser) -> None:
    """Options of the commands that drive an existing run (resume, retry)."""
    p.add_argument("--max-parallel", type=_positive, metavar="N")
    p.add_argument("--json", action="store_true", help="print the final status as JSON")
    _fail_fast_arg(p)
    _executor_args(p)
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the live web dashboard while the run goes on (prints its URL)",
    )


def _executor_args(p: argparse.ArgumentParser) -> None:
    """Where attempts run: overrides of [run] executor (run, resume, retry)."""
    from .executors import EXECUTORS

    p.add_argument(
        "--executor",
        choices=sorted(EXECUTORS),
        help="where attempts run (overrides [run] executor; ray: see docs/ray.md)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster to run on, host:port or auto (default auto; executor ray only)",
    )


def _with_executor(plan: Any, args: argparse.Namespace) -> Any:
    """The plan with the command line's --executor and --ray-address applied."""
    from dataclasses import replace

    settings = plan.run
    if getattr(args, "executor", None):
        settings = replace(settings, executor=args.executor)
    if getattr(args, "ray_address", None):
        if settings.executor != "ray":
            raise UsageError(
                '--ray-address needs the ray executor: add --executor ray or [run] executor = "ray"'
            )
        settings = replace(settings, ray_address=args.ray_address)
    return replace(plan, run=settings)


def _fail_fast_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-x",
        "--fail-fast",
        action="store_true",
        help="end the run as soon as a task fails for good (unfinished tasks: cancelled)",
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# -- commands ------------------------------------------------------------------------------


def cmd_schema(args: argparse.Namespace) -> int:
    """``orchardist schema``."""
    from .schema import plan_schema

    print(json.dumps(plan_schema(), indent=2))
    return EXIT_OK


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
    checked = _preflight(plan, quiet=args.json)
    if checked.problems and args.json:
        problems = [p.__dict__ for p in checked.problems]
        print(json.dumps({"valid": False, "problems": problems}, indent=2))
        return EXIT_USAGE
    if checked.problems:
        raise PlanError(list(checked.problems))
    if args.json:
        doc = {"valid": True, "tasks": len(plan.tasks), "repo": str(plan.repo)}
        print(json.dumps({**doc, "warnings": list(checked.warnings)}))
    else:
        print(f"{args.plan}: ok ({len(plan.tasks)} tasks, {len(plan.agents)} agent profiles)")
    return EXIT_OK


def _preflight(plan: Any, quiet: bool = False, resumable: Sequence[Any] = ()) -> Any:
    """The checks ``validate`` and ``run`` share; warnings go to stderr (unless ``quiet``).

    A branch that exists because it is a resumable run's own is no problem.
    """
    from .preflight import Preflight, preflight

    checked = preflight(plan)
    own = {f"branch {r.branch!r} already exists" for r in resumable}
    problems = tuple(p for p in checked.problems if p.message not in own)
    if not quiet:
        for warning in checked.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return Preflight(problems, checked.warnings)


def cmd_run(args: argparse.Namespace) -> int:
    """``orchardist run PLAN``."""
    from .runs import Workspace, create_run, unfinished_runs

    plan = _with_executor(load_plan(args.plan), args)
    if args.dry_run:
        return _print_forecast(plan, args)
    _check_tasks(plan, [*args.only, *args.skip])
    _isolation_note(plan)  # "required" without namespaces: refused before anything is made
    # Read-only until every check passed: a refused run leaves nothing behind.
    existing = Workspace.open(plan.repo) if _has_runs(plan.repo) else None
    unfinished = [] if args.fresh or existing is None else unfinished_runs(existing, plan)
    checked = _preflight(plan, quiet=args.quiet, resumable=unfinished)
    if checked.problems:
        raise PlanError(list(checked.problems))
    ws = existing or Workspace.open(plan.repo)
    if unfinished:
        old = unfinished[0]
        _refuse_if_driven(ws, old)
        question = f"run {old.id} of this plan is {old.state.value}; resume it?"
        if args.resume:
            return _drive(ws, plan, old, args, resuming=True, prepare=_select(ws, plan, args))
        if not _interactive():
            raise UsageError(
                f"run {old.id} of this plan is {old.state.value}: pass --resume to continue it "
                "or --fresh to start a new run"
            )
        if _confirm(question):
            return _drive(ws, plan, old, args, resuming=True, prepare=_select(ws, plan, args))
    elif args.resume:
        raise UsageError(f"no unfinished run of {args.plan} to resume")
    return _drive(ws, plan, create_run(ws, plan), args, prepare=_select(ws, plan, args))


def _refuse_if_driven(ws: Any, run: Any) -> None:
    """A run another orchardist drives can be watched or cancelled, not resumed."""
    from .control import lock_path

    path = lock_path(ws.state_dir, run.id)
    if _lock_held(path):
        pid = path.read_text(errors="replace").strip() or "?"
        raise UsageError(
            f"run {run.id} is being driven by another orchardist process (pid {pid}): "
            f"watch it with `orchardist status {run.id} --watch`, stop it with "
            f"`orchardist cancel {run.id}`, or start another run with --fresh"
        )


def _check_tasks(plan: Any, tasks: Sequence[str]) -> None:
    """Unknown task names are a usage error before anything is created."""
    from .runs import check_known

    check_known(plan, tasks)


def _select(ws: Any, plan: Any, args: argparse.Namespace) -> Callable[[Any], list[Any]]:
    """Apply --only/--skip to a run (under its lock, before it executes)."""
    from .runs import select_tasks

    def prepare(run: Any) -> list[Any]:
        if args.only or args.skip:
            return select_tasks(ws, plan, run, args.only, args.skip)
        return []

    return prepare


def cmd_resume(args: argparse.Namespace) -> int:
    """``orchardist resume [RUN]``."""
    from dataclasses import replace

    from .plan import parse_duration
    from .records import UNFINISHED
    from .runs import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if run.state not in UNFINISHED:
        raise UsageError(f"run {run.id} already ended ({run.state.value}); nothing to resume")
    plan = _plan_of(ws, run)
    changes: dict[str, Any] = {}
    if args.deadline is not None:
        try:
            changes["deadline_s"] = parse_duration(args.deadline)
        except ValueError as exc:
            raise UsageError(f"--deadline: {exc}") from None
        if run.created_at + changes["deadline_s"] <= time.time():
            raise UsageError(
                f"--deadline {args.deadline} has already passed: deadlines count from the "
                f"run's start, {_took(time.time() - run.created_at)} ago; give a longer one"
            )
    if args.max_cost_usd is not None:
        changes["max_cost_usd"] = args.max_cost_usd
    if changes:
        plan = replace(plan, run=replace(plan.run, **changes))
    return _drive(ws, plan, run, args, resuming=True)


def _plan_of(ws: Any, run: Any) -> Any:
    """The run's plan file, reloaded; its task ids must still be the run's."""
    plan = load_plan(run.plan_path)
    known = {t.task_id for t in ws.store.tasks(run.id)}
    if {t.id for t in plan.tasks} != known:
        raise UsageError(
            f"{run.plan_path} no longer has the tasks run {run.id} was started with; "
            "start a new run instead"
        )
    return plan


def _dashboard(ws: Any, args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """With ``--serve``, the dashboard of the run's repository while the run goes on."""
    if not getattr(args, "serve", False):
        return contextlib.nullcontext()
    from .web.serve import serving_in_background

    @contextlib.contextmanager
    def serving() -> Iterator[object]:
        with serving_in_background(ws.repo.root) as url:
            print(f"dashboard: {url}", file=sys.stderr, flush=True)
            yield url

    return serving()


def _drive_as_run(ws: Any, plan: Any, run: Any, *, json: bool, max_parallel: int | None) -> int:
    """``_drive`` with the options ``orchardist run PLAN`` would have, but for these two."""
    driven = _parser().parse_args(["run", str(plan.path)])
    driven.json, driven.max_parallel = json, max_parallel
    return _drive(ws, plan, run, driven)


def _drive(
    ws: Any,
    plan: Any,
    run: Any,
    args: argparse.Namespace,
    resuming: bool = False,
    prepare: Callable[[Any], list[Any]] | None = None,
) -> int:
    """Hold the run's lock, reconcile if resuming, ``prepare`` the run, and execute it with
    progress and signals (SIGINT/SIGTERM interrupt it, SIGUSR1 from ``cancel`` cancels it)."""
    from .report import status_document
    from .runs import run_lock

    plan = _with_executor(plan, args)
    relay = _StopRelay()
    restore = _on_signals(relay.request, relay.cancel)  # before anything slow: no signal lost
    try:
        with run_lock(ws, run.id), _dashboard(ws, args):
            state = _execute(ws, plan, run, args, resuming, relay, prepare)
    finally:
        restore()
    doc = status_document(ws.store, ws.resolve_run(run.id))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_summary(doc, quiet=args.quiet, limit=SUMMARY_ROWS)
        if not args.quiet:
            _print_next(doc)
    codes = {RunState.DONE: EXIT_OK, RunState.INTERRUPTED: EXIT_INTERRUPTED}
    return codes.get(state, EXIT_FAILED)


def _isolation_note(plan: Any) -> str:
    """Which isolation the run gets, for its first line; IsolationError (exit 2) when
    ``[run] isolation = "required"`` and namespaces cannot be made here."""
    from . import isolation

    return isolation.describe(plan.run.isolation, isolation.choose(plan.run.isolation))


class _StopRelay:
    """Passes a stop request to the scheduler, or keeps it until the scheduler exists."""

    def __init__(self) -> None:
        self.pending: tuple[str, RunState] | None = None
        self.scheduler: Any = None

    def request(self, reason: str = "interrupted", state: RunState = RunState.INTERRUPTED) -> None:
        if self.scheduler is not None:
            self.scheduler.stop(reason, state)
        elif self.pending is None or state is RunState.CANCELLED:
            self.pending = (reason, state)

    def cancel(self) -> None:
        self.request("cancelled by orchardist cancel", RunState.CANCELLED)

    def attach(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        if self.pending is not None:
            scheduler.stop(*self.pending)


def _execute(
    ws: Any,
    plan: Any,
    run: Any,
    args: argparse.Namespace,
    resuming: bool,
    relay: _StopRelay,
    prepare: Callable[[Any], list[Any]] | None,
) -> RunState:
    from .runs import execute, reconcile

    header = f"run {run.id} → branch {run.branch}  ({_isolation_note(plan)})"
    states = {t.task_id: t.state.value for t in ws.store.tasks(run.id)}
    hooks = _progress_hooks(plan, args, header, states)
    try:
        if resuming:
            summary = reconcile(ws, run)
            out = sys.stderr if args.json else sys.stdout
            print(
                f"resuming run {run.id}: killed {summary['killed']} leftover process(es), "
                f"removed {summary['worktrees_removed']} worktree(s)",
                file=out,
            )
            for line in summary["fixed"]:
                print(f"  {line}", file=out)
        if prepare is not None:
            hooks.emit(prepare(run))  # the progress display hears of skipped or reset tasks
        return execute(
            ws,
            plan,
            ws.resolve_run(run.id),
            hooks=hooks,
            max_parallel=args.max_parallel,
            on_scheduler=relay.attach,
            fail_fast=getattr(args, "fail_fast", False),
        )
    finally:
        hooks.close()


def _interactive() -> bool:
    """Whether a person can be asked (a terminal on both ends, not --json)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _confirm(question: str) -> bool:
    """Ask on the terminal; Enter means yes."""
    try:
        answer = input(f"{question} [Y/n] ").strip().lower()
    except EOFError:  # Ctrl-D: no answer is not a yes, nor a licence to start afresh
        print(file=sys.stderr)
        raise UsageError("no answer: pass --resume to continue that run or --fresh") from None
    return answer in ("", "y", "yes")


def cmd_retry(args: argparse.Namespace) -> int:
    """``orchardist retry [RUN] [TASK...]``."""
    from .runs import Workspace, check_known, prepare_retry

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if run.state not in (RunState.FAILED, RunState.CANCELLED):
        hint = "`orchardist resume`" if run.state.value != "done" else "nothing"
        raise UsageError(
            f"run {run.id} is {run.state.value}: retry re-runs the failed tasks of a run that "
            f"ended failed or cancelled; for this one use {hint}"
        )
    plan = _plan_of(ws, run)
    check_known(plan, args.tasks)
    return _drive(
        ws, plan, run, args, resuming=True, prepare=lambda r: prepare_retry(ws, plan, r, args.tasks)
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    """``orchardist cancel RUN``."""
    from .control import Orchestrator
    from .records import UNFINISHED
    from .runs import Workspace, cancel_abandoned, run_lock

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if run.state not in UNFINISHED:
        raise UsageError(f"run {run.id} already ended ({run.state.value}); nothing to cancel")
    orchestrator = Orchestrator.find(ws.state_dir, run.id)
    if orchestrator is None:
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


def cmd_show(args: argparse.Namespace) -> int:
    """``orchardist show RUN TASK [--candidate K]``."""
    from .runs import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    attempts = _attempts_of(ws, run, args.task, args.attempt)
    if args.candidate is not None:
        attempts = [a for a in attempts if a.candidate == args.candidate]
    if not attempts:
        raise UsageError(f"task {args.task!r} has no attempt of candidate {args.candidate}")
    merged = [a for a in attempts if a.state.value == "merged"]
    attempt = merged[-1] if merged and args.candidate is None else attempts[-1]
    shown = (lambda text: text) if args.raw else plain  # what agents wrote: detail, diff, log
    print(
        f"==> {args.task} attempt {attempt.n} candidate {attempt.candidate} "
        f"({attempt.agent}): {attempt.state.value} {attempt.verdict} {attempt.selection}"
    )
    print(f"    {shown(attempt.detail)}")
    if attempt.patch_commit:
        diff = ws.repo.git("diff", "--stat", "--patch", attempt.base_commit, attempt.patch_commit)
        print(shown(diff))
    else:
        print("(no patch: the attempt ended before its changes were taken)")
    _print_attempt_log(args.task, attempt, args.raw)
    return EXIT_OK


def _attempts_of(ws: Any, run: Any, task: str, n: int | None) -> list[Any]:
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


def cmd_gc(args: argparse.Namespace) -> int:
    """``orchardist gc``."""
    from .gc import collect
    from .plan import parse_duration
    from .runs import Workspace

    try:
        age_s = parse_duration(args.older_than)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None
    if _has_runs(args.repo):
        ws = Workspace.open(args.repo)
        report = collect(ws, age_s, branches=args.branches, dry_run=args.dry_run)
    else:  # nothing was ever run here: nothing to remove, and nothing to create
        report = {"runs": [], "bytes": 0, "refs": 0, "branches": 0, "baselines": 0}
        report["scan_results"] = 0
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    for run_id in report["runs"]:
        print(f"{verb} run {run_id}")
    print(
        f"{verb} {report['bytes'] / 1e6:.1f} MB, {report['refs']} ref(s), "
        f"{report['branches']} branch(es), {report['baselines']} cached baseline(s), "
        f"{report['scan_results']} cached scan result(s)"
    )
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """``orchardist status [RUN]``."""
    from .gc import run_disk_bytes
    from .report import status_document
    from .runs import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if args.watch:
        from .tail import watch_status

        watch_status(ws, run, lambda r: _status_text(ws, r, args.json))
        return EXIT_OK
    doc = status_document(ws.store, run)
    doc["state"] = _shown_state(ws, run)
    doc["disk_bytes"] = run_disk_bytes(ws, run.id)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_summary(doc, attempts=True)
    return EXIT_OK


def _status_text(ws: Any, run: Any, as_json: bool) -> str:
    """What ``status`` prints, as a string (``status --watch`` redraws it)."""
    import contextlib
    import io

    from .report import status_document

    doc = status_document(ws.store, run)
    doc["state"] = _shown_state(ws, run)
    if as_json:
        return json.dumps(doc)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _print_summary(doc, attempts=True)
    return buffer.getvalue().rstrip("\n")


def cmd_events(args: argparse.Namespace) -> int:
    """``orchardist events [RUN] [--follow]``."""
    from .runs import Workspace
    from .tail import print_events

    ws = Workspace.open(args.repo, create=False)
    print_events(ws, ws.resolve_run(args.run), args.follow, args.after)
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    """``orchardist runs``."""
    from .runs import Workspace

    ws = Workspace.open(args.repo, create=False) if _has_runs(args.repo) else None
    rows = []
    for run in ws.store.runs() if ws is not None else []:
        tasks = ws.store.tasks(run.id)  # type: ignore[union-attr]
        done = sum(t.state.value == "done" for t in tasks)
        rows.append(
            {
                "run": run.id,
                "state": _shown_state(ws, run),
                "branch": run.branch,
                "tasks": len(tasks),
                "done": done,
                "plan": run.plan_path,
                "created_at": run.created_at,
                "finished_at": run.finished_at,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no runs yet")
        return EXIT_OK
    print(f"{'RUN':<20}  {'STATE':<11} {'DONE':>7}  {'STARTED':<16}  {'TOOK':>8}  BRANCH  PLAN")
    for row in rows:
        took = "" if row["finished_at"] is None else _took(row["finished_at"] - row["created_at"])
        print(
            f"{row['run']:<20}  {row['state']:<11} {row['done']:>3}/{row['tasks']:<3}  "
            f"{_when(row['created_at'])}  {took:>8}  {row['branch']}  {row['plan']}"
        )
    return EXIT_OK


def _has_runs(path: Path) -> bool:
    """Whether the repository at ``path`` has a store (reading never creates one)."""
    from .gitrepo import Repo, find_toplevel

    root = find_toplevel(Path(path))
    if root is None:
        raise UsageError(f"{path} is not inside a git repository")
    return (Repo(root).common_dir / "orchardist" / "state.db").exists()


def _shown_state(ws: Any, run: Any) -> str:
    """The run's state, ``dead`` for a running run no live orchardist holds (killed by -9)."""
    from .control import lock_path

    if run.state is RunState.RUNNING and not _lock_held(lock_path(ws.state_dir, run.id)):
        return "dead"
    return str(run.state.value)


def _lock_held(path: Path) -> bool:
    """Whether some process holds a flock on ``path``, seen in /proc/locks.

    Looking must not take the lock, even shared for an instant: an orchestrator taking it at
    that moment would be refused its own run.
    """
    from .control import holder

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


def _when(timestamp: float) -> str:
    """Local date and minute, as ``2026-12-02 01:05``."""
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def _took(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def cmd_logs(args: argparse.Namespace) -> int:
    """``orchardist logs RUN TASK``."""
    from .runs import Workspace

    ws = Workspace.open(args.repo, create=False)
    run = ws.resolve_run(args.run)
    if not any(t.task_id == args.task for t in ws.store.tasks(run.id)):
        raise UsageError(f"run {run.id} has no task {args.task!r}")
    if args.follow:
        from .tail import follow_logs

        follow_logs(ws, run, args.task, args.attempt, raw=args.raw)
        return EXIT_OK
    for attempt in _attempts_of(ws, run, args.task, args.attempt):
        _print_attempt_log(args.task, attempt, args.raw)
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    """``orchardist completion bash|zsh|fish``."""
    from .completion import script

    sys.stdout.write(script(_parser(), args.shell))
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    """``orchardist graph PLAN``."""
    return _print_forecast(load_plan(args.plan), args)


def _print_forecast(plan: Any, args: argparse.Namespace) -> int:
    from .forecast import forecast, render

    only, skip = getattr(args, "only", []), getattr(args, "skip", [])
    _check_tasks(plan, [*only, *skip])
    fc = forecast(plan, args.max_parallel, only, skip)
    if args.json:
        print(json.dumps(fc.to_json(), indent=2))
    else:
        print(render(fc, getattr(args, "format", "text")))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    """``orchardist doctor PLAN``."""
    from .doctor import check_plan, render, to_json

    plan = _with_executor(load_plan(args.plan), args)
    if plan.run.executor == "ray":
        return _doctor_cluster(plan, args)
    reports = check_plan(plan, probe=args.probe)
    if args.json:
        print(json.dumps(to_json(str(args.plan), reports), indent=2))
    else:
        print(render(str(args.plan), reports))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def _doctor_cluster(plan: Any, args: argparse.Namespace) -> int:
    """``doctor --executor ray``: the cluster reachable, its worker nodes, and on each: git,
    orchardist's version and every profile the plan uses (executables, credentials)."""
    from .executors.ray import check_cluster, render_cluster

    profiles = [plan.agents[name] for name in sorted(plan.used_agents()) if name in plan.agents]
    report = check_cluster(plan.run.ray_address, profiles)
    print(json.dumps(report, indent=2) if args.json else render_cluster(report))
    return EXIT_OK if not report["problems"] else EXIT_FAILED


# -- helpers -------------------------------------------------------------------------------


def _progress_hooks(
    plan: Any, args: argparse.Namespace, header: str, states: dict[str, str] | None = None
) -> Hooks:
    from .display import LiveTable, PlainLines

    hooks: list[Hook]
    if args.quiet:
        hooks = []
    elif not args.json and sys.stdout.isatty():
        from rich.console import Console

        # NO_COLOR in the environment is honoured by rich itself; --no-color is passed here and
        # never put into the environment, which agents inherit.
        hooks = [LiveTable(plan, Console(no_color=args.no_color or None), header, states)]
    else:
        stream = sys.stderr if args.json else sys.stdout
        print(header, file=stream, flush=True)
        hooks = [PlainLines(stream, verbose=args.verbose > 0)]
    return Hooks(hooks)


def _print_next(doc: dict[str, Any]) -> None:
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
    if any(s == "done" for s in states.values()):
        lines.append(f"git log --oneline {doc['base'][:12]}..{doc['branch']}")
    lines.append(f"orchardist status {run}")
    print("next:")
    for line in lines:
        print(f"  {line}")


def _on_signals(stop: Callable[[], object], cancel: Callable[[], object]) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to a graceful stop and SIGUSR1 (``orchardist cancel``) to a
    cancel; a second signal is not needed to end."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum == CANCEL_SIGNAL:
            cancel()
        else:
            stop()

    signals = (signal.SIGINT, signal.SIGTERM, CANCEL_SIGNAL)
    previous = {sig: signal.signal(sig, handler) for sig in signals}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


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


def _print_summary(
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
            line += f"  ({task['reason']})"
        print(line)
        if attempts:
            for a in task["attempts"]:
                took = "" if a["duration_s"] is None else f"{a['duration_s']:.1f}s"
                failure = f" {a['failure']}" if a["failure"] else ""
                print(
                    f"      #{a['n']} c{a['candidate']} {a['agent']:<12} {a['state']:<11} "
                    f"{_exit_label(a)}{took}{failure}{_spent(a)} {a['detail']}"
                )
                if a["selection"]:
                    print(f"         {a['selection']}")
    if hidden:
        print(f"  ... and {len(hidden)} more (`orchardist status {doc['run']}` lists them all)")
    totals = doc.get("totals", {})
    if any(v is not None for v in totals.values()):
        print(f"  spent:{_spent(totals)}")
    if doc.get("unverified"):
        print(f"  merged without verify commands: {_first_few(doc['unverified'], limit)}")
    if "disk_bytes" in doc:
        print(f"  disk: {doc['disk_bytes'] / 1e6:.1f} MB of logs and worktrees")


def _first_few(ids: Sequence[str], limit: int | None) -> str:
    """``a, b, c``; past ``limit``, the first few and how many more."""
    if limit is None or len(ids) <= limit:
        return ", ".join(ids)
    return f"{', '.join(ids[:SUMMARY_FEW])} and {len(ids) - SUMMARY_FEW} more ({len(ids)} in all)"


if __name__ == "__main__":
    sys.exit(main())


def cmd_stats(args: argparse.Namespace) -> int:
    """``orchardist stats``."""
    import dataclasses
    import time

    from .plan import parse_duration
    from .runs import Workspace
    from .stats import compute, render

    since_s = None
    if args.since is not None:
        try:
            since_s = parse_duration(args.since)
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
    plan = str(args.plan.resolve()) if args.plan is not None else None
    ws = Workspace.open(args.repo, create=False)
    stats = compute(ws.store, time.time(), since_s, plan)
    if args.json:
        print(json.dumps(dataclasses.asdict(stats), indent=2))
    elif not stats.run_ids:
        print("no runs" + (" in that window" if since_s is not None else " yet"))
    else:
        print(render(stats))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """``orchardist serve``."""
    from .web.serve import serve

    return serve(args.repo, args.host, args.port, args.token)


def cmd_plan(args: argparse.Namespace) -> int:
    """``orchardist plan SPEC --agent P``."""
    import time

    from .forecast import forecast, render
    from .gitrepo import Repo, find_toplevel
    from .plan import load_config
    from .planner import make_plan

    root = find_toplevel(args.repo)
    if root is None:
        raise UsageError(f"{args.repo} is not inside a git repository")
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    if args.run and not args.yes and not sys.stdin.isatty():
        raise UsageError("--run without a terminal needs --yes")
    config = load_config(root)
    if args.agent not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "none"
        raise UsageError(
            f"no agent profile {args.agent!r} in {config.where(root)} (profiles: {known})"
        )
    log_dir = Repo(root).common_dir / "orchardist" / "plans" / time.strftime("%Y%m%d-%H%M%S")

    def shown(r: Any) -> None:
        verdict = "valid" if not r.problems else f"{len(r.problems)} problem(s)"
        print(f"round {r.n}: {verdict}  (log {r.log})", file=sys.stderr)
        for problem in r.problems:
            print(f"  {problem}", file=sys.stderr)

    planned = make_plan(
        root,
        args.spec,
        config.profiles[args.agent],
        args.out,
        config.text,
        log_dir,
        args.rounds,
        shown,
    )
    if planned.plan is None:
        print(
            f"error: no valid plan after {len(planned.rounds)} round(s); see the problems above",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"wrote {args.out} ({len(planned.plan.tasks)} tasks, round {len(planned.rounds)})")
    print(render(forecast(planned.plan)))
    if not args.run:
        print(f"next: orchardist run {args.out}")
        return EXIT_OK
    if not args.yes:
        try:
            answer = input(f"run {args.out} now? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            return EXIT_OK
    return main(["run", str(args.out)])
