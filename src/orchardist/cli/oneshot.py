"""``orchardist fix`` and ``orchardist debug``: one pipeline task, run without writing a plan.

The command line and the config files' agent profiles (:mod:`orchardist.config`) become a plan
of one task (``pipeline = "fix"`` or ``"debug"``, the bug report as its prompt), written to the
state folder (``oneshot/``) and run exactly as ``orchardist run`` runs any plan: same progress,
summary, exit codes, ``status``, ``resume`` and ``gc``. The file stays, so the run can be resumed
and the plan read, copied or run again.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import secrets
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config
from ..errors import PlanError, Problem, UsageError
from ..plan.tasks import PIPELINES, STAGE_NAMES
from ..specs import parse_duration

__all__ = ["OneShot", "add_parsers", "choose_agents", "plan_text", "write_plan"]

MAX_REPORT_BYTES = 256 * 1024
TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt)\b.*")
DEFAULT_RETRIES = 1  # a rejected reproduction gets one retry with the reason, by default


@dataclass(frozen=True)
class OneShot:
    """What the command line asked for."""

    pipeline: str  # "fix" or "debug"
    report: str  # the bug report: the task's prompt
    agents: tuple[str, ...]  # profile names (one per candidate when several)
    candidates: int | None = None
    check: str | None = None  # a command that fails on the base: the reproduction
    verify: tuple[str, ...] = ()  # empty: "auto" (the tests of the changed files)
    retries: int = DEFAULT_RETRIES
    timeout: str | None = None
    stages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # stage -> profiles
    audit: bool = True


def choose_agents(config: Config, requested: Sequence[str], repo_root: Path) -> tuple[str, ...]:
    """The profiles to run: those asked for (each must be configured), else the only one."""
    where = config.where(repo_root)
    if not config.profiles:
        raise UsageError(
            f"no agent profile is configured: add an [agents.NAME] table (as in a plan) to "
            f'{where} — e.g. [agents.claude] kind = "claude" — or see docs/pipelines.md'
        )
    known = ", ".join(sorted(config.profiles))
    for name in requested:
        if name not in config.profiles:
            raise UsageError(f"unknown agent profile {name!r} in {where} (profiles: {known})")
    if requested:
        return tuple(requested)
    if len(config.profiles) > 1:
        raise UsageError(f"several agent profiles are configured ({known}): choose with --agent")
    return (next(iter(config.profiles)),)


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; TOML also wants DEL escaped)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_toml(v) for v in values) + "]"


def _agent_value(names: Sequence[str]) -> str:
    return _toml(names[0]) if len(names) == 1 else _toml_list(names)


def report_subject(report: str) -> str:
    """The fix's commit subject, ``Fix: `` and the report's first meaningful line: of a
    Python traceback its exception line, not "Traceback (most recent call last):"."""
    lines = [line.strip() for line in report.splitlines() if line.strip()]
    if TRACEBACK in lines:
        after = lines[lines.index(TRACEBACK) + 1 :]
        raised = [line for line in after if not line.startswith(("File ", "^", "~"))]
        ends = [line for line in raised if _EXCEPTION.match(line)]
        lines = ends[-1:] or lines
    meaningful = next((line for line in lines if line != TRACEBACK), "the reported bug")
    return f"Fix: {meaningful}"[:72]


def plan_text(shot: OneShot, repo_root: Path, now: float | None = None) -> str:
    """The plan of one pipeline task, as TOML."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    title = report_subject(shot.report)
    lines = [
        f"# Written by `orchardist {shot.pipeline}` on {stamp}; agent profiles come from the",
        "# config files (.orchardist.toml, ~/.config/orchardist/config.toml).",
        "",
        "[run]",
        f"repo = {_toml(str(repo_root))}",
        'workdir = "."',
        "",
        "[[task]]",
        f"id = {_toml(shot.pipeline)}",
        f"title = {_toml(title)}",
        f"pipeline = {_toml(shot.pipeline)}",
        f"agent = {_agent_value(shot.agents)}",
    ]
    if shot.candidates is not None:
        lines.append(f"candidates = {shot.candidates}")
    if shot.check is not None:
        lines.append(f"check = {_toml(_as_written(shot.check))}")
    if shot.verify == ("none",):
        lines.append('verify = "none"')
    elif shot.verify:
        lines.append(f"verify = {_toml_list(tuple(map(_as_written, shot.verify)))}")
    else:
        lines.append(f"verify = {_toml('auto')}")
    lines.append(f"retries = {shot.retries}")
    if shot.timeout is not None:
        lines.append(f"timeout = {_toml(shot.timeout)}")
    lines.append(f"prompt = {_toml(shot.report)}")
    if not shot.audit:
        lines.append("stages.audit = false")
    for stage, names in shot.stages.items():
        lines.append(f"stages.{stage}.agent = {_agent_value(names)}")
    return "\n".join(lines) + "\n"


def _as_written(command: str) -> str:
    """A --check or --verify command as the plan must spell it to run as typed: its braces
    doubled, since a plan's commands read ``{name}`` as a placeholder."""
    return command.replace("{", "{{").replace("}", "}}")


def write_plan(shot: OneShot, repo_root: Path, state_dir: Path) -> Path:
    """Write the plan to ``state_dir/oneshot/`` and check it with the full validator."""
    folder = state_dir / "oneshot"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{stamp}-{shot.pipeline}-{secrets.token_hex(3)}.toml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(plan_text(shot, repo_root))
    from ..plan.loading import load_plan  # the whole plan model: not for commands that only parse

    try:
        load_plan(path)
    except PlanError as exc:
        path.unlink()
        raise PlanError([_as_command_line(p, path, shot.pipeline) for p in exc.problems]) from None
    except BaseException:
        path.unlink()
        raise
    return path


def _as_command_line(problem: Problem, path: Path, pipeline: str) -> Problem:
    """A problem of the plan built here, told in the command line's terms (a config file's
    problems keep their file)."""
    if problem.file != str(path):
        return problem
    message = re.sub(
        r"stages\.(\w+)\.agent", lambda m: f"--stage {m.group(1)}=PROFILE", problem.message
    )
    return Problem(f"orchardist {pipeline}", message, None, problem.field)


# -- the command line ------------------------------------------------------------------------

_DESCRIPTION = {
    "fix": "Fix a bug without writing a plan: a single-shot attempt first (the report straight "
    "to the fix agent, judged by --check and --verify); if it changes nothing or fails, the task "
    "escalates to the debug pipeline (reproduce, audit, localize, fix candidates, verify).",
    "debug": "Debug a bug without writing a plan: reproduce it (a failing test that must fail on "
    "the base), audit the reproduction, localize the code to change, fan out fix candidates "
    "judged by the reproduction and --verify, and land the winner with its test in one commit.",
}
_EPILOG = """\
examples:
  orchardist {0} "parse_date('2024-02-30') returns a date" --verify "python -m pytest -q"
  orchardist {0} "CSV export drops the last row" --agent claude --agent codex --candidates 3
  orchardist {0} "..." --check "python -m pytest -q tests/test_export.py" --stage localize=cheap

Agent profiles come from ~/.config/orchardist/config.toml, then .orchardist.toml at the
repository root ([agents.NAME] tables, as in a plan; the repository's cannot replace yours nor
pass anything more to an agent unless you trust it: see docs/pipelines.md). The plan built is kept
under the state folder's oneshot/ (status, logs, resume and retry work as for any run). Exit
codes as for `run`: 0 landed, 1 failed, 2 bad usage or config, 130 interrupted. See
docs/pipelines.md.
"""


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    main: Callable[[Sequence[str]], int],
) -> None:
    """The ``fix`` and ``debug`` commands; ``main`` is the command line's, to run the plan."""
    for pipeline in PIPELINES:
        p = sub.add_parser(
            pipeline,
            help=f"run the {pipeline} pipeline on a bug report, without a plan file",
            description=textwrap.fill(_DESCRIPTION[pipeline], 78),
            epilog=_EPILOG.format(pipeline),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _oneshot_args(p)
        p.set_defaults(func=functools.partial(cmd_oneshot, main=main), pipeline=pipeline)


def _oneshot_args(p: argparse.ArgumentParser) -> None:
    """The arguments ``fix`` and ``debug`` share."""
    p.add_argument("report", help="the bug report (text; - reads it from stdin)")
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="PROFILE",
        help="a configured agent profile; repeat for one per fix candidate "
        "(default: the only configured profile)",
    )
    p.add_argument(
        "--candidates", type=int, metavar="N", help="fix candidates (default: one per --agent)"
    )
    p.add_argument(
        "--check",
        metavar="CMD",
        help="a command that fails now and must pass once fixed (the debug pipeline then "
        "skips its reproduce stage)",
    )
    p.add_argument(
        "--verify",
        action="append",
        default=[],
        metavar="CMD",
        help='a command that must show no new failures (repeatable; default "auto": the '
        'tests of the changed files; "none" for none)',
    )
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="NAME=PROFILE[,PROFILE]",
        help=f"route a stage ({', '.join(STAGE_NAMES)}) to other profiles, e.g. "
        "--stage localize=cheap",
    )
    p.add_argument("--no-audit", action="store_true", help="skip the audit stage")
    p.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help=f"retries per stage (default {DEFAULT_RETRIES})",
    )
    p.add_argument("--timeout", metavar="DURATION", help="per attempt, e.g. 20m (default 1h)")
    p.add_argument("--json", action="store_true", help="print the final status as JSON on stdout")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan it would run; run nothing"
    )
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")


def cmd_oneshot(args: argparse.Namespace, main: Callable[[Sequence[str]], int]) -> int:
    """``orchardist fix|debug REPORT``: write the plan, then ``main(["run", PLAN, ...])``."""
    from ..git.repo import Repo
    from ..git.where import find_toplevel

    root = find_toplevel(args.repo)
    if root is None:
        raise UsageError(f"{args.repo} is not inside a git repository")
    shot = _shot(args, root)
    if args.dry_run:
        print(plan_text(shot, root), end="")
        return 0
    path = write_plan(shot, root, Repo(root).common_dir / "orchardist")
    if not args.quiet:
        print(f"plan: {path}  (orchardist run {path} runs it again)", file=sys.stderr)
    passed = ["--json"] if args.json else []
    passed += ["--quiet"] * bool(args.quiet) + ["--verbose"] * (args.verbose or 0)
    passed += ["--no-color"] * bool(args.no_color)
    return main(["run", str(path), "--fresh", *passed])


def _shot(args: argparse.Namespace, root: Path) -> OneShot:
    """Check the command line (usage errors before anything is written) and build the task."""
    report = _report(args.report)
    if args.candidates is not None and args.candidates < 1:
        raise UsageError("--candidates must be at least 1")
    if args.retries < 0:
        raise UsageError("--retries must be 0 or more")
    if args.timeout is not None:
        try:
            parse_duration(args.timeout)
        except ValueError as exc:
            raise UsageError(f"--timeout: {exc}") from None
    if args.check is not None and not args.check.strip():
        raise UsageError("--check needs a command")
    verify = tuple(args.verify)
    if any(not v.strip() for v in verify):
        raise UsageError("--verify needs a command")
    if "none" in verify and len(verify) > 1:
        raise UsageError("--verify none cannot be combined with other --verify commands")
    from ..plan.loading import load_config

    config = load_config(root)
    agents = choose_agents(config, args.agent, root)
    stages: dict[str, tuple[str, ...]] = {}
    for spec in args.stage:
        name, sep, value = spec.partition("=")
        names = tuple(n.strip() for n in value.split(",") if n.strip())
        if not sep or not names:
            raise UsageError(f"--stage {spec!r}: expected NAME=PROFILE[,PROFILE]")
        if name not in STAGE_NAMES:
            raise UsageError(f"--stage {spec!r}: unknown stage (stages: {', '.join(STAGE_NAMES)})")
        if name == "audit" and args.no_audit:
            raise UsageError("--stage audit=... and --no-audit contradict each other")
        stages[name] = choose_agents(config, names, root)
    if any("\0" in text for text in (report, args.check or "", *verify)):
        raise UsageError("the report and commands must not contain NUL bytes")
    return OneShot(
        pipeline=args.pipeline,
        report=report,
        agents=agents,
        candidates=args.candidates,
        check=args.check,
        verify=verify,
        retries=args.retries,
        timeout=args.timeout,
        stages=stages,
        audit=not args.no_audit,
    )


def _report(given: str) -> str:
    """The bug report: the argument, or stdin for ``-``."""
    text = given
    if given == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("the report is - but stdin is a terminal: pipe the report in")
        text = sys.stdin.read(MAX_REPORT_BYTES + 1)
    if len(text.encode("utf-8", errors="replace")) > MAX_REPORT_BYTES:
        raise UsageError(f"the report is longer than {MAX_REPORT_BYTES // 1024} KiB")
    if not text.strip():
        raise UsageError(
            "the bug report is empty: say what is wrong, e.g. "
            "orchardist fix \"parse_date('2024-02-30') returns a date\""
        )
    return text
