"""Where an attempt's folders are: the root of orchardist's folders for a repository, and the
folders of one attempt beneath it (what :class:`~.layout.Layout` makes and removes).

``<root>`` is ``[run] workspace``, else ``$ORCHARDIST_WORKDIR_ROOT``, else
``${XDG_CACHE_HOME:-~/.cache}/orchardist``; each repository has a folder of its own in it,
named by :func:`repo_key`.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT_VAR = "ORCHARDIST_WORKDIR_ROOT"


def workdir_root(configured: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The root of orchardist's attempt folders (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if configured is not None:
        return Path(configured).expanduser().resolve()
    if env.get(ROOT_VAR):
        return Path(env[ROOT_VAR]).expanduser().resolve()
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return (Path(cache).expanduser() / "orchardist").resolve()


def repo_key(common_dir: Path) -> str:
    """A folder name for a repository: its name and a short hash of its git directory's path."""
    real = Path(common_dir).resolve()
    name = real.parent.name if real.name == ".git" else real.name.removesuffix(".git")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "repo"
    return f"{slug[:40]}-{hashlib.sha256(str(real).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class AttemptPaths:
    """The folders of one attempt (or baseline run); all inside ``root``."""

    root: Path
    tree: Path  # the working tree: agents edit here, verify runs here
    git: Path  # its private git directory
    home: Path  # HOME of the attempt's processes
    tmp: Path  # TMPDIR of the attempt's processes
    io: Path  # orchardist's exchange folder (output file, JUnit reports)

    @classmethod
    def under(cls, root: Path) -> AttemptPaths:
        """The standard layout beneath ``root``."""
        return cls(root, root / "tree", root / "git", root / "home", root / "tmp", root / "io")

    @property
    def upper(self) -> Path:
        """Where an overlaid tree's changes are (outside every writable folder)."""
        return self.root / "upper"

    @property
    def overlay_work(self) -> Path:
        """The overlay's own scratch folder."""
        return self.root / "work"

    @property
    def git_layers(self) -> tuple[Path, Path]:
        """An overlaid git directory's upper and scratch folders (outside every writable one)."""
        return self.root / "upper.git", self.root / "work.git"

    @property
    def checkout_index(self) -> Path:
        """The copy of the index the checkout wrote (outside every writable folder)."""
        return self.root / "checkout.index"

    @property
    def output_file(self) -> Path:
        """Where the agent may write its JSON result."""
        return self.io / "output.json"

    @property
    def junit_dir(self) -> Path:
        """Where verify commands' JUnit reports go."""
        return self.io / "junit"

    @property
    def writable(self) -> tuple[Path, ...]:
        """The folders the attempt's processes may write."""
        return (self.tree, self.git, self.home, self.tmp, self.io)
