"""A job's reaper kills the job's marked processes when the pipe from its runner closes without
the word that the job ended (a Ray worker that died: executors/raynode.py), and leaves them be
when the word came."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchardist.confine.procs import MARKER_VAR, new_marker
from orchardist.confine.reaper import JOB_ENDED
from support import marked_processes

WAIT_S = 60.0


@pytest.fixture
def marked() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A process of a job, in a session of its own, carrying the job's marker."""
    marker = new_marker()
    proc = subprocess.Popen(
        ["sleep", "600"], env={"PATH": "/usr/bin:/bin", MARKER_VAR: marker}, start_new_session=True
    )
    try:
        yield marker, proc
    finally:
        proc.kill()
        proc.wait()


def start_reaper(marker: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchardist.confine.reaper", marker],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )


def test_a_runner_that_dies_leaves_its_jobs_processes_to_the_reaper(
    marked: tuple[str, subprocess.Popen[bytes]],
) -> None:
    # Given a job's process and its reaper
    marker, proc = marked
    reaper = start_reaper(marker)
    assert marked_processes(marker) == {proc.pid}

    # When the runner's end of the pipe closes without a word (as when the runner dies)
    assert reaper.stdin is not None
    reaper.stdin.close()

    # Then the reaper kills the job's process and exits
    assert reaper.wait(timeout=WAIT_S) == 0
    assert proc.wait(timeout=WAIT_S) < 0
    assert marked_processes(marker) == set()


def test_a_job_that_ended_keeps_its_processes_from_the_reaper(
    marked: tuple[str, subprocess.Popen[bytes]],
) -> None:
    # Given a job's process and its reaper
    marker, proc = marked
    reaper = start_reaper(marker)

    # When the runner says the job ended, then closes the pipe
    reaper.communicate(JOB_ENDED, timeout=WAIT_S)

    # Then the reaper exits and the process is left alone
    assert reaper.returncode == 0
    assert proc.poll() is None


def test_the_reaper_imports_only_the_process_control() -> None:
    # Given: one reaper starts per attempt on a Ray node, so what it imports is CPU per attempt
    # When its module is imported on its own
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, orchardist.confine.reaper; print(*sorted(sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()

    # Then none of the executors, the store, git, the verifier or Ray comes with it
    ours = {name for name in listed if name.startswith("orchardist.")}
    heavy = ("orchardist.executors", "orchardist.state", "orchardist.git", "orchardist.verify")
    assert not [name for name in ours if name.startswith(heavy)], ours
    assert "ray" not in listed
