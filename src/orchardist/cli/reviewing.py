"""``orchardist review``: list what awaits review, print a pending diff, and decide (approve,
ask for changes with line comments, reject). The logic is :mod:`orchardist.runs.review`'s."""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict
from typing import Any

from ..errors import EXIT_OK, ReviewError, UsageError
from ..terminal import plain
from .options import Commands, repo_arg
from .summary import elapsed

_PATH_LINE = re.compile(r"(.+):([0-9]+)")


def add_review(sub: Commands) -> None:
    """Register ``orchardist review``."""
    p = sub.add_parser(
        "review",
        help="list the patches awaiting review; approve, ask for changes or reject one",
        description="Without TASK, list the verified patches that wait for a person (tasks "
        'with review = "human"), oldest first. With RUN TASK, print the pending diff (--diff) '
        "or decide: --approve merges it through the merge train; --changes starts a new "
        "attempt of the same agent, told your text and line comments, whose result comes back "
        "to review; --reject fails the task. A live orchestrator acts at once; otherwise "
        "`orchardist resume RUN` does. See docs/review.md.",
    )
    p.add_argument("run", nargs="?", help="run id or a unique prefix (default: every run)")
    p.add_argument("task", nargs="?", help="the task to show or decide on")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--diff", action="store_true", help="print the pending diff")
    what.add_argument("--approve", action="store_true", help="merge the patch")
    what.add_argument("--changes", metavar="TEXT", help="ask the agent for changes")
    what.add_argument("--reject", action="store_true", help="fail the task")
    p.add_argument(
        "--line",
        nargs=2,
        action="append",
        default=[],
        metavar=("PATH:LINE", "TEXT"),
        help="with --changes: a comment on a line of a file of the patch (repeatable)",
    )
    p.add_argument(
        "-m",
        "--message",
        default="",
        metavar="TEXT",
        help="the approval's note or the rejection's reason",
    )
    p.add_argument("--json", action="store_true", help="the listing as JSON")
    repo_arg(p)
    p.set_defaults(func=cmd_review)


def cmd_review(args: argparse.Namespace) -> int:
    """``orchardist review [RUN [TASK]]``."""
    from ..runs.start import Workspace

    ws = Workspace.open(args.repo, create=False)
    deciding = args.approve or args.reject or args.changes is not None
    if args.task is None:
        if deciding or args.diff:
            raise UsageError("name the run and the task: orchardist review RUN TASK --approve")
        return _list(ws, args)
    if args.line and args.changes is None:
        raise UsageError("--line goes with --changes")
    if args.message and not (args.approve or args.reject):
        raise UsageError("-m goes with --approve or --reject (--changes takes its own text)")
    if not deciding:
        from ..runs.review import pending_diff, reader

        print(plain(pending_diff(ws.store, reader(ws.root), args.run, args.task)))
        return EXIT_OK
    return _decide(ws, args)


def _list(ws: Any, args: argparse.Namespace) -> int:
    from ..runs.review import pending

    found = pending(ws.store, args.run)
    if args.json:
        print(json.dumps([asdict(p) for p in found], indent=2))
        return EXIT_OK
    if not found:
        print("nothing awaits review")
        return EXIT_OK
    now = time.time()
    for p in found:
        cost = f"${p.cost_usd:.2f}" if p.cost_usd is not None else "cost -"
        print(f"{p.run_id} {p.task_id} ({plain(p.title)}) by {p.agent}, attempt {p.attempt}")
        print(
            f"    {p.diffstat or 'no changes'}; {plain(p.verify)}; {cost}; "
            f"waiting {elapsed(now - p.since)}"
        )
        if p.decided:
            print(f"    decided: {plain(p.decided)}; `orchardist resume {p.run_id}` acts on it")
        else:
            print(
                f"    orchardist review {p.run_id} {p.task_id} --diff | --approve | "
                "--changes TEXT | --reject"
            )
    return EXIT_OK


def _decide(ws: Any, args: argparse.Namespace) -> int:
    from ..runs.review import decide
    from ..state.records import ReviewDecision, Verdict

    if args.approve:
        decision = ReviewDecision(Verdict.APPROVE, args.message)
    elif args.reject:
        decision = ReviewDecision(Verdict.REJECT, args.message)
    else:
        lines = tuple(_comment(where, text) for where, text in args.line)
        decision = ReviewDecision(Verdict.CHANGES, args.changes, lines)
    woken = decide(ws.store, ws.state_dir, args.run, args.task, decision)
    run = ws.resolve_run(args.run)
    said = {"approve": "approved", "changes": "changes requested", "reject": "rejected"}
    print(f"run {run.id}: {args.task}: {said[decision.verdict.value]}")
    if woken:
        print("the orchestrator driving the run acts on it now")
    else:
        print(f"no orchardist drives the run: `orchardist resume {run.id}` acts on it")
    return EXIT_OK


def _comment(where: str, text: str) -> Any:
    from ..state.records import LineComment

    match = _PATH_LINE.fullmatch(where)
    if match is None or int(match.group(2)) < 1:
        raise ReviewError(f"--line {where!r}: expected PATH:LINE, e.g. src/app.py:12")
    return LineComment(match.group(1), int(match.group(2)), text)
