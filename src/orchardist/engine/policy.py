"""Failure policy: back-off with jitter, a circuit breaker and a rate gate per agent profile,
the pools they make up, and the cost budgets.

The breaker and the gate take the time as an argument (``now``); :class:`Pools` reads an
injected clock. Tests drive them through hours of cool-down without sleeping.
"""

from __future__ import annotations

import enum
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..state.agentrecords import AgentProfile, Failure
from ..state.records import AttemptState
from ..state.usage import Usage

# Failures that count against a task's ``retries``; the others have their own budgets.
COUNTED = {
    Failure.AGENT_ERROR,
    Failure.TIMEOUT,
    Failure.VERIFY_FAILED,
    Failure.NO_CHANGES,
    Failure.AUTH_ERROR,
}
INFRA_RETRIES = 2  # infra errors (git, disk, executor) a task may have before it fails


class FreeRetries:
    """Which failed attempts run again without counting against their task's ``retries``: a
    rate-limited one always (its pool waits for the limit to reset), one that failed on an
    infrastructure error (git, disk, executor) at most :data:`INFRA_RETRIES` times a task."""

    def __init__(self) -> None:
        self.infra: Counter[str] = Counter()  # infra errors taken so far, per task

    def take(self, task_id: str, failure: Failure) -> bool:
        """Whether this failure is requeued for free (and, for an infra error, count it)."""
        if failure is Failure.RATE_LIMITED:
            return True
        if failure is Failure.INFRA_ERROR and self.infra[task_id] < INFRA_RETRIES:
            self.infra[task_id] += 1
            return True
        return False


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

    def __init__(self, *, threshold: int, cooldown_s: float) -> None:
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


class Ended(Protocol):
    """What the pools read of an attempt that ended (an executor's ``Outcome`` is one)."""

    @property
    def state(self) -> AttemptState:
        """How the attempt ended (passed, failed, cancelled)."""
        ...

    @property
    def failure(self) -> Failure | None:
        """Why it failed, if it did."""
        ...

    @property
    def verdict(self) -> str:
        """Set when verification ran: a failure then is the patch's, not the backend's."""
        ...

    @property
    def retry_after_s(self) -> float | None:
        """A rate-limited backend's reset, when it said one."""
        ...


class Pools:
    """The agent profiles as pools: each with a breaker, a rate gate, a load and a fallback."""

    def __init__(
        self,
        agents: Mapping[str, AgentProfile],
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.agents = agents
        self.clock, self.rng = clock, rng
        self.breakers = {
            name: CircuitBreaker(threshold=p.breaker_threshold, cooldown_s=p.breaker_cooldown_s)
            for name, p in agents.items()
        }
        self.gates = {name: RateGate(p.launch_interval_s) for name, p in agents.items()}
        self.load: Counter[str] = Counter()  # attempts running per pool
        self.on_fallback: set[str] = set()  # tasks whose agent timed out: they use the fallback

    def open(self, pool: str, now: float | None = None) -> bool:
        """Whether the pool may launch now (breaker and rate gate)."""
        now = self.clock() if now is None else now
        return self.breakers[pool].allows(now) and self.gates[pool].allows(now)

    def _capacity(self, pool: str) -> bool:
        cap = self.agents[pool].max_parallel
        return cap is None or self.load[pool] < cap

    def has_room(self, pool: str, now: float | None = None) -> bool:
        """Whether work of this pool may start now, on it or on its fallback."""
        now = self.clock() if now is None else now
        if self.open(pool, now):
            return self._capacity(pool)
        fallback = self.agents[pool].fallback
        return fallback is not None and self.open(fallback, now) and self._capacity(fallback)

    def profile_for(self, task_id: str, name: str) -> str:
        """The profile an attempt of ``task_id`` planned on ``name`` runs on."""
        fallback = self.agents[name].fallback
        if fallback is not None and (task_id in self.on_fallback or not self.open(name)):
            return fallback
        return name

    def started(self, pool: str) -> None:
        """An attempt started on the pool."""
        now = self.clock()
        self.breakers[pool].started(now)
        self.gates[pool].launched(now)
        self.load[pool] += 1

    def ended(self, pool: str, task_id: str, ended: Ended) -> bool:
        """Breakers count backend failures; a verify failure is the patch's, not the backend's.
        Returns True when this attempt opened the pool's breaker."""
        self.load[pool] -= 1
        now, failure = self.clock(), ended.failure
        breaker = self.breakers[pool]
        if ended.state is AttemptState.CANCELLED:
            breaker.abandoned()
            return False
        if failure is Failure.RATE_LIMITED:
            self.gates[pool].rate_limited(now, ended.retry_after_s, self.rng)
            breaker.abandoned()
            return False
        self.gates[pool].succeeded()
        agent_fault = not ended.verdict
        opened = False
        if agent_fault and failure in (Failure.AGENT_ERROR, Failure.TIMEOUT, Failure.AUTH_ERROR):
            # Retrying a refused credential will not help: that one opens the breaker at once.
            refused = failure is Failure.AUTH_ERROR
            opened = breaker.failed_for_good(now) if refused else breaker.failed(now)
        else:
            breaker.succeeded()
        if agent_fault and failure is Failure.TIMEOUT and self.agents[pool].fallback:
            self.on_fallback.add(task_id)
        return opened

    def wake_in(self, pools: Iterable[str]) -> float | None:
        """Seconds until work of one of ``pools`` may start (breaker cool-down, rate limit):
        0.0 when one has room already, None when only an attempt that ends can make room.

        One reading of the clock decides both: a pool that opened after the caller last asked
        ``has_room`` (a 100 ms rate limit ending while the loop merged) gets 0.0, not None, which
        would leave the loop waiting for a message that never comes."""
        now = self.clock()
        times = []
        for name in pools:
            if self.has_room(name, now):
                return 0.0
            blocked = [name]  # and its fallback, when the work may go there once it opens
            fallback = self.agents[name].fallback
            if fallback is not None and not self.open(name, now):
                blocked.append(fallback)
            for pool in blocked:
                reopen = self.breakers[pool].reopens_at()
                if reopen is not None and reopen > now:
                    times.append(reopen)
                if self.gates[pool].next_at > now:
                    times.append(self.gates[pool].next_at)
        return min(times) - now if times else None


class Budgets:
    """What each task and the whole run spent, against their cost limits (USD)."""

    def __init__(self, run_limit: float | None, task_limits: Mapping[str, float | None]) -> None:
        self.run_limit = run_limit
        self.task_limits = task_limits
        self.cost: defaultdict[str, float] = defaultdict(float)
        self.held: set[str] = set()  # tasks out of their budget
        self.total = 0.0  # what the run spent so far (kept, not summed: checked per launch)

    def spend(self, task_id: str, usage: Usage) -> None:
        """An attempt of the task used this much."""
        self.cost[task_id] += usage.cost_usd or 0.0
        self.total += usage.cost_usd or 0.0

    def task_spent(self, task_id: str) -> bool:
        """Whether the task may start no further attempt."""
        limit = self.task_limits[task_id]
        return limit is not None and self.cost[task_id] >= limit

    def task_left(self, task_id: str) -> float | None:
        """What the task's attempts may still spend (an agent that can be stopped is, there)."""
        limit = self.task_limits[task_id]
        return None if limit is None else max(0.0, limit - self.cost[task_id])

    def run_spent(self) -> str | None:
        """Why the run may launch nothing new, once its budget is spent."""
        limit = self.run_limit
        if limit is None or self.total < limit:
            return None
        return f"run cost budget spent (${self.total:.2f} of ${limit:.2f})"
