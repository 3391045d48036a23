"""The orchestrator's signals reach a loop that blocks on its queue, whichever thread the
kernel hands them to.

Each case runs in a new interpreter, where the test's code is the main thread (as an
orchestrator's is): a Python signal handler runs only there, and only when it runs bytecode.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, queue, signal, sys, threading, time
    from orchardist.cli.drive import StopRelay, _on_signals

    class Scheduler:  # the loop's two doors the relay uses, onto its queue
        def __init__(self):
            self.inbox = queue.Queue()
        def stop(self, reason, state):
            self.inbox.put(["stop", reason, state.value])
        def review_decided(self):
            self.inbox.put(["review"])

    relay, scheduler = StopRelay(), Scheduler()
    restore = _on_signals(relay)
    relay.attach(scheduler)
    parked = threading.Event()
    attempt = threading.Thread(target=parked.wait)  # an attempt's thread, say
    attempt.start()
    signum = getattr(signal, sys.argv[1])
    start = time.monotonic()
    signal.pthread_kill(attempt.ident, signum)  # the kernel's choice: not the main thread
    try:
        got = scheduler.inbox.get(timeout=30)  # the loop, blocked on its queue
    except queue.Empty:
        got = None
    waited = time.monotonic() - start
    parked.set()
    attempt.join()
    restore()
    print(json.dumps({"got": got, "waited": waited}))
    """
)


@pytest.mark.parametrize(
    ("signame", "expected"),
    [
        ("SIGUSR2", ["review"]),
        ("SIGTERM", ["stop", "interrupted", "interrupted"]),
        ("SIGINT", ["stop", "interrupted", "interrupted"]),
        ("SIGUSR1", ["stop", "cancelled by orchardist cancel", "cancelled"]),
    ],
)
def test_a_signal_delivered_to_another_thread_wakes_the_loop_blocked_on_its_queue(
    signame: str, expected: list[str]
) -> None:
    # Given an orchestrator's signal routing, its loop blocked on its queue (30 s at most),
    # When the signal is delivered to one of its other threads
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, signame],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    # Then the loop's queue gets the signal's message: the wait was not out its 30 s
    result = json.loads(done.stdout)
    assert result["got"] == expected, result
    assert result["waited"] < 30
