"""Helpers for tests that need Linux namespaces (bubblewrap) and look at /proc."""

from __future__ import annotations

import os
import selectors
import time
from pathlib import Path

import pytest

from orchardist.confine import isolation


def require_namespaces() -> None:
    """Skip when bwrap cannot make namespaces here; on CI (env CI set) that is a failure."""
    found = isolation.probe()
    if found.usable:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the namespace tests (apt-get install bubblewrap): {found.reason}")
    pytest.skip(f"namespaces unavailable: {found.reason}")


def live(pids: set[int]) -> set[int]:
    """The pids that are live processes (zombies count as gone)."""
    alive = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X"):
            alive.add(pid)
    return alive


def wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    """Wait (on pidfds, up to ``seconds``) for the processes to end; return the survivors."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except OSError:
            continue
    deadline = time.monotonic() + seconds
    try:
        with selectors.DefaultSelector() as sel:
            for fd in fds:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(deadline - time.monotonic()):
                    sel.unregister(key.fd)
    finally:
        for fd in fds:
            os.close(fd)
    return live(pids)
