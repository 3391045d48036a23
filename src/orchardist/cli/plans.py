"""The commands about a plan file: ``validate``, ``schema``, ``graph``, ``doctor``, ``plan``
(an agent writes one), and ``completion``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PlanError, UsageError
from .options import (
    GRAPH_FORMATS,
    Commands,
    check_tasks,
    executor_args,
    load_plan,
    positive,
    read_plan,
    repo_arg,
    with_executor,
)

if TYPE_CHECKING:
    import argparse

    from ..config import Config

Main: TypeAlias = Callable[[Sequence[str]], int]


def add_validate(sub: Commands) -> None:
    """Register ``orchardist validate``."""
    p = sub.add_parser("validate", help="check a plan without running it")
    p.add_argument("plan", type=Path)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    """``orchardist validate PLAN``."""
    try:
        plan, repo = read_plan(args.plan)
    except PlanError as exc:
        if not args.json:
            raise
        problems = [p.__dict__ for p in exc.problems]
        _print_json({"valid": False, "problems": problems})
        return EXIT_USAGE
    checked = preflight(plan, quiet=args.json, repo=repo)
    if checked.problems and args.json:
        problems = [p.__dict__ for p in checked.problems]
        _print_json({"valid": False, "problems": problems})
        return EXIT_USAGE
    if checked.problems:
        raise PlanError(list(checked.problems))
    if args.json:
        doc = {"valid": True, "tasks": len(plan.tasks), "repo": str(plan.repo)}
        _print_json({**doc, "warnings": list(checked.warnings)}, indent=None)
    else:
        tasks, profiles = len(plan.tasks), len(plan.agents)
        print(
            f"{args.plan}: ok ({tasks} task{'s' * (tasks != 1)}, "
            f"{profiles} agent profile{'s' * (profiles != 1)})"
        )
    return EXIT_OK


def preflight(
    plan: Any, quiet: bool = False, resumable: Sequence[Any] = (), repo: Any = None
) -> Any:
    """The checks ``validate`` and ``run`` share; warnings go to stderr (unless ``quiet``).

    A branch that exists because it is a resumable run's own is no problem. ``repo``: the
    plan's repository as ``run`` set it up (see :func:`plan.preflight.preflight`).
    """
    from ..plan.preflight import Preflight, preflight

    checked = preflight(plan, repo=repo)
    own = {f"branch {r.branch!r} already exists" for r in resumable}
    problems = tuple(p for p in checked.problems if p.message not in own)
    if not quiet:
        for warning in checked.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return Preflight(problems, checked.warnings)


def _print_json(doc: object, indent: int | None = 2) -> None:
    """Print ``doc`` as JSON; ``json`` is imported only then (``validate`` without ``--json``
    never needs it)."""
    import json

    print(json.dumps(doc, indent=indent))


def add_schema(sub: Commands) -> None:
    """Register ``orchardist schema``."""
    p = sub.add_parser(
        "schema",
        help="print the plan file's JSON Schema, for editors",
        description="Print the JSON Schema (draft 2020-12) of plan files, TOML or YAML, for "
        "editors: save it as plan.schema.json and start a TOML plan with `#:schema "
        "./plan.schema.json` (taplo, Even Better TOML) or a YAML plan with `# "
        "yaml-language-server: $schema=./plan.schema.json`. `orchardist validate` stays the judge.",
    )
    p.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    """``orchardist schema``."""
    from ..plan.schema import plan_schema

    _print_json(plan_schema())
    return EXIT_OK


def add_graph(sub: Commands) -> None:
    """Register ``orchardist graph``."""
    p = sub.add_parser(
        "graph",
        help="print a plan's launch order, critical path, expected makespan and graph",
        description="Simulate the plan with each attempt taking its task's `estimate`, no "
        "failures, and max_parallel slots: the order tasks launch in, the critical path and its "
        "length, the expected makespan, and the dependency graph (text, Graphviz dot or "
        "mermaid). Runs nothing and creates nothing.",
    )
    p.add_argument("plan", type=Path, help="plan file (.toml, .yaml or .yml)")
    p.add_argument("--max-parallel", type=positive, metavar="N", help="slots to simulate")
    p.add_argument("--only", nargs="+", metavar="TASK", default=[], help="as `run --only`")
    p.add_argument("--skip", nargs="+", metavar="TASK", default=[], help="as `run --skip`")
    p.add_argument("--format", choices=GRAPH_FORMATS, default="text", help="(default: text)")
    p.add_argument("--json", action="store_true", help="the forecast as JSON")
    p.set_defaults(func=cmd_graph)


def cmd_graph(args: argparse.Namespace) -> int:
    """``orchardist graph PLAN``."""
    return print_forecast(load_plan(args.plan), args)


def print_forecast(plan: Any, args: argparse.Namespace) -> int:
    from ..plan.forecast import forecast, render

    only, skip = getattr(args, "only", []), getattr(args, "skip", [])
    check_tasks(plan, [*only, *skip])
    fc = forecast(plan, args.max_parallel, only, skip)
    if args.json:
        _print_json(fc.to_json())
    else:
        print(render(fc, getattr(args, "format", "text")))
    return EXIT_OK


def add_doctor(sub: Commands) -> None:
    """Register ``orchardist doctor``."""
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
    executor_args(p)
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    """``orchardist doctor PLAN``."""
    from ..agents.doctor import check_plan, render, to_json

    plan = with_executor(load_plan(args.plan), args)
    if plan.run.executor == "ray":
        return _doctor_cluster(plan, args)
    from ..confine.confinement import for_plan
    from .drive import checkout_note

    reports = check_plan(plan, probe=args.probe, sight=for_plan(plan))
    if args.json:
        _print_json(to_json(str(args.plan), reports))
    else:
        print(render(str(args.plan), reports))
    note = checkout_note(plan)  # what verify tests without namespaces
    if note:
        print(note, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def _doctor_cluster(plan: Any, args: argparse.Namespace) -> int:
    """``doctor --executor ray``: the cluster reachable, its worker nodes, and on each: git,
    orchardist's version and every profile the plan uses (executables, credentials)."""
    from ..executors.ray import check_cluster, render_cluster

    profiles = [plan.agents[name] for name in sorted(plan.used_agents()) if name in plan.agents]
    report = check_cluster(plan.run.ray_address, profiles)
    if args.json:
        _print_json(report)
    else:
        print(render_cluster(report))
    return EXIT_OK if not report["problems"] else EXIT_FAILED


def add_plan(sub: Commands, main: Main) -> None:
    """Register ``orchardist plan``."""
    p = sub.add_parser(
        "plan",
        help="have an agent write a plan from a spec; validated, corrected, then shown",
        description="A planner agent reads SPEC and a copy of the repository's HEAD and writes a "
        "plan to $ORCHARDIST_PLAN_FILE. orchardist validates it as `validate` would at the "
        "output path; while it has problems (at most --rounds rounds) they are sent back to the "
        "agent. The valid plan is written, and its graph and critical path printed. Agent "
        "profiles come from ~/.config/orchardist/config.toml, then .orchardist.toml at the "
        "repository root ([agents.NAME] tables as in plans; see docs/pipelines.md). The plan "
        "may not widen what agents receive (isolation, network, env passed through).",
    )
    p.add_argument("spec", type=Path, help="the specification (Markdown or text)")
    p.add_argument("--agent", required=True, help="the planner's agent profile")
    p.add_argument("-o", dest="out", type=Path, default=Path("plan.toml"), help="plan to write")
    p.add_argument("--force", action="store_true", help="overwrite the plan at -o if it exists")
    p.add_argument("--rounds", type=int, default=3, help="validation rounds at most (default 3)")
    p.add_argument("--run", action="store_true", help="run the plan once it is valid")
    p.add_argument("--yes", action="store_true", help="with --run: do not ask first")
    repo_arg(p)
    p.set_defaults(func=functools.partial(cmd_plan, main=main))


def cmd_plan(args: argparse.Namespace, main: Main) -> int:
    """``orchardist plan SPEC --agent P``; with ``--run``, ``main(["run", PLAN])``."""
    import time

    from ..git.repo import Repo
    from ..plan.forecast import forecast, render
    from ..plan.planner import make_plan

    root, config = _planner_config(args)
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
        config.profiles,
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
    if not args.yes and not _yes(f"run {args.out} now? [y/N] "):
        return EXIT_OK
    return main(["run", str(args.out)])


def _planner_config(args: argparse.Namespace) -> tuple[Path, Config]:
    """``plan``'s usage checked: the repository's root and the config holding ``--agent``."""
    from ..config import tell_ignored
    from ..git.where import find_toplevel
    from ..plan.loading import load_config

    root = find_toplevel(args.repo)
    if root is None:
        raise UsageError(f"{args.repo} is not inside a git repository")
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    if args.out.exists() and not args.force:  # a plan someone wrote by hand is not a draft
        raise UsageError(f"{args.out} already exists: pass --force to overwrite it, or -o PATH")
    if args.run and not args.yes and not sys.stdin.isatty():
        raise UsageError("--run without a terminal needs --yes")
    config = load_config(root)
    tell_ignored(config.ignored)
    if args.agent not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "none"
        raise UsageError(
            f"no agent profile {args.agent!r} in {config.where(root)} (profiles: {known})"
        )
    return root, config


def _yes(question: str) -> bool:
    """Ask on the terminal; only y or yes is a yes (end of input is a no)."""
    try:
        answer = input(question).strip().lower()
    except EOFError:
        answer = ""
    return answer in ("y", "yes")


def add_completion(sub: Commands, build: Callable[[], argparse.ArgumentParser]) -> None:
    """Register ``orchardist completion``."""
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script: `source <(orchardist completion bash)` in "
        "~/.bashrc, `source <(orchardist completion zsh)` in ~/.zshrc (after compinit), "
        "`orchardist completion fish | source` in ~/.config/fish/config.fish.",
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=functools.partial(cmd_completion, build=build))


def cmd_completion(args: argparse.Namespace, build: Callable[[], argparse.ArgumentParser]) -> int:
    """``orchardist completion bash|zsh|fish``, for the parser ``build`` makes."""
    from .completion import script

    sys.stdout.write(script(build(), args.shell))
    return EXIT_OK
