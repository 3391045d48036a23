"""What looking for bubblewrap found: whether namespaces can be made here, and why not.

A record of its own (not beside :func:`.isolation.probe`, which makes it) because a command that
imports the isolation policy may never ask: ``validate`` asks only when a command it looks at
needs a second look.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    """Whether namespaces can be made here, and why not when they cannot."""

    bwrap: str | None  # the bwrap binary found on PATH
    usable: bool
    version: str = ""
    reason: str = ""  # why not usable
