"""The top-level parser: every command in the order ``orchardist --help`` lists them, the output
options accepted after each command too, and help for every argument.

Only the chosen command's parser is built, and only its module imported: ``status`` or ``runs``
need not import what ``run`` or ``scan`` do, nor build their twenty parsers (13 ms of argparse
alone). Without a command (``--help``), each is a stub that carries its one-line help, so the
listing is the same; a line the guess in :func:`command_in` got wrong has everything built and
is parsed again.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .options import Commands, output_args, root_parser

if TYPE_CHECKING:
    from .plans import Main

# each command, in the order --help lists them: the module registering its parser, its help line
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("running", "run a plan to its end"),
    "resume": ("running", "continue an interrupted or stopped run"),
    "retry": ("running", "re-run the failed, blocked and cancelled tasks of a run that ended"),
    "cancel": ("running", "end a live run from another terminal"),
    "review": (
        "reviewing",
        "list the patches awaiting review; approve, ask for changes or reject one",
    ),
    "show": ("reading", "print a candidate's diff and log"),
    "gc": ("upkeep", "remove logs, worktrees and refs of old finished runs"),
    "validate": ("plans", "check a plan without running it"),
    "schema": ("plans", "print the plan file's JSON Schema, for editors"),
    "events": ("reading", "print a run's events, one JSON object per line"),
    "status": ("reading", "show a run's tasks and attempts (default: newest run)"),
    "runs": ("reading", "list runs in this repository, newest first"),
    "stats": (
        "upkeep",
        "numbers across runs: green at first shot, retries, cost, durations per profile",
    ),
    "serve": ("upkeep", "a live web dashboard of this repository's runs (needs the web extra)"),
    "plan": ("plans", "have an agent write a plan from a spec; validated, corrected, then shown"),
    "logs": ("reading", "print the log of a task's attempts"),
    "graph": ("plans", "print a plan's launch order, critical path, expected makespan and graph"),
    "doctor": ("plans", "check that every agent profile of a plan can run here"),
    "scan": ("scan", "run read-only scanners in parallel; merge their findings into SARIF"),
    "debug": ("oneshot", "run the debug pipeline on a bug report, without a plan file"),
    "fix": ("oneshot", "run the fix pipeline on a bug report, without a plan file"),
    "completion": ("plans", "print a shell completion script"),
}

_ARG_HELP = {
    "plan": "plan file (.toml, .yaml or .yml)",
    "max_parallel": "attempts running at once (overrides [run] max_parallel)",
    "shell": "the shell to complete for",
}

_UNBUILT = "unbuilt_command"  # set by a stub: the line must be parsed by the whole parser


def build(main: Main, only: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The parser of the command line whose entry point is ``main``: every command's parser;
    with ``every=False``, that of ``only`` alone, or when ``only`` is None a stub of each
    command, which is all that ``--help`` and a mistyped command need (0.5 ms each)."""
    parser = root_parser()
    sub = parser.add_subparsers(metavar="COMMAND")
    for name, (_, summary) in COMMANDS.items():
        if name in sub.choices:  # registered with another (fix with debug)
            continue
        if every or name == only:
            _register(name, sub, main)
        elif only is None:
            stub = sub.add_parser(name, help=summary, add_help=False)
            stub.set_defaults(**{_UNBUILT: name})
    for name, command in sub.choices.items():  # the output options work after the command too
        if every or name == only:
            output_args(command, argparse.SUPPRESS)
    _fill_help(sub)
    return parser


def parse(main: Main, argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """``argv`` parsed, building only the parser of the command it names where it can; where
    the line turns out to need another, everything is built and the line parsed again, so
    what is parsed, printed or refused is what the whole parser does."""
    only = command_in(argv)
    parser = build(main, only if only in COMMANDS else None, every=False)
    parser.exit_on_error = False  # a word taken for another command: see below
    try:
        args, extra = parser.parse_known_args(argv)
    except argparse.ArgumentError:  # refused: in the words of the whole parser
        args, extra = argparse.Namespace(**{_UNBUILT: only or "?"}), []
    if getattr(args, _UNBUILT, None) is not None:
        parser = build(main)
        return parser, parser.parse_args(argv)
    if extra:  # what parse_args says of them
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return parser, args


def command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not one of ``orchardist``'s own
    options (of which only ``-C PATH`` takes a value)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word.startswith("--") or word == "-":
            continue
        if word.startswith("-"):
            if word.find("C") == len(word) - 1:  # -C PATH, -qC PATH; -CPATH holds its value
                next(words, None)
            continue
        return word
    return None


def _register(name: str, sub: Commands, main: Main) -> None:
    """Add ``name``'s whole parser to ``sub``, importing its module now."""
    home = COMMANDS[name][0]
    special: dict[str, Callable[[], Any]] = {
        "scan": lambda: _add_scan(sub),
        "oneshot": lambda: _module("oneshot").add_parsers(sub, main),
    }
    if home in special:
        special[home]()
    elif name == "plan":
        _module(home).add_plan(sub, main)
    elif name == "completion":
        _module(home).add_completion(sub, lambda: build(main))
    else:
        getattr(_module(home), f"add_{name}")(sub)


def _add_scan(sub: Commands) -> None:
    from ..scan.cli import add_parser
    from .options import positive

    add_parser(sub, positive, _drive_as_run)


def _drive_as_run(*args: Any, **kwargs: Any) -> int:
    """``running.drive_as_run``, imported when ``scan --fix`` drives its run: a scan that
    fixes nothing needs none of the run loop's display and signal handling."""
    from .running import drive_as_run

    return drive_as_run(*args, **kwargs)


def _module(name: str) -> Any:
    return importlib.import_module(f"{__package__}.{name}")


def _fill_help(sub: Commands) -> None:
    """Every subcommand's ``--help`` says what it does, and what each argument is."""
    summaries: dict[str, Any] = {action.dest: action.help for action in sub._choices_actions}
    for name, command in sub.choices.items():
        if command.description is None and summaries.get(name):
            summary = str(summaries[name])
            command.description = summary[0].upper() + summary[1:] + "."
        for action in command._actions:
            if action.help is None and action.dest in _ARG_HELP:
                action.help = _ARG_HELP[action.dest]
