"""A checkout of one base commit that the overlays of attempts on that commit share
(:class:`~.layout.Layout` makes, moves and removes them): a record of its own because only a run
with overlays makes one, and ``validate``'s look at a layout makes none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..git.indexfile import IndexFile


@dataclass
class Pristine:
    """A checkout of one base commit that overlays share; changed only while none uses it."""

    root: Path  # tree/ and git/
    commit: str
    users: int = 1
    index: bytes = b""  # its git index, as the checkout wrote it
    digest: bytes = b""  # the index's sha256 (hashed once, not once per attempt)
    parsed: IndexFile | None = None  # the index, parsed once, moved with the checkout
    ready: threading.Event = field(default_factory=threading.Event)
    failed: bool = False
