"""Where a repository is, found with one git process and without :class:`git.repo.Repo`
(whose set-up runs more): what commands that only read a run's record need of git, and the
work tree a plan is in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .env import GIT

WHAT = ("--show-toplevel", "--git-common-dir")  # one line each, in this order


def locate(path: Path) -> tuple[Path, Path] | None:
    """The work tree root containing ``path`` and its git common directory, or None when
    ``path`` is not in a git repository.

    The environment is the user's without its ``GIT_*`` variables, as for every git that
    orchardist runs: a stray ``GIT_DIR`` must not point a reader at another store.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        out = subprocess.run(
            [GIT, "-C", str(path), "rev-parse", "--path-format=absolute", *WHAT],
            capture_output=True,
            text=True,
            check=False,
            env={**env, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )
    except OSError:
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != 2:
        return None
    return Path(lines[0]).resolve(), Path(lines[1])


def find_toplevel(path: Path) -> Path | None:
    """The work tree root containing ``path``, or None when it is not in a git repository."""
    try:
        out = subprocess.run(
            [GIT, "-C", str(path), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    return Path(out.stdout.strip()).resolve()
