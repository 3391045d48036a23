"""``[run] environment``: folders of the user's checkout that tests need but no commit holds
(``.venv``, ``node_modules``), declared by the user, never produced by an agent.

With namespaces each is shown read-only at its own place beneath the repository's path, in
every view of an attempt (agent, verify, check, baselines), over the attempt's tree: what an
agent writes there is not what verify reads, and the user's copy never changes. Tracked paths
are refused: those are the tree's own files, and would be hidden by the user's copy. With
Landlock or isolation off nothing is shown (see docs/environment.md).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..git.env import GIT, git_env

FIELD = "run.environment"


def environment_problems(names: list[str], repo: Path | None) -> tuple[tuple[str, ...], list[str]]:
    """The folders, normalized, and what is wrong with each (messages for ``run.environment``)."""
    problems: list[str] = []
    folders: list[str] = []
    for name in names:
        normal = os.path.normpath(name) if name.strip() else ""
        if not normal or normal == ".":
            problems.append(f"{name!r}: name a folder of the repository, not the repository")
        elif os.path.isabs(name):
            problems.append(f"{name!r} must be a path relative to the repository, not absolute")
        elif normal == ".." or normal.startswith("../"):
            problems.append(f"{name!r} leaves the repository")
        elif normal == ".git" or normal.startswith(".git/"):
            problems.append(f"{name!r} is git's own folder")
        else:
            folders.append(normal)
    tracked = tracked_folders(folders, repo) if repo is not None else []
    for name in tracked:
        problems.append(
            f"{name!r} holds files git tracks: the environment is what no commit holds "
            "(say, an ignored .venv or node_modules)"
        )
    return tuple(dict.fromkeys(f for f in folders if f not in tracked)), problems


def tracked_folders(folders: list[str], repo: Path) -> list[str]:
    """Those of ``folders`` that are, or hold, files in the repository's index."""
    found = []
    for folder in folders:
        done = subprocess.run(
            [GIT, "-C", str(repo), "ls-files", "-z", "--", folder],
            env=git_env(Path(repo)),
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode == 0 and done.stdout:
            found.append(folder)
    return found
