"""The order the suite's files are handed to xdist's workers: the slow files first.

With ``--dist loadfile`` a file runs whole on one worker, and xdist hands the files out in
collection order (``--no-loadscope-reorder`` in addopts; a worker takes the next file when its
current one has two tests left). xdist's own order, most tests first, put the real-CLI files
last: few tests, but of 10 s to 2 min each (aider's rate-limit test waits out aider's own
back-off, ~64 s), so the suite ended on one or two of them running alone while the other workers
sat idle. Here the ``slow``-marked files lead, in collection order, and the quick files fill in
around them, most tests first as xdist did; a file's tests keep their order.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest


def slow_files_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the slow files' tests, then the others' by the file's size."""
    tests_in: Counter[Path] = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def turn(item: pytest.Item) -> tuple[bool, int]:
        if item.path in slow:
            return (False, 0)
        return (True, -tests_in[item.path])

    items.sort(key=turn)
