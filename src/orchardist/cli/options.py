"""Exit codes, the top-level parser's own options, and the options several commands share.

``argparse`` (with the ``gettext`` and ``locale`` it imports, ~8 ms) is imported where a parser
is built or a value refused: a plain ``validate``'s line is read without it
(:func:`.plans.plain_validate`), and this module's ``load_plan`` serves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from .. import __version__
from ..errors import UsageError

if TYPE_CHECKING:
    import argparse

    from ..git.repo import Repo
    from ..specs import Plan

EXIT_REVIEW = 3  # the run ended awaiting review: decide, then `orchardist resume RUN`
GRAPH_FORMATS = ("text", "dot", "mermaid")  # what `graph` and `run --dry-run` draw with

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def root_parser() -> argparse.ArgumentParser:
    """``orchardist`` itself, before any command is added."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="orchardist",
        description="Run coding agents in parallel git worktrees; keep only what real runs prove.",
        epilog="Exit codes: 0 all tasks done, 1 a task failed or was blocked or the run was "
        "stopped by a budget, 2 bad plan or usage (or the run is locked by another orchardist), "
        "3 the run awaits review (orchardist review), 130 interrupted. "
        "State lives under $(git rev-parse --git-common-dir)/orchardist.",
    )
    parser.add_argument("--version", action="version", version=f"orchardist {__version__}")
    parser.add_argument(
        "-C",
        dest="chdir",
        type=Path,
        metavar="PATH",
        help="run as if orchardist was started in PATH (as git -C; also after most commands)",
    )
    output_args(parser, argparse.SUPPRESS)
    parser.set_defaults(quiet=False, verbose=0, no_color=False)
    return parser


def repo_arg(p: argparse.ArgumentParser) -> None:
    """``-C REPO``, for the commands that work on a repository's runs."""
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")


def duration(option: str, text: str) -> float:
    """A duration option's value in seconds; a usage error naming ``option`` if it is not one."""
    from ..specs import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def output_args(p: argparse.ArgumentParser, default: Any) -> None:
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


def selection_args(p: argparse.ArgumentParser) -> None:
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
    fail_fast_arg(p)


def driving_args(p: argparse.ArgumentParser) -> None:
    """Options of the commands that drive an existing run (resume, retry)."""
    p.add_argument("--max-parallel", type=positive, metavar="N")
    p.add_argument("--json", action="store_true", help="print the final status as JSON")
    fail_fast_arg(p)
    executor_args(p)
    p.add_argument("-C", dest="repo", type=Path, default=Path("."), help="repository (default .)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the live web dashboard while the run goes on (prints its URL)",
    )


def executor_args(p: argparse.ArgumentParser) -> None:
    """Where attempts run: overrides of [run] executor (run, resume, retry)."""
    from ..executors import EXECUTORS

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


def load_plan(path: Path) -> Plan:
    """:func:`orchardist.plan.loading.load_plan`, imported when a command reads a plan: the plan's
    models and every agent kind are most of the package, which commands that only read a
    run's record (status, logs, events, runs) never need. What the repository's config file
    set and was not read is printed, one line each, on stderr."""
    return read_plan(path)[0]


def read_plan(path: Path) -> tuple[Plan, Repo]:
    """:func:`load_plan`, and the repository it found (see :func:`.plan.loading.read_plan`)."""
    from ..config import tell_ignored
    from ..plan.loading import read_plan as read

    plan, repo = read(path)
    tell_ignored(plan.ignored)
    return plan, repo


def with_executor(plan: Any, args: argparse.Namespace) -> Any:
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


def fail_fast_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-x",
        "--fail-fast",
        action="store_true",
        help="end the run as soon as a task fails for good (unfinished tasks: cancelled)",
    )


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _refused(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise _refused("must be a positive number")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _refused(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise _refused("must be at least 1")
    return value


def _refused(message: str) -> Exception:
    """What an argument's type raises for argparse to say ``message`` (only a parser calls
    one: argparse is imported already)."""
    import argparse

    return argparse.ArgumentTypeError(message)


def check_tasks(plan: Any, tasks: Sequence[str]) -> None:
    """Unknown task names are a usage error before anything is created."""
    from ..runs.start import check_known

    check_known(plan, tasks)


def check_selection(plan: Any, only: Sequence[str], skip: Sequence[str]) -> None:
    """``--only``/``--skip`` must name known tasks and leave at least one to run: a run of
    nothing would be created, recorded done and exit 0."""
    from ..plan.graph import Graph

    check_tasks(plan, [*only, *skip])
    if not (only or skip):
        return
    graph = Graph([t.id for t in plan.tasks], {t.id: t.depends_on for t in plan.tasks})
    left_out = graph.left_out(only, skip)
    if len(left_out) == len(plan.tasks):
        both = sorted(set(only) & set(skip))
        why = f" (--only and --skip both name {', '.join(both)})" if both else ""
        raise UsageError(f"--only and --skip leave no task of {plan.path} to run{why}")
