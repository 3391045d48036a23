"""Finding which merge broke the run branch: a binary search over its task commits.

The run branch is linear (one commit per task on top of the last one), so the commits merged
since the last green point form a list where every commit after the first bad one is bad too.
:class:`Bisect` asks for one probe at a time and names the first bad commit in about
log2(n) probes. The probes themselves are ordinary verify jobs, run by the executor.

:class:`RegressionGuard` owns the check: when it is due, what its result means (passed, could
not run, a probe to run next, a culprit), and :func:`plan_rewind` says how the branch is rewound
past a culprit. The loop submits the jobs, records the events and applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..confine.procs import new_marker
from ..executors import Outcome, VerifyJob
from ..seams import Integrator
from ..specs import RunConfig
from ..state.agentrecords import Failure
from ..state.records import AttemptState
from .policy import INFRA_RETRIES


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


@dataclass
class _Check:
    """The check of the run branch in flight, and the bisect it may have started."""

    job: VerifyJob
    tip: str  # the commit being checked
    bisect: Bisect | None = None
    output: str = ""  # the last failing output


@dataclass(frozen=True)
class Checked:
    """The check of ``commit`` itself (not a bisect probe) ended."""

    passed: bool
    commit: str
    detail: str


@dataclass(frozen=True)
class Culprit:
    """The first merge after which the check fails."""

    commit: str
    probes: int  # how many bisect probes it took
    output: str  # the failing output, for the culprit's next attempt


@dataclass(frozen=True)
class GuardStep:
    """What an ended regression job asks of the loop, in this order."""

    checked: Checked | None = None  # say how the check went
    not_run: str | None = None  # the check could not run (why)
    off: str | None = None  # the guard switched itself off (why)
    probe: VerifyJob | None = None  # the next bisect probe, to submit
    culprit: Culprit | None = None  # rewind the branch past it


class RegressionGuard:
    """Checks the run branch every ``regression_every`` merges; bisects a failure to its merge."""

    def __init__(
        self,
        settings: RunConfig,
        run_id: str,
        base: str,
        timeout_s: float,
        integrator: Integrator,
    ) -> None:
        self.settings, self.run_id, self.base = settings, run_id, base
        self.timeout_s, self.integrator = timeout_s, integrator
        self.in_flight: _Check | None = None
        self.last_green = base
        self.unchecked = 0  # merges since the last check
        self.off = False  # the check cannot tell anything on this run
        self.infra = 0  # checks that could not run

    def check(self, tip: str, final: bool = False) -> VerifyJob | None:
        """The check to run now on ``tip``, if one is due (``final``: however few merges)."""
        if not self.settings.regression or self.off or self.in_flight is not None:
            return None
        if self.unchecked == 0 or (self.unchecked < self.settings.regression_every and not final):
            return None
        self.in_flight = _Check(self._job(tip, "check"), tip)
        return self.in_flight.job

    def ended(self, result: Outcome, stopping: bool) -> GuardStep | None:
        """The check (or a probe) ended; None when it says nothing (cancelled, stopping)."""
        check = self.in_flight
        assert check is not None
        if result.state is AttemptState.CANCELLED or stopping:
            self.in_flight = None
            return None
        if result.failure is Failure.INFRA_ERROR:  # it could not run: that says nothing
            self.in_flight, self.infra = None, self.infra + 1
            off = None
            if self.infra >= INFRA_RETRIES:
                self.off, off = True, "the regression check could not run"
            return GuardStep(not_run=result.detail, off=off)
        passed = result.state is AttemptState.PASSED
        checked = None
        if check.bisect is None:
            checked = Checked(passed, check.tip, result.detail)
            if passed:
                self.last_green, self.unchecked, self.in_flight = check.tip, 0, None
                return GuardStep(checked=checked)
            commits = self.integrator.first_parent_commits(self.last_green, check.tip)
            if self.last_green == self.base:
                commits.insert(0, self.last_green)  # never seen green: the base may be red too
            check.bisect, check.output = Bisect(commits), result.feedback
        else:
            check.bisect.record(result.job.base_commit, passed)
            if not passed:
                check.output = result.feedback
        return self._next(check, checked)

    def _next(self, check: _Check, checked: Checked | None) -> GuardStep:
        assert check.bisect is not None
        probe = check.bisect.next_probe()
        if probe is not None:
            check.job = self._job(probe, "bisect")
            return GuardStep(checked=checked, probe=check.job)
        self.in_flight = None
        culprit = check.bisect.culprit
        if culprit == self.base:
            self.off = True
            why = "the regression command already fails on the run's base"
            return GuardStep(checked=checked, off=why)
        found = Culprit(culprit, len(check.bisect.probes), check.output)
        return GuardStep(checked=checked, culprit=found)

    def merged(self) -> None:
        """One more merge landed since the last check."""
        self.unchecked += 1

    def resumed(self, merged: int) -> None:
        """A resumed run: the ``merged`` commits already on the branch were never checked
        since the restart; the final check covers them."""
        self.unchecked = merged

    def unresolved(self, tip: str) -> None:
        """The culprit could not be taken off: start counting again from ``tip``."""
        self.last_green, self.unchecked = tip, 0

    def rewound(self) -> None:
        """The branch was rewound: the new tip is checked after the next merge."""
        self.unchecked = self.settings.regression_every

    def _job(self, commit: str, label: str) -> VerifyJob:
        return VerifyJob(
            id=f"regression.{commit[:12]}.{label}.{new_marker()[:6]}",
            run_id=self.run_id,
            task_id="",
            attempt=0,
            candidate=0,
            base_commit=commit,
            verify=self.settings.regression,
            workdir=self.settings.workdir,
            timeout_s=self.timeout_s,
            marker=new_marker(),
            baseline=self.base,
            purpose="regression",
            network=self.settings.network,
        )


@dataclass(frozen=True)
class Rewind:
    """How to take a culprit's merge off the run branch."""

    culprit: Culprit
    task_id: str | None  # the culprit's task (None: the commit is no task's merge)
    replay: tuple[tuple[str, str], ...]  # (commit, task) of the culprit and later, oldest first
    affected: frozenset[str]  # tasks that depend on the culprit's: they wait for its re-run


def plan_rewind(
    culprit: Culprit,
    later: Sequence[str],
    commits: Mapping[str, str | None],
    descendants: Callable[[str], Iterable[str]],
) -> Rewind:
    """The rewind past ``culprit``: ``later`` are the branch's commits after it, ``commits``
    each task's merged commit."""
    order = {c: i for i, c in enumerate([culprit.commit, *later])}
    by_commit = {c: t for t, c in commits.items() if c in order}
    task_id = by_commit.get(culprit.commit)
    replay = tuple(sorted(by_commit.items(), key=lambda item: order[item[0]]))
    affected = frozenset(descendants(task_id)) if task_id is not None else frozenset()
    return Rewind(culprit, task_id, replay, affected)
