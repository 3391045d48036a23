"""An executor without processes: each job takes its task's duration on a clock, then reports.

It implements the Executor seam exactly (a verifying phase, then one outcome per job; cancel
reports CANCELLED at once; close waits for every job), so the scheduler can be driven without
agents, worktrees or verify commands: on a :class:`~orchardist.clocks.FakeClock` a test moves
time by hand and nothing sleeps; on :class:`~orchardist.clocks.WallTimers` (the default) jobs
take real time, as in ``benchmarks/scheduler.py``.

A job changes nothing: its patch commit is its base commit. With ``failures``, a task's first
attempts fail verification, to exercise retries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..clocks import Timers, WallTimers
from ..git.repo import Repo
from ..state.agentrecords import Failure
from ..state.records import AttemptState
from ..state.store import Store
from . import AttemptJob, Job, Notify, Outcome, Phase, Stacker

if TYPE_CHECKING:
    from ..specs import RunConfig


class InlineExecutor:
    """Jobs that take ``durations_s[task]`` seconds of ``clock`` time and pass (or fail, see
    ``failures``); verify-only jobs (no agent profile) take no time."""

    def __init__(
        self,
        clock: Timers | None = None,
        durations_s: Mapping[str, float] | None = None,
        failures: Mapping[str, int] | None = None,  # task -> how many first attempts fail
    ) -> None:
        self._own_clock = clock is None
        self.clock: Timers = WallTimers() if clock is None else clock
        self.durations_s = dict(durations_s or {})
        self.failures = dict(failures or {})
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[Job, Notify, float]] = {}  # job id -> (job, notify, start)
        self.submitted: list[str] = []  # job ids, in submission order
        self.stacker: Stacker | None = None  # unused: its attempts change nothing

    @classmethod
    def for_run(
        cls,
        repo: Repo,
        state_dir: Path,
        store: Store,
        settings: RunConfig,
        clock: Callable[[], float],
    ) -> InlineExecutor:
        """An executor whose attempts take no time and change nothing (a rehearsal of the
        plan's order; not in :data:`~orchardist.executors.EXECUTORS` unless a test puts it)."""
        return cls()

    def submit(self, job: Job, notify: Notify) -> None:
        """Schedule the job's end on the clock; returns at once."""
        duration = self.durations_s.get(job.task_id, 0.0) if isinstance(job, AttemptJob) else 0.0
        started = self.clock.now()
        with self._lock:
            if job.id in self._pending:
                raise ValueError(f"job {job.id} is already running")
            self._pending[job.id] = (job, notify, started)
            self.submitted.append(job.id)
        self.clock.call_at(started + duration, lambda: self._finish(job.id))

    def cancel(self, job_id: str, reason: str) -> None:
        """Report the job cancelled now; unknown or finished jobs are ignored."""
        with self._lock:
            entry = self._pending.pop(job_id, None)
        if entry is not None:
            job, notify, started = entry
            notify(Outcome(job, AttemptState.CANCELLED, started, self.clock.now(), detail=reason))

    def running(self) -> list[str]:
        """Ids of the jobs that have not reported yet, in submission order."""
        with self._lock:
            return [j for j in self.submitted if j in self._pending]

    def close(self) -> None:
        """Let every submitted job finish (a fake clock is moved to the last one's end)."""
        self.clock.drain()
        if self._own_clock and isinstance(self.clock, WallTimers):
            self.clock.close()

    def _finish(self, job_id: str) -> None:
        with self._lock:
            entry = self._pending.pop(job_id, None)
        if entry is None:  # cancelled before its time
            return
        job, notify, started = entry
        notify(Phase(job, "verifying"))
        notify(self._outcome(job, started))

    def _outcome(self, job: Job, started: float) -> Outcome:
        now = self.clock.now()
        if isinstance(job, AttemptJob) and job.attempt <= self.failures.get(job.task_id, 0):
            return Outcome(
                job,
                AttemptState.FAILED,
                started,
                now,
                Failure.VERIFY_FAILED,
                f"attempt {job.attempt} fails by design",
                exit_code=1,
                patch_commit=job.base_commit,
                changed_lines=0,
                feedback=f"{job.task_id}: attempt {job.attempt} failed (inline executor)",
                verdict="failed",
                verify_commands=job.verify,
            )
        return Outcome(
            job,
            AttemptState.PASSED,
            started,
            now,
            detail="inline: took its duration",
            exit_code=0,
            patch_commit=job.base_commit,  # no changes
            changed_lines=0,
            verdict="verified" if job.verify else "unverified",
            verify_commands=job.verify,
        )
