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

And how many workers (:func:`workers`, for ``-n auto`` in addopts): four for the quick loop
(``-m "not slow"``), six when the slow files run. The quick loop is CPU-bound on 2 cores (four
workers keep both busy; more only add their start and collection). The whole suite is not:
its slow tests spend most of their time waiting on real CLIs, Ray and Chromium, ~340 s of CPU
over ~900 s of one worker's time, so four workers were the bound (the suite's work over four),
with the cores ~75% busy. In a simulation of xdist's hand-out with the processor shared
(per-test times of the slow set and per-file times of the quick loop, 2026-12-05), the whole
suite went from ~390 s on four workers to ~311 s on six and ~273 s on eight, and the quick loop
stayed at ~139 s on four to eight; six leaves room on a machine with less memory than CPU.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

QUICK_LOOP_WORKERS = 4  # ``-m "not slow"``: CPU-bound, both cores busy
WHOLE_SUITE_WORKERS = 6  # with the slow files, which mostly wait


def workers(markexpr: str) -> int:
    """The xdist workers for a run selected by ``-m markexpr``: the quick loop's four unless the
    selection can hold the slow tests."""
    return QUICK_LOOP_WORKERS if "not slow" in markexpr else WHOLE_SUITE_WORKERS


def slow_files_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the slow files' tests, then the others', each most tests first."""
    tests_in: Counter[Path] = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path not in slow, -tests_in[item.path]))
