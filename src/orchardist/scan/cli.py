"""``orchardist scan``: run the plan's scanners, print or write the merged findings.

Exit codes: 0 no finding at or above ``--fail-on``; 1 such a finding exists, or a scanner
failed (its results are incomplete); 2 bad plan or usage.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OrchardistError, UsageError, reported
from .hit import DEFAULT_PLANS, plain_options

if TYPE_CHECKING:  # the fix run is imported only for --fix; argparse only by the command line's
    import argparse  # parser: a plain scan is read by scan.hit.plain_options

    from ..git.repo import Repo
    from ..state.store import Store
    from .fix_run import DriveRun
    from .sarif import Rendering


def plain_scan(argv: Sequence[str]) -> int | None:
    """The exit code of ``orchardist scan ARGV`` when the line is a plain scan's
    (:func:`.hit.plain_options`), run without the command line's parser and modules (~9 ms
    of a first scan's CPU); None, having done nothing, for any other line."""
    options = plain_options(argv)
    if options is None:
        return None
    from types import SimpleNamespace

    args = SimpleNamespace(**options, fix=False, agent=None)
    args.plan = None if args.plan is None else Path(args.plan)
    args.output = None if args.output is None else Path(args.output)
    return reported(lambda: cmd_scan(args, None))


def add_parser(sub: Any, positive: Any, drive: DriveRun) -> None:
    """Register ``scan`` on the main parser's subcommands."""
    p = sub.add_parser(
        "scan",
        help="run read-only scanners in parallel; merge their findings into SARIF",
        description="Run the plan's [scanners] on a scratch copy of the base, in parallel, "
        "with a cache keyed by configuration and content. Findings of all scanners are "
        "deduplicated into one SARIF 2.1.0 log. Exit 0: no finding at or above --fail-on; "
        "1: there is one, or a scanner failed; 2: bad plan or usage.",
    )
    p.add_argument(
        "plan",
        nargs="?",
        type=Path,
        help=f"plan or config file with [scanners] (default: {' or '.join(DEFAULT_PLANS)} here)",
    )
    p.add_argument(
        "--scanner", action="append", metavar="NAME", help="run only this scanner (repeatable)"
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write the findings to FILE (default: print them)",
    )
    p.add_argument(
        "--format",
        choices=("sarif", "json", "table"),
        help="findings format (default: sarif with -o, table otherwise)",
    )
    p.add_argument(
        "--fail-on",
        choices=("error", "warning", "note"),
        default="error",
        help="exit 1 when a finding at or above this level exists (default: error)",
    )
    p.add_argument("--no-cache", action="store_true", help="run every scanner; cache nothing")
    p.add_argument("--base", metavar="REF", help="commit to scan (default: [run] base, HEAD)")
    p.add_argument(
        "--max-parallel",
        type=positive,
        metavar="N",
        help="scanner processes at once (default: [run] max_parallel)",
    )
    p.add_argument("--stats", action="store_true", help="show cache hits and misses")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    _fix_args(p, positive)
    p.set_defaults(func=functools.partial(cmd_scan, drive=drive))


def _fix_args(p: argparse.ArgumentParser, positive: Any) -> None:
    """``scan --fix`` and the options of the fix run it starts."""
    fix = p.add_argument_group("fixing (a new run of fix tasks, verified like any task)")
    fix.add_argument(
        "--fix",
        action="store_true",
        help="turn the findings into fix tasks of a new run, then scan its branch",
    )
    fix.add_argument("--agent", metavar="PROFILE", help="the agent profile that fixes")
    fix.add_argument(
        "--candidates",
        type=positive,
        default=1,
        metavar="N",
        help="candidates per fix task (default 1)",
    )
    fix.add_argument(
        "--group",
        choices=("file", "rule"),
        default="file",
        help="one task per file (default) or per rule",
    )


def cmd_scan(args: Any, drive: DriveRun | None) -> int:
    """``orchardist scan`` (``args`` as its parser reads them); ``drive`` runs the fix run of
    ``--fix`` (None where the line cannot have it)."""
    from ..config import tell_ignored
    from ..git.repo import Repo
    from ..plan.loading import read_plan
    from .engine import Scanner

    # a scan may run for minutes: the collector back on. Off, it is the process's command
    # (__main__ turned it off while the modules loaded), and what is loaded so far lives until
    # it exits: its passes (and the one at exit) skip it, having examined it again and again,
    # freeing nothing (34 M of a first scan's ~460 M instructions; 5 M now). A caller's heap
    # (a test's, in-process) is not frozen.
    if not gc.isenabled():
        gc.freeze()
    gc.enable()
    # the repository as the plan's loader found it, its base resolved in the same git
    # process; a scan commits nothing (--fix commits through its run's own Repo) and lists no
    # untracked file (see Repo). Another --base is resolved as the repository is set up again.
    plan, repo = read_plan(_plan_path(args.plan), require_tasks=False)
    tell_ignored(plan.ignored)
    profiles = _chosen(args, plan)
    base = args.base or plan.run.base
    if base != plan.run.base:
        repo = Repo(plan.repo, identity=False, resolve=base, untracked=False)
    commit = repo.resolved
    if commit is None:  # before the store exists: exit 2 makes nothing
        raise UsageError(f"--base {base!r} names no commit")
    # the workspace's store, without the run machinery that a plain scan never uses, opened
    # where the scan first needs it: its cache's look-ups, or its events (while it runs)
    scanner = Scanner(
        repo,
        functools.partial(_store, repo),
        plan.agents,
        max_parallel=args.max_parallel or plan.run.max_parallel,
        use_cache=not args.no_cache,
        sandbox=plan.run.sandbox,
        workspace=plan.run.workspace,
    )
    # git status asked while the scanners run, not before them (a process, said when it answers)
    dirty = functools.partial(_warn_dirty, repo, base)
    try:  # the scan returns while its scratch folder is removed: waited for once all is written
        result = scanner.scan(
            profiles, base, plan.run.workdir, commit=commit, meanwhile=dirty, settle=False
        )
        return _finish(args, plan, repo, scanner, profiles, result, drive)
    finally:
        scanner.settle()


def _finish(
    args: Any,
    plan: Any,
    repo: Any,
    scanner: Any,
    profiles: list[Any],
    result: Any,
    drive: DriveRun | None,
) -> int:
    """After the scan: the memo for the next one, then its outputs, or the fix run."""
    from .sarif import Rendering  # (imported while the scanners ran: Scanner._meanwhile)

    rendering = Rendering(result, repo.root)
    if not args.no_cache:  # for the next scan of this commit (never without the cache)
        from .memo import remember

        remember(args, plan, repo, scanner, profiles, rendering)
    if args.fix:
        assert drive is not None  # (given wherever --fix can be)
        from ..runs.start import Workspace
        from .fix_run import fix_findings

        ws = Workspace.open(plan.repo)
        return fix_findings(args, plan, ws, scanner, profiles, result, drive)
    scanner.store.close()  # now: a plain scan ends without the interpreter's teardown (__main__)
    return _report(args, result, rendering)


def _report(args: Any, result: Any, rendering: Rendering) -> int:
    """Write the scan's document and summary as ``args`` ask; its exit code (1 for a finding
    at ``--fail-on`` or worse, or a failed scanner)."""
    from .findings import level_rank
    from .sarif import summary_json, summary_text, write_whole

    fmt = args.format or ("sarif" if args.output else "table")
    document = rendering.document(fmt)
    if args.output is not None:
        write_whole(args.output, document)
    elif not args.json:
        print(document)
    failing = [m for m in result.merged if level_rank(m.finding.level) >= level_rank(args.fail_on)]
    code = 1 if failing or result.failed else 0
    if args.json:
        # compact, as the findings are: with every result in it, indenting took longer than
        # a cached scan's lookups
        print(summary_json(result, code, args.output, rendering))
    else:
        out = sys.stdout if args.output is not None or fmt == "table" else sys.stderr
        out.write(summary_text(result, args.stats))
    return code


def _store(repo: Repo) -> Store:
    """The store of ``repo``'s workspace (opened here, imported at first use)."""
    from ..state.store import Store

    return Store.for_repo(repo.common_dir)


def _chosen(args: Any, plan: Any) -> list[Any]:
    """The scanner profiles ``args`` asks for; a UsageError for a name or option that is
    not right for this plan."""
    profiles = list(plan.scanners.values())
    if not profiles:
        raise UsageError(f"{args.plan or plan.path.name} has no [scanners.NAME] tables")
    if args.scanner:
        unknown = [n for n in args.scanner if n not in plan.scanners]
        if unknown:
            raise UsageError(f"unknown scanner {unknown[0]!r} (known: {', '.join(plan.scanners)})")
        profiles = [p for p in profiles if p.name in args.scanner]
    if args.fix and args.agent not in plan.agents:
        known = ", ".join(sorted(plan.agents)) or "none defined"
        raise UsageError(f"--fix needs --agent PROFILE (known: {known})")
    if not args.fix and args.agent is not None:
        raise UsageError("--agent is for --fix")
    return profiles


def _warn_dirty(repo: Any, base: str) -> None:
    """Say that uncommitted changes are not scanned: a scan reads a commit, as a run starts
    from one (untracked files, often the plan itself, do not count)."""
    try:  # asked while the scan runs: a git that cannot start is the scan's error, not this
        out = repo.run_git("status", "--porcelain", "--untracked-files=no")
    except OrchardistError:
        return
    dirty = len(out.stdout.splitlines()) if out.returncode == 0 else 0
    if dirty:
        print(
            f"warning: your checkout has {dirty} uncommitted change(s); scanning {base} "
            "as committed, without them",
            file=sys.stderr,
        )


def _plan_path(given: Path | None) -> Path:
    if given is not None:
        return given
    for name in DEFAULT_PLANS:
        if Path(name).is_file():
            return Path(name)
    raise UsageError(f"no plan given and no {' or '.join(DEFAULT_PLANS)} here")
