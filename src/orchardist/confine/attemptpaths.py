"""The folders of one attempt (or baseline run), beneath its repository's folder
(:mod:`.paths`): what :class:`~.layout.Layout` makes and removes, and what its processes may
write.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
