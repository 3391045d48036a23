"""A path an attempt needs that cannot be shown safely (:mod:`.exes` says which and why).

A record of its own, made only where something is refused: a frozen dataclass costs ~3.5 M
instructions to make (its methods are compiled from source), and ``validate``'s look at a
plan's commands mostly refuses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Refusal:
    """A path an attempt needs that cannot be shown safely."""

    path: Path
    reason: str
    fix: str

    def message(self, what: str) -> str:
        """One line naming what needs the path, the path, why and what to do."""
        return f"{what} needs {self.path}, which attempts cannot see: {self.reason}; {self.fix}"
