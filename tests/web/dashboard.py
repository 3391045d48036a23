"""A real ``orchardist serve`` process on 127.0.0.1 for the dashboard's tests."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from run_support import ORCHARDIST, Forked
from shared_run_support import finished_run, isolated
from support import Finished


@dataclass(frozen=True)
class Dashboard:
    base: str  # http://127.0.0.1:PORT
    token: str
    proc: subprocess.Popen[str]

    def client(self, auth: bool = True) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30.0)


@contextmanager
def serving(repo: Path, *args: str) -> Iterator[Dashboard]:
    """Start the dashboard of ``repo`` on a free port, in a fork of this process (``Forked``);
    stop it with SIGINT after, as Ctrl-C does, and check that it stopped by itself: with pages
    still open on its live streams, within 30 s (it ends them as it stops)."""
    proc = Forked(
        [*ORCHARDIST, "serve", "--port", "0", "-C", str(repo), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:  # blocks until the server printed its URL (or died)
            if line.startswith("open "):
                url = line.split()[1]
                break
        assert url, proc.stderr.read() if proc.stderr else "no URL printed"
        base, _, token = url.partition("/?token=")
        yield Dashboard(base, token, proc)
    finally:
        stopped = _stop(proc)
    assert stopped, "the dashboard did not stop within 30 s of SIGINT: killed"


def _stop(proc: subprocess.Popen[str]) -> bool:
    """SIGINT, then SIGKILL after 30 s; whether it stopped without the SIGKILL."""
    stopped = True
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stopped = False
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return stopped


@contextmanager
def served_run(factory: pytest.TempPathFactory, plan: str) -> Iterator[tuple[Finished, Dashboard]]:
    """A finished run of the plan text ``plan`` and its dashboard, in an environment of their
    own (for a module's tests that only read them)."""
    with isolated(factory), finished_run(factory, plan) as done, serving(done.root) as dash:
        yield done, dash
