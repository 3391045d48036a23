"""Waiting, in the main thread, for work that runs on other threads, so that a Ctrl-C still
lands: Python raises KeyboardInterrupt only in the main thread, when it runs bytecode, and a
signal the kernel hands to another thread does not interrupt a main thread blocked on a lock.
So the waits here are taken in slices of ``SIGNAL_TICK_S``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:  # the pool is imported by a scan that runs a scanner (it imports logging)
    from concurrent.futures import Future

__all__ = ["SIGNAL_TICK_S", "aside", "begin", "result"]

SIGNAL_TICK_S = 0.5
_T = TypeVar("_T")


def aside(work: Callable[[], _T], cancel: Callable[[], None]) -> Callable[[], _T]:
    """Run ``work`` on a thread of its own and wait for it; its result (or its error) as a
    function. A Ctrl-C reaches the main thread only: there it calls ``cancel`` and waits for
    the work to end, so the processes the work started are killed and reaped by its thread."""
    ended, done = _started(work, "scan", daemon=False)
    # On an Event, not Thread.join: a join that a KeyboardInterrupt cuts short marks the thread
    # as stopped while it still runs (CPython's bpo-45274 handling), and is_alive() then lies.
    try:
        while not ended.wait(SIGNAL_TICK_S):
            pass
    finally:
        if not ended.is_set():
            cancel()
            while not ended.wait(SIGNAL_TICK_S):
                pass
    return done[0]


def begin(work: Callable[[], _T], name: str = "scan-check") -> Callable[[], _T]:
    """Start ``work`` on a thread of its own, now; what waits for it (in slices) and returns
    its result or raises its error. For short work that runs beside the scan's own (a git
    command): nothing cancels it, and the process does not wait for it if the scan is
    interrupted (a daemon thread)."""
    ended, done = _started(work, name, daemon=True)

    def waited() -> _T:
        while not ended.wait(SIGNAL_TICK_S):
            pass
        return done[0]()

    return waited


def result(future: Future[_T]) -> _T:
    """``future.result()``, in slices: a bare ``result()`` blocked on a hanging scanner would
    never see the Ctrl-C."""
    while True:
        try:
            return future.result(timeout=SIGNAL_TICK_S)
        except TimeoutError:
            continue


def _started(
    work: Callable[[], _T], name: str, daemon: bool
) -> tuple[threading.Event, list[Callable[[], _T]]]:
    """``work`` started on a new thread: the event set when it ends, and (then) its outcome."""
    done: list[Callable[[], _T]] = []
    ended = threading.Event()

    def run() -> None:
        try:
            value = work()
        except BaseException as exc:  # handed to the caller, raised there
            done.append(partial(_reraise, exc))
        else:
            done.append(lambda: value)
        finally:
            ended.set()

    threading.Thread(target=run, name=name, daemon=daemon).start()
    return ended, done


def _reraise(exc: BaseException) -> NoReturn:
    raise exc
