"""An attempt's private HOME: filled for its agent's kind (state folders, copies of the files it
needs from the real home), emptied before verify commands run, and the toolchain roots of the
real home named by their variables so that tools are still found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .attemptpaths import AttemptPaths

# Toolchain roots that default to a folder in HOME (variable: folder in the real home).
TOOL_HOMES = {
    "RUSTUP_HOME": ".rustup",
    "CARGO_HOME": ".cargo",
    "PYENV_ROOT": ".pyenv",
    "NVM_DIR": ".nvm",
    "GOPATH": "go",
}


def fill_home(
    paths: AttemptPaths, real_home: Path, files: Sequence[str], state: Sequence[str]
) -> list[str]:
    """Fill an attempt's private HOME for an agent kind: the state folders it writes, and copies
    of the files it needs from the real home (credentials, settings). They are copies: nothing
    the agent writes to them reaches the real home. Returns the files copied."""
    import shutil  # (an attempt's: not on validate's path, see git.which)

    for folder in state:
        (paths.home / folder).mkdir(parents=True, exist_ok=True)
    copied = []
    for name in files:
        source = real_home / name
        if not source.is_file():
            continue
        target = paths.home / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o600)
        copied.append(name)
    return copied


def empty_home(paths: AttemptPaths) -> None:
    """Empty the attempt's HOME: verify commands run the agent's code, and must not find the
    credentials copied for the agent."""
    from ..safeio import remove_tree  # (validate imports this module and removes nothing)

    remove_tree(paths.home)
    paths.home.mkdir()


def tool_homes(environ: Mapping[str, str], real_home: Path) -> dict[str, str]:
    """Where toolchains installed in the real home keep their roots, as the variables that name
    them: with HOME private, rustup, cargo, pyenv, nvm and go would not find their own."""
    found = {}
    for var, folder in TOOL_HOMES.items():
        if environ.get(var):
            found[var] = environ[var]
        elif (real_home / folder).is_dir():
            found[var] = str(real_home / folder)
    return found
