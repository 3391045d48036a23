"""Agent profiles from config files, for plans and for the commands that need no plan.

Two files, the first winning: ``.orchardist.toml`` at the repository's root, then
``~/.config/orchardist/config.toml`` (``$XDG_CONFIG_HOME`` when set). Each holds
``[agents.NAME]`` tables exactly as a plan does, and nothing else. A plan sees these profiles
too; its own ``[agents]`` win. A problem in a config file is reported against that file.

Where the files are and what they hold; reading them (with the plan's checks) is
:func:`orchardist.plan.read_config` and :func:`orchardist.plan.load_config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .records import AgentProfile

CONFIG_NAME = ".orchardist.toml"


def user_config(environ: Mapping[str, str] | None = None) -> Path:
    """Where the user's config file is (whether or not it exists)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "/")) / ".config")
    return Path(base) / "orchardist" / "config.toml"


def config_files(repo_root: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The config files that exist, the one that wins first."""
    found = [repo_root / CONFIG_NAME, user_config(environ)]
    return [p for p in found if p.is_file()]


@dataclass(frozen=True)
class Config:
    """The profiles of every config file (the winner's where names clash), and their text."""

    profiles: Mapping[str, AgentProfile] = field(default_factory=dict)
    origins: Mapping[str, Path] = field(default_factory=dict)  # profile name -> its file
    files: tuple[Path, ...] = ()  # the winner first
    text: str = ""  # each file's text, under a "# from PATH" line (what a planner copies)

    def where(self, repo_root: Path) -> str:
        """The files, for a message: the ones that exist, or where the repository's would be."""
        shown = self.files or (repo_root / CONFIG_NAME, user_config())
        return " or ".join(str(p) for p in shown)
