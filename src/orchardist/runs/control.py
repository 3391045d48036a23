"""Reaching a live run from another process: who drives it, and asking it to cancel.

The orchestrator of a run holds an exclusive ``flock`` on ``locks/<run>.lock`` with its pid
written inside (see :func:`orchardist.runs.start.run_lock`); the kernel drops the lock when it dies.
So a lock that cannot be taken names a live orchestrator, and a pidfd opened on that pid while
the lock is still held cannot point at a recycled process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
from pathlib import Path

CANCEL_SIGNAL = signal.SIGUSR1  # the orchestrator's handler cancels the run (see cli.drive)
REVIEW_SIGNAL = signal.SIGUSR2  # a review decision is in the store: its handler wakes the loop


def lock_path(state_dir: Path, run_id: str) -> Path:
    """Where the run's lock lives."""
    return state_dir / "locks" / f"{run_id}.lock"


def holder(state_dir: Path, run_id: str) -> int | None:
    """The pid of the orchestrator driving the run now, or None when none does."""
    try:
        fd = os.open(lock_path(state_dir, run_id), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class Orchestrator:
    """A pidfd on a run's live orchestrator: signal it, wait for it to end."""

    def __init__(self, pidfd: int, pid: int) -> None:
        self.pidfd, self.pid = pidfd, pid

    @classmethod
    def find(cls, state_dir: Path, run_id: str) -> Orchestrator | None:
        """The run's orchestrator, or None when no live process holds its lock."""
        pid = holder(state_dir, run_id)
        if pid is None:
            return None
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if holder(state_dir, run_id) != pid:  # it ended (and the pid may be reused): not ours
            os.close(pidfd)
            return None
        return cls(pidfd, pid)

    def signal(self, signum: int = CANCEL_SIGNAL) -> bool:
        """Send ``signum``; False if it has already ended."""
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until it ends (True) or ``timeout_s`` passes (False)."""
        readable, _, _ = select.select([self.pidfd], [], [], timeout_s)
        return bool(readable)

    def close(self) -> None:
        """Release the pidfd."""
        with contextlib.suppress(OSError):
            os.close(self.pidfd)

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
