"""Agent profiles from config files, for plans and for the commands that need no plan.

Two files, the first winning: ``.orchardist.toml`` at the repository's root, then
``~/.config/orchardist/config.toml`` (``$XDG_CONFIG_HOME`` when set). Each holds
``[agents.NAME]`` tables exactly as a plan does, and nothing else. A plan sees these profiles
too; its own ``[agents]`` win. A problem in a config file is reported against that file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PlanError, Problem
from .plan import AgentProfile, read_profiles_file

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


def load_config(repo_root: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read the config files; raise :class:`PlanError` naming the file of each problem.
    (A profile's ``fallback`` is checked where the profiles are used, against all of them.)"""
    config, problems = read_config(repo_root, environ)
    if problems:
        raise PlanError(problems)
    return config


def read_config(
    repo_root: Path, environ: Mapping[str, str] | None = None
) -> tuple[Config, list[Problem]]:
    """The config files' profiles that could be read, and every problem found in them."""
    files = config_files(repo_root, environ)
    profiles: dict[str, AgentProfile] = {}
    origins: dict[str, Path] = {}
    problems: list[Problem] = []
    texts = []
    for path in reversed(files):  # the winner last
        found, wrong = read_profiles_file(path)
        problems += wrong
        profiles.update(found)
        origins.update(dict.fromkeys(found, path))
        if found:
            texts.append(f"# from {path}\n" + path.read_text(encoding="utf-8", errors="replace"))
    return Config(profiles, origins, tuple(files), "\n".join(reversed(texts))), problems
