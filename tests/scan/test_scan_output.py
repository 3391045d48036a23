"""``scan -o`` to a path that is not a regular file: a device or a FIFO is written through,
never replaced by a file (as root, a replaced /dev/null breaks every program on the machine).

The device is a /dev/null twin made with mknod on a tmpfs in a private mount namespace
(``unshare --mount``), so the machine's /dev is never at stake, even on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from scan_support import logging_scanner, validate_sarif

from realtools import require
from run_support import orchardist
from support import make_repo, write_plan


def todo_repo_and_plan(tmp: Path) -> tuple[Path, Path]:
    """A repository with two TODOs and a plan whose one scanner reports them."""
    repo = make_repo(tmp / "repo", {"a.py": "# TODO: one\n", "b.py": "# TODO: two\n"})
    command, _ = logging_scanner(tmp)
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false  # the logging scanner writes its log outside its tree
        [scanners.todo]
        command = "{command} {{files}}"
        format = "json"
        include = ["**/*.py"]
        """,
        name="scan.toml",
    )
    return repo, plan


def read_all(fd: int) -> bytes:
    """All a non-blocking FIFO holds now (the writer is gone: empty means none ever wrote)."""
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def test_scan_output_to_a_device_node_writes_through_it_and_the_device_stays(
    tmp_path: Path,
) -> None:
    # making a device node needs root (CAP_MKNOD) and unshare (skip here; CI must run it)
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare")
    # Given: a repository with findings, and a folder where a private tmpfs will hold the device
    repo, plan = todo_repo_and_plan(tmp_path)
    dev = tmp_path / "dev"
    dev.mkdir()
    scan = shlex.join([sys.executable, "-m", "orchardist", "scan", str(plan), "-o"])
    script = f"""
        set -e
        mount -t tmpfs tmpfs {dev}
        mknod -m 666 {dev}/null c 1 3
        cd {repo}
        rc=0; {scan} {dev}/null > {tmp_path}/scan.out 2>&1 || rc=$?
        echo $rc > {tmp_path}/scan.rc
        stat -c '%F %t:%T' {dev}/null > {tmp_path}/after.txt
        ls -A {dev} > {tmp_path}/listing.txt
    """
    # When: the scan writes its SARIF to the device, inside the private mount namespace
    subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        check=True,
        timeout=120,
    )
    # Then: the scan succeeded; the node is still character device 1:3, and nothing else is there
    assert (tmp_path / "scan.rc").read_text().strip() == "0", (tmp_path / "scan.out").read_text()
    assert (tmp_path / "after.txt").read_text().split() == ["character", "special", "file", "1:3"]
    assert (tmp_path / "listing.txt").read_text().split() == ["null"]


def test_scan_output_to_a_fifo_reaches_its_reader_and_the_fifo_stays(tmp_path: Path) -> None:
    # Given: a repository with findings and a FIFO held open for reading (without blocking:
    # the writer's open does not wait, and a FIFO replaced by a file leaves it empty)
    repo, plan = todo_repo_and_plan(tmp_path)
    fifo = tmp_path / "findings.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # When: the log (a few kB, within the pipe's buffer) is written to the FIFO
        done = orchardist(repo, "scan", str(plan), "-o", str(fifo))
        received = read_all(reader)
    finally:
        os.close(reader)
    # Then: the reader got the whole SARIF log with both findings; the FIFO is still one
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    log = json.loads(received)
    validate_sarif(log)
    assert len(log["runs"][0]["results"]) == 2
