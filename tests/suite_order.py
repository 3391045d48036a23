"""The order the suite's files are handed to xdist's workers: the slow files first.

With ``--dist loadfile`` a file runs whole on one worker, and xdist hands the files out in
collection order (``--no-loadscope-reorder`` in addopts; a worker takes the next file when its
current one has two tests left). xdist's own order, most tests first, put the slow files (real
agent CLIs, the Ray cluster, Chromium) after the quick ones: few tests, but of 10 s to 2 min each,
mostly waiting (aider's rate-limit test waits out aider's own back-off, ~64 s), so the suite
ended on them while the CPU sat idle; in a whole-suite run at ea989ca the three browser files
(one test each) ended last. Here the ``slow``-marked files lead, so that their waiting overlaps
the quick files' work, and each group keeps xdist's rule, most tests first (in the slow set alone
it came within 0.5% of ordering by measured time, in a simulation from one run's per-test
times; collection order was 12% worse); a file's tests keep their order.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest


def slow_files_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the slow files' tests, then the others', each most tests first."""
    tests_in: Counter[Path] = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path not in slow, -tests_in[item.path]))
