"""Waiting, in the main thread, for work that runs on other threads, so that a Ctrl-C still
lands: Python raises KeyboardInterrupt only in the main thread, when it runs bytecode, and a
signal the kernel hands to another thread does not interrupt a main thread blocked on a lock.
So the waits here are taken in slices of ``SIGNAL_TICK_S``.

One way to start a thread (:func:`begin`, which :func:`aside` builds on) and one way to wait
(:func:`until`); :func:`once` makes work happen at its first call, whoever calls first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:  # the pool is imported by a scan that runs a scanner (it imports logging)
    from concurrent.futures import Future

__all__ = ["SIGNAL_TICK_S", "aside", "begin", "once", "result", "until"]

SIGNAL_TICK_S = 0.5
_T = TypeVar("_T")


def begin(work: Callable[[], _T], name: str = "scan-aside") -> Callable[[], _T]:
    """Start ``work`` on a thread of its own, now; what waits for it (in slices) and returns
    its result or raises its error."""
    outcome = _begun(work, name)
    return lambda: outcome()()


def aside(
    work: Callable[[], _T],
    cancel: Callable[[], None],
    meanwhile: Callable[[], None] | None = None,
) -> Callable[[], _T]:
    """Run ``work`` on a thread of its own and wait for it, calling ``meanwhile`` (if given)
    on this thread first; the work's result (or its error) as a function. A Ctrl-C reaches
    the main thread only: there it calls ``cancel`` and waits for the work to end, so the
    processes the work started are killed and reaped by its thread; so does an error of
    ``meanwhile``, which is then raised."""
    outcome = _begun(work, "scan")
    try:
        if meanwhile is not None:
            meanwhile()
        return outcome()
    except BaseException:
        cancel()
        outcome()
        raise


def until(*events: threading.Event) -> None:
    """Wait until each of ``events`` is set, in slices."""
    # On an Event, not Thread.join: a join that a KeyboardInterrupt cuts short marks the thread
    # as stopped while it still runs (CPython's bpo-45274 handling), and is_alive() then lies.
    for event in events:
        while not event.wait(SIGNAL_TICK_S):
            pass


def once(work: Callable[[], _T]) -> Callable[[], _T]:
    """``work``, done by the first call of the function returned; every call returns its
    result (or raises its error) without doing it again. A call from another thread while
    the first runs waits for it (a scanner's job thread and the main thread share one)."""
    todo = [work]
    done: list[Callable[[], _T]] = []
    lock = threading.Lock()

    def call() -> _T:
        with lock:
            if todo:
                done.append(_outcome(todo.pop()))
        return done[0]()

    return call


def result(future: Future[_T]) -> _T:
    """``future.result()``, in slices: a bare ``result()`` blocked on a hanging scanner would
    never see the Ctrl-C."""
    while True:
        try:
            return future.result(timeout=SIGNAL_TICK_S)
        except TimeoutError:
            continue


def _begun(work: Callable[[], _T], name: str) -> Callable[[], Callable[[], _T]]:
    """``work`` started on a new thread; what waits until it ended and returns its outcome."""
    done: list[Callable[[], _T]] = []
    ended = threading.Event()

    def run() -> None:
        try:
            done.append(_outcome(work))
        finally:
            ended.set()

    threading.Thread(target=run, name=name).start()

    def waited() -> Callable[[], _T]:
        until(ended)
        return done[0]

    return waited


def _outcome(work: Callable[[], _T]) -> Callable[[], _T]:
    """``work`` done: what returns its result or raises its error."""
    try:
        value = work()
    except BaseException as exc:  # handed to the caller, raised there
        return partial(_reraise, exc)
    return lambda: value


def _reraise(exc: BaseException) -> NoReturn:
    raise exc
