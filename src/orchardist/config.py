"""Agent profiles from config files, for plans and for the commands that need no plan.

Two files: ``~/.config/orchardist/config.toml`` (``$XDG_CONFIG_HOME`` when set), the user's,
and ``.orchardist.toml`` at the repository's root. Each holds ``[agents.NAME]`` tables exactly
as a plan does; the user's may also hold ``trusted_repositories``. A plan sees these profiles
too; its own ``[agents]`` win. A problem in a config file is reported against that file.

The repository's file is repository content: an agent's merged patch can write it, and every
later command reads it. So, unless the user's file names the repository in
``trusted_repositories``, it is screened before it is read (issue 28): a profile of a name the
user's file defines is left out (the user's wins), and so is every key that widens what an
agent receives (``env``, and each kind's ``widening_keys``: which program gets a tool's
credentials, with which flags and permissions, or which secret is sent where). What is left out
is returned as :class:`Ignored` records, for the command line to print.

Where the files are, what they hold and what a repository's may set; reading them (with the
plan's checks) is :func:`orchardist.plan.loading.read_config` and
:func:`orchardist.plan.loading.load_config`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .errors import Problem
from .state.agentrecords import AgentProfile

CONFIG_NAME = ".orchardist.toml"
TRUST_KEY = "trusted_repositories"  # in the user's file only: repositories read unscreened
PROFILE_WIDENING = frozenset({"env"})  # every kind: the caller's variables passed through


def user_config(environ: Mapping[str, str] | None = None) -> Path:
    """Where the user's config file is (whether or not it exists)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "/")) / ".config")
    return Path(base) / "orchardist" / "config.toml"


def config_files(repo_root: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The config files that exist, the repository's first."""
    found = [repo_root / CONFIG_NAME, user_config(environ)]
    return [p for p in found if p.is_file()]


@dataclass(frozen=True)
class Ignored:
    """A table or key of the repository's config file that was not read, and why."""

    file: Path
    key: str  # "agents.NAME" (the whole profile), "agents.NAME.KEY" or a top-level key
    why: str

    def __str__(self) -> str:
        return f"orchardist: ignored {self.key} in {self.file}: {self.why}"


@dataclass(frozen=True)
class Config:
    """The profiles of every config file (the winner's where names clash), and their text."""

    profiles: Mapping[str, AgentProfile] = field(default_factory=dict)
    origins: Mapping[str, Path] = field(default_factory=dict)  # profile name -> its file
    files: tuple[Path, ...] = ()  # the repository's first
    text: str = ""  # each file's text, under a "# from PATH" line (what a planner copies)
    ignored: tuple[Ignored, ...] = ()  # what the repository's file set and was not read

    def where(self, repo_root: Path) -> str:
        """The files, for a message: the ones that exist, or where the repository's would be."""
        shown = self.files or (repo_root / CONFIG_NAME, user_config())
        return " or ".join(str(p) for p in shown)


def take_trusted(data: dict[str, Any], path: Path) -> tuple[tuple[Path, ...], list[Problem]]:
    """Remove ``trusted_repositories`` from the user's parsed file: the absolute paths it
    lists (``~`` expanded, resolved), and the problems with it, naming the file and key."""
    raw = data.pop(TRUST_KEY, [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        return (), [Problem(str(path), "expected a list of repository paths", field=TRUST_KEY)]
    paths, problems = [], []
    for text in raw:
        given = Path(text).expanduser()
        if not given.is_absolute():
            why = f"{text!r} is not an absolute path"
            problems.append(Problem(str(path), why, field=TRUST_KEY))
        else:
            paths.append(given.resolve())
    return tuple(paths), problems


def screen_repository(
    data: dict[str, Any],
    path: Path,
    user_names: Mapping[str, Path],
    widening_of: Callable[[str], frozenset[str]],
) -> tuple[dict[str, Any], tuple[Ignored, ...]]:
    """The repository's parsed file without what it may not set unless trusted: profiles the
    user defines (``user_names``: name -> the user's file), widening keys, and a
    ``trusted_repositories`` of its own; and what was left out."""
    ignored: list[Ignored] = []
    screened = dict(data)
    if TRUST_KEY in screened:
        del screened[TRUST_KEY]
        why = "only your own config file can trust a repository"
        ignored.append(Ignored(path, TRUST_KEY, why))
    agents = screened.get("agents")
    if not isinstance(agents, dict):
        return screened, tuple(ignored)
    kept: dict[str, Any] = {}
    for name, raw in agents.items():
        if name in user_names:
            why = f"your profile of that name in {user_names[name]} is used instead"
            ignored.append(Ignored(path, f"agents.{name}", why))
            continue
        if isinstance(raw, dict):
            kind = raw.get("kind", "shell")
            widening = PROFILE_WIDENING | (widening_of(kind) if isinstance(kind, str) else set())
            for key in sorted(widening & raw.keys()):
                why = "a repository's config cannot widen what an agent receives"
                ignored.append(Ignored(path, f"agents.{name}.{key}", why))
            raw = {k: v for k, v in raw.items() if k not in widening}
        kept[name] = raw
    screened["agents"] = kept
    return screened, tuple(ignored)


def widening_keys(kind: str) -> frozenset[str]:
    """The keys of a kind that widen what its agent receives; none for an unknown kind (its
    validator says it is unknown)."""
    from .agents import KINDS, agent_class

    return agent_class(kind).widening_keys if kind in KINDS else frozenset()


def config_text(path: Path, found: Mapping[str, AgentProfile], screened: bool) -> str:
    """A config file's text for a planner to copy from; a screened file's profiles by name
    only (its text holds what was not read, which a planner would copy into the plan)."""
    if screened:
        names = ", ".join(sorted(found))
        return f"# from {path} (not copied: name these profiles as they are): {names}\n"
    return f"# from {path}\n" + path.read_text(encoding="utf-8", errors="replace")


def tell_ignored(ignored: Sequence[Ignored], out: TextIO | None = None) -> None:
    """Print what a repository's config file set and was not read, one line each, then how
    to trust the repository (its path in the user's ``trusted_repositories``)."""
    if not ignored:
        return
    out = sys.stderr if out is None else out
    for item in ignored:
        print(item, file=out)
    import json  # (only for this rare message: reading a plan needs none)

    roots = sorted({str(item.file.parent) for item in ignored})
    print(
        f"orchardist: to read it all, trust the repository in {user_config()}: "
        f"{TRUST_KEY} = [{', '.join(json.dumps(r) for r in roots)}]",
        file=out,
    )
