"""Clocks that can also call back at a time: the wall clock, and a fake one a test moves by hand.

Code that waits for time to pass takes a :class:`Timers` instead of sleeping, so the same code
runs in real time (:class:`WallTimers`: one thread, a heap and a Condition, no polling) or in a
test's own time (:class:`FakeClock`: nothing happens until the test calls :meth:`advance`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

Callback = Callable[[], None]
log = logging.getLogger(__name__)


class Timers(Protocol):
    """The time, and callbacks at a time."""

    def now(self) -> float:
        """Seconds since the epoch (or since the fake clock's start)."""
        ...

    def call_at(self, when: float, callback: Callback) -> None:
        """Call ``callback`` once ``now() >= when``; callbacks due together run in order."""
        ...

    def drain(self) -> None:
        """Return once every callback scheduled so far has run."""
        ...


class FakeClock:
    """Time that moves only when told; due callbacks run in the thread that moves it.

    Usable as a plain clock too: ``FakeClock()()`` is the current fake time.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, Callback]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now()

    def now(self) -> float:
        """The fake time."""
        with self._lock:
            return self._now

    def call_at(self, when: float, callback: Callback) -> None:
        """Run ``callback`` when the clock is moved to ``when`` or later."""
        with self._lock:
            heapq.heappush(self._heap, (when, next(self._seq), callback))

    def advance(self, seconds: float) -> None:
        """Move time forward, running each callback due on the way at its own time."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            target = self._now + seconds
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > target:
                    self._now = target
                    return
                when, _, callback = heapq.heappop(self._heap)
                self._now = max(self._now, when)
            callback()  # outside the lock: it may schedule more

    def pending(self) -> int:
        """How many callbacks wait for their time."""
        with self._lock:
            return len(self._heap)

    def drain(self) -> None:
        """Advance until no callback is waiting (callbacks may schedule more; those run too)."""
        while True:
            with self._lock:
                if not self._heap:
                    return
                last = max(when for when, _, _ in self._heap)
                step = max(0.0, last - self._now)
            self.advance(step)


class WallTimers:
    """Real time: a daemon thread sleeps on a Condition until the earliest callback is due; it
    runs only while a callback waits or runs, so timers that are never closed (an executor a
    caller forgot, an embedding program's) leave no thread behind."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callback]] = []
        self._seq = itertools.count()
        self._running = 0  # callbacks taken off the heap and not yet returned
        self._closing = False
        self._thread: threading.Thread | None = None  # only while a callback is pending

    def now(self) -> float:
        """The wall clock."""
        return self._clock()

    def call_at(self, when: float, callback: Callback) -> None:
        """Run ``callback`` on the timer thread at ``when``."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the timers are closed")
            heapq.heappush(self._heap, (when, next(self._seq), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wall-timers", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every callback scheduled so far has run."""
        with self._cond:
            while self._heap or self._running:
                self._cond.wait()

    def close(self) -> None:
        """Run what is scheduled, then refuse more."""
        self.drain()
        with self._cond:
            self._closing = True
            thread = self._thread
        if thread is not None:  # leaving, or left, as the last callback returned
            thread.join()

    def _loop(self) -> None:
        """Run callbacks as they fall due; return once none is left (the next ``call_at``
        starts another thread): timers nobody closes keep no thread."""
        while True:
            with self._cond:
                due = self._wait_for_due()
                if due is None:
                    self._thread = None
                    return
                self._running += len(due)
            for callback in due:  # outside the lock: a callback may take a while
                try:
                    callback()
                except Exception:  # one bad callback must not stop the others
                    log.exception("timer callback failed")
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _wait_for_due(self) -> list[Callback] | None:
        """The callbacks due now, after waiting for the first; None once none is left."""
        while True:
            if not self._heap:
                return None
            wait = self._heap[0][0] - self._clock()
            if wait <= 0:
                break
            self._cond.wait(wait)
        now = self._clock()
        due: list[Callback] = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[2])
        return due


class Alarms:
    """Wake-ups a loop sets itself (a retry's back-off, a deadline) on a monotonic clock: the
    loop waits on its inbox no longer than until the next one is due."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._heap: list[tuple[float, str, str]] = []  # (due, kind, key)

    def set(self, delay_s: float, kind: str, key: str = "") -> None:
        """Ring ``kind`` (about ``key``) in ``delay_s`` seconds."""
        heapq.heappush(self._heap, (self.monotonic() + delay_s, kind, key))

    def next_at(self) -> float | None:
        """When the next alarm is due, on the monotonic clock."""
        return self._heap[0][0] if self._heap else None

    def due(self) -> list[tuple[str, str]]:
        """Take the alarms due now, earliest first, as ``(kind, key)``."""
        now, rung = self.monotonic(), []
        while self._heap and self._heap[0][0] <= now:
            _, kind, key = heapq.heappop(self._heap)
            rung.append((kind, key))
        return rung

    def pending(self, kind: str) -> bool:
        """Whether an alarm of ``kind`` is still to ring."""
        return any(k == kind for _, k, _ in self._heap)
