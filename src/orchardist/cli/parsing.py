"""The top-level parser: every command registered in the order ``orchardist --help`` lists
them, the output options accepted after each command too, and help for every argument."""

from __future__ import annotations

import argparse
from typing import Any

from . import plans, reading, reviewing, running, upkeep
from .options import Commands, output_args, positive, root_parser
from .plans import Main

_ARG_HELP = {
    "plan": "plan file (.toml, .yaml or .yml)",
    "max_parallel": "attempts running at once (overrides [run] max_parallel)",
    "shell": "the shell to complete for",
}


def build(main: Main) -> argparse.ArgumentParser:
    """The parser of the command line whose entry point is ``main``."""
    from ..scan.cli import add_parser as add_scan_parser
    from .oneshot import add_parsers as add_oneshot_parsers

    parser = root_parser()
    sub = parser.add_subparsers(metavar="COMMAND")
    running.add_run(sub)
    running.add_resume(sub)
    running.add_retry(sub)
    running.add_cancel(sub)
    reviewing.add_review(sub)
    reading.add_show(sub)
    upkeep.add_gc(sub)
    plans.add_validate(sub)
    plans.add_schema(sub)
    reading.add_events(sub)
    reading.add_status(sub)
    reading.add_runs(sub)
    upkeep.add_stats(sub)
    upkeep.add_serve(sub)
    plans.add_plan(sub, main)
    reading.add_logs(sub)
    plans.add_graph(sub)
    plans.add_doctor(sub)
    add_scan_parser(sub, positive, running.drive_as_run)
    add_oneshot_parsers(sub, main)
    plans.add_completion(sub, lambda: build(main))
    for command in sub.choices.values():  # the output options work after the command too
        output_args(command, argparse.SUPPRESS)
    _fill_help(sub)
    return parser


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
