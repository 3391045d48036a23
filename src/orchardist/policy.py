"""Failure policy: back-off with jitter, and a circuit breaker per agent profile.

Both take the time as an argument (``now``) instead of reading a clock, so tests drive them
through hours of cool-down without sleeping.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from .records import Failure

# Failures that count against a task's ``retries``; the others have their own budgets.
COUNTED = {
    Failure.AGENT_ERROR,
    Failure.TIMEOUT,
    Failure.VERIFY_FAILED,
    Failure.NO_CHANGES,
    Failure.AUTH_ERROR,
}
INFRA_RETRIES = 2  # infra errors (git, disk, executor) a task may have before it fails


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with full jitter in [delay/2, delay], capped."""

    base_s: float = 1.0
    cap_s: float = 300.0

    def delay(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait before the attempt that follows the ``failures``-th failure."""
        if failures <= 0 or self.base_s <= 0:
            return 0.0
        delay: float = min(self.cap_s, self.base_s * 2.0 ** min(failures - 1, 64))
        return delay * (0.5 + rng.random() / 2)


class BreakerState(enum.StrEnum):
    CLOSED = "closed"  # attempts flow
    OPEN = "open"  # too many consecutive failures: no attempts until the cool-down ends
    HALF_OPEN = "half_open"  # cool-down over: one probe attempt decides


class CircuitBreaker:
    """Opens after ``threshold`` consecutive failures; one probe after ``cooldown_s`` decides."""

    def __init__(self, threshold: int = 3, cooldown_s: float = 60.0) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.failures = 0
        self.opened_at: float | None = None
        self.probing = False

    def state(self, now: float) -> BreakerState:
        """The breaker's state at ``now``."""
        if self.opened_at is None:
            return BreakerState.CLOSED
        if now - self.opened_at < self.cooldown_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def allows(self, now: float) -> bool:
        """Whether an attempt may start now (in half-open, only while no probe is out)."""
        state = self.state(now)
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and not self.probing
        )

    def started(self, now: float) -> None:
        """An attempt started; in half-open it is the probe."""
        if self.state(now) is BreakerState.HALF_OPEN:
            self.probing = True

    def succeeded(self) -> None:
        """An attempt of this profile succeeded: close."""
        self.failures, self.opened_at, self.probing = 0, None, False

    def failed(self, now: float) -> bool:
        """An attempt failed; returns True when this failure opened (or re-opened) the breaker."""
        self.failures += 1
        was_probe = self.probing
        self.probing = False
        if self.threshold <= 0:  # the breaker is off
            return False
        if was_probe or (self.opened_at is None and self.failures >= self.threshold):
            self.opened_at = now
            return True
        return False

    def failed_for_good(self, now: float) -> bool:
        """A failure retrying cannot fix (refused credentials): opens at once, if the breaker
        is on; returns True when it opened."""
        if self.threshold > 0:
            self.failures = max(self.failures, self.threshold - 1)
        return self.failed(now)

    def abandoned(self) -> None:
        """An attempt ended without a verdict on the backend (cancelled, rate limited)."""
        self.probing = False

    def reopens_at(self) -> float | None:
        """When an open breaker lets a probe through."""
        return None if self.opened_at is None else self.opened_at + self.cooldown_s


class RateGate:
    """Per-profile launch pacing: ``launch_interval_s`` between starts, and pauses on 429s."""

    def __init__(self, interval_s: float = 0.0, backoff: Backoff | None = None) -> None:
        self.interval_s = interval_s
        self.backoff = backoff or Backoff(base_s=15.0, cap_s=900.0)
        self.next_at = 0.0
        self.limited = 0

    def allows(self, now: float) -> bool:
        """Whether a launch may happen now."""
        return now >= self.next_at

    def launched(self, now: float) -> None:
        """A launch happened."""
        self.next_at = max(self.next_at, now + self.interval_s)

    def rate_limited(self, now: float, retry_after_s: float | None, rng: random.Random) -> float:
        """Pause launches until the reset (or a back-off); returns the resume time."""
        self.limited += 1
        wait = self.backoff.delay(self.limited, rng)
        if retry_after_s is not None and retry_after_s > 0:
            wait = retry_after_s  # the backend said when; "0" or nonsense gets the back-off
        self.next_at = max(self.next_at, now + wait)
        return self.next_at

    def succeeded(self) -> None:
        """A launch went through without a rate limit: reset the back-off."""
        self.limited = 0
