"""``gc`` (remove what old runs left), ``stats`` (figures across runs) and ``serve`` (the web
dashboard)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ..errors import EXIT_OK, UsageError
from .options import Commands, duration, repo_arg


def add_gc(sub: Commands) -> None:
    """Register ``orchardist gc``."""
    p = sub.add_parser("gc", help="remove logs, worktrees and refs of old finished runs")
    p.add_argument(
        "--older-than",
        default="7d",
        metavar="AGE",
        help="age, e.g. 12h or 7d; 0 (or now) for every finished run",
    )
    p.add_argument("--branches", action="store_true", help="also delete their run branches")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    repo_arg(p)
    p.set_defaults(func=cmd_gc)


def cmd_gc(args: argparse.Namespace) -> int:
    """``orchardist gc``."""
    from ..runs.gc import collect
    from ..runs.start import Workspace

    age_s = _age("--older-than", args.older_than)
    ws = Workspace.existing(args.repo)  # (git asked once)
    if ws is not None:
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


def _age(option: str, text: str) -> float:
    """An age in seconds: a duration, or 0 (``0``, ``0s``, ``now``), which a duration never
    is, for "everything finished so far"."""
    if re.fullmatch(r"(0+(\.0*)?[smhd]?|now)", text.strip().lower()):
        return 0.0
    return duration(option, text)


def add_stats(sub: Commands) -> None:
    """Register ``orchardist stats``."""
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
    repo_arg(p)
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    """``orchardist stats``."""
    import dataclasses
    import time

    from ..runs.start import Workspace
    from ..state.stats import compute, render

    since_s = None if args.since is None else duration("--since", args.since)
    plan = str(args.plan.resolve()) if args.plan is not None else None
    ws = Workspace.existing(args.repo)
    if ws is None:  # like `runs`: nothing yet is an answer, not a usage error
        _check_plan_arg(args.plan)
        print("no runs yet")
        return EXIT_OK
    stats = compute(ws.store, time.time(), since_s, plan)
    if not stats.run_ids and since_s is None:
        _check_plan_arg(args.plan)
    if args.json:
        print(json.dumps(dataclasses.asdict(stats), indent=2))
    elif not stats.run_ids:
        print("no runs" + (" in that window" if since_s is not None else " yet"))
    else:
        print(render(stats))
    return EXIT_OK


def _check_plan_arg(plan: Path | None) -> None:
    """``--plan`` matching no run is a usage error when it names no file either (a typo),
    rather than "no runs yet" with exit 0."""
    if plan is not None and not plan.is_file():
        raise UsageError(f"--plan: {plan} is not a plan file, and no run here was of it")


def add_serve(sub: Commands) -> None:
    """Register ``orchardist serve``."""
    p = sub.add_parser(
        "serve",
        help="a live web dashboard of this repository's runs (needs the web extra)",
        description="Serve the dashboard: runs, each run's task graph, timeline and tasks, each "
        "task's logs and diffs, updated live from the event log; JSON under /api and Prometheus "
        "metrics at /metrics. Binds 127.0.0.1 and prints the URL to open, with a token every "
        "request needs (generated unless --token is given).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8765, help="port (default 8765; 0 picks one)")
    p.add_argument("--token", help="the access token (default: a random one)")
    repo_arg(p)
    p.set_defaults(func=cmd_serve)


def port(text: str) -> int:
    """A TCP port number, 0 to 65535 (0: the system picks one); a usage error otherwise, before
    the socket's own OverflowError."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    """``orchardist serve``."""
    from ..web.serve import serve

    return serve(args.repo, args.host, args.port, args.token)
