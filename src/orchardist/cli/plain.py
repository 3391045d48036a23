"""The plain lines of the commands that read and end at once, run without argparse:
``validate PLAN [--json]``, ``runs [--json]`` and ``status [RUN] [--json]``.

argparse, with the ``gettext`` it imports and the parsers it builds, is ~8 ms of the 100 ms
these commands may take. Any other line (an option, an abbreviation, ``--help``, a second
word) is left to the command line's parser, which runs it or says what is wrong: a line read
here runs exactly as the parser would run it (``tests/cli/test_cli_startup.py`` compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# command: the module of its function, the function, its one positional argument (None: it
# takes none), whether that must be given, and what its parser sets besides
LINES: dict[str, tuple[str, str, str | None, bool, dict[str, Any]]] = {
    "validate": ("plans", "cmd_validate", "plan", True, {}),
    "runs": ("reading", "cmd_runs", None, False, {"repo": Path(".")}),
    "status": ("reading", "cmd_status", "run", False, {"repo": Path("."), "watch": False}),
}


def plain(argv: Sequence[str]) -> int | None:
    """The exit code of ``orchardist ARGV`` when it is a plain line of a command in
    ``LINES``, run as its parser would run it; None, having done nothing, for any other."""
    if not argv or argv[0] not in LINES:
        return None
    home, name, positional, required, fixed = LINES[argv[0]]
    words = [w for w in argv[1:] if w != "--json"]
    if len(argv) - 1 - len(words) > 1 or len(words) > (positional is not None):
        return None
    if len(words) < required or [w for w in words if not w or w.startswith("-")]:
        return None
    from types import SimpleNamespace

    args = SimpleNamespace(**fixed, json=len(words) < len(argv) - 1)
    if positional is not None:
        given = words[0] if words else None
        setattr(args, positional, Path(given) if given and positional == "plan" else given)
    run: Callable[[Any], int] = getattr(_module(home), name)
    from ..errors import reported

    return reported(lambda: run(args))


def _module(name: str) -> Any:
    import importlib

    return importlib.import_module(f"{__package__}.{name}")
