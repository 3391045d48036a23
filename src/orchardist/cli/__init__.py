"""The command line: ``orchardist run | resume | show | gc | validate | status | runs | logs |
doctor | scan``.

Exit codes: 0 every task done; 1 some task failed or blocked, the run was stopped by a deadline
or budget, or git or the store failed; 2 bad plan or usage, or the run is locked by another
orchardist; 3 the run ended awaiting review (decide with ``orchardist review``, then ``resume``);
130 interrupted.

Each command is a pair of small functions in the module of its group: ``add_NAME`` registers
its parser, ``cmd_NAME`` runs it.

    parsing.py   the top-level parser, with every command in the order ``--help`` lists them;
                 only the chosen command's parser is built
    plain.py     the plain lines of validate, runs and status, read without the parser
    options.py   exit codes and the options several commands share
    running.py   run, resume, retry, cancel
    reviewing.py review
    drive.py     driving a run: its lock, signals, progress display and summary
    reading.py   show, logs, status, events, runs
    upkeep.py    gc, stats, serve
    plans.py     validate, schema, graph, doctor, plan, completion
    summary.py   what ``status`` and a run's end print
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_USAGE, UsageError, reported

if TYPE_CHECKING:
    import argparse

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchardist`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["__complete"]:  # what completion scripts ask for: ids, fast and quiet
        from .completion import ids

        return ids(argv[1:])
    from .parsing import parse  # argparse: a plain validate's line is read without it

    parser, args = parse(main, argv)
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE

    def command() -> int:
        _enter(args.chdir)
        code: int = args.func(args)
        return code

    return reported(command)


def _enter(folder: Path | None) -> None:
    """``orchardist -C PATH COMMAND``: work from PATH, as ``git -C`` does."""
    if folder is None:
        return
    try:
        os.chdir(folder)
    except OSError as exc:
        raise UsageError(f"-C {folder}: {exc.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (commands that run a plan call back into ``main``)."""
    from .parsing import build

    return build(main)
