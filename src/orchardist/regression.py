"""Finding which merge broke the run branch: a binary search over its task commits.

The run branch is linear (one commit per task on top of the last one), so the commits merged
since the last green point form a list where every commit after the first bad one is bad too.
:class:`Bisect` asks for one probe at a time and names the first bad commit in about
log2(n) probes. The probes themselves are ordinary verify jobs, run by the executor.
"""

from __future__ import annotations

from collections.abc import Sequence


class Bisect:
    """Binary search for the first bad commit in ``commits`` (oldest first, last one bad)."""

    def __init__(self, commits: Sequence[str]) -> None:
        if not commits:
            raise ValueError("nothing to bisect")
        self.commits = list(commits)
        self.low = 0  # commits[:low] are known good
        self.high = len(self.commits) - 1  # commits[high] is known bad
        self.probes: list[tuple[str, bool]] = []

    @property
    def done(self) -> bool:
        """Whether the first bad commit is known."""
        return self.low >= self.high

    def next_probe(self) -> str | None:
        """The commit to test next, or None when done."""
        if self.done:
            return None
        return self.commits[(self.low + self.high) // 2]

    def record(self, commit: str, passed: bool) -> None:
        """The result of testing ``commit``."""
        index = self.commits.index(commit)
        self.probes.append((commit, passed))
        if passed:
            self.low = max(self.low, index + 1)
        else:
            self.high = min(self.high, index)

    @property
    def culprit(self) -> str:
        """The first bad commit (only meaningful once done)."""
        return self.commits[self.high]
