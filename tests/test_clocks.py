"""Clocks with callbacks: the fake one a test moves, and the wall one (a thread, no polling)."""

from __future__ import annotations

import threading

import pytest

from orchardist.clocks import Alarms, FakeClock, WallTimers


def test_a_fake_clock_runs_callbacks_at_their_own_time_in_order() -> None:
    # Given: callbacks due at 5, 2 and 2 (the two at 2 scheduled in that order)
    clock = FakeClock(0.0)
    seen: list[tuple[str, float]] = []
    clock.call_at(5.0, lambda: seen.append(("five", clock.now())))
    clock.call_at(2.0, lambda: seen.append(("two-a", clock.now())))
    clock.call_at(2.0, lambda: seen.append(("two-b", clock.now())))
    # When: time moves by 3, then by 10
    clock.advance(3.0)
    assert seen == [("two-a", 2.0), ("two-b", 2.0)] and clock() == 3.0
    clock.advance(10.0)
    # Then: each ran at its due time, and the clock ends where it was moved to
    assert seen[2:] == [("five", 5.0)] and clock() == 13.0


def test_a_callback_may_schedule_another_that_runs_in_the_same_advance() -> None:
    clock = FakeClock(0.0)
    seen: list[float] = []
    clock.call_at(1.0, lambda: clock.call_at(clock.now() + 1.0, lambda: seen.append(clock.now())))
    clock.advance(5.0)
    assert seen == [2.0]


def test_drain_moves_a_fake_clock_to_the_last_callback() -> None:
    clock = FakeClock(10.0)
    seen: list[float] = []
    clock.call_at(40.0, lambda: seen.append(clock.now()))
    clock.drain()
    assert seen == [40.0] and clock.now() == 40.0 and clock.pending() == 0


def test_a_fake_clock_does_not_go_back() -> None:
    with pytest.raises(ValueError, match="does not go back"):
        FakeClock().advance(-1.0)


def test_wall_timers_call_back_on_their_thread_and_drain_waits_for_it() -> None:
    # Given: wall timers with a callback due now and one due a moment later
    timers = WallTimers()
    ran: list[str] = []
    first = threading.Event()
    timers.call_at(timers.now(), lambda: (ran.append("now"), first.set()))
    timers.call_at(timers.now() + 0.05, lambda: ran.append("soon"))
    # When: the first is awaited, then the timers drained and closed
    assert first.wait(30.0)
    timers.drain()
    timers.close()
    # Then: both ran, in order, and nothing more can be scheduled
    assert ran == ["now", "soon"]
    with pytest.raises(RuntimeError, match="closed"):
        timers.call_at(0.0, lambda: None)


def test_wall_timers_nobody_closes_keep_no_thread_once_their_callbacks_ran() -> None:
    # Given: wall timers (never closed, as an executor a caller forgot) that held no thread yet
    before = set(threading.enumerate())
    timers = WallTimers()
    assert set(threading.enumerate()) == before
    # When: a callback is scheduled, runs and is drained, twice
    for round_ in range(2):
        ran = threading.Event()
        timers.call_at(timers.now(), ran.set)
        assert ran.wait(30.0), round_
        timers.drain()
        # Then: the thread that ran it ends by itself (a live one would make every fork of
        # this process, as the tests' CLI helpers do, copy it)
        for thread in set(threading.enumerate()) - before:
            thread.join(30.0)
            assert not thread.is_alive(), thread.name


def test_a_failing_wall_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    timers = WallTimers()
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    timers.call_at(timers.now(), boom)
    timers.call_at(timers.now(), lambda: ran.append("after"))
    timers.close()
    assert ran == ["after"]
    assert "timer callback failed" in caplog.text


def test_alarms_ring_when_due_in_order_and_say_what_is_still_pending() -> None:
    # Given: alarms on a clock the test moves
    clock = FakeClock(100.0)
    alarms = Alarms(clock)
    alarms.set(5.0, "retry", "b")
    alarms.set(1.0, "retry", "a")
    alarms.set(9.0, "deadline")
    # Then: nothing is due yet; the next one is a second away
    assert alarms.due() == [] and alarms.next_at() == 101.0
    # When: five seconds pass; Then: both retries ring, earliest first, and only once
    clock.advance(5.0)
    assert alarms.due() == [("retry", "a"), ("retry", "b")]
    assert alarms.due() == []
    assert not alarms.pending("retry") and alarms.pending("deadline")
    clock.advance(4.0)
    assert alarms.due() == [("deadline", "")] and alarms.next_at() is None
