"""The Ray executor when nodes are used up or lost: a profile's CPUs, memory and cap held on
the cluster's nodes, a worker node killed mid-attempt, the orchestrator killed with SIGKILL and
resumed.

On its own cluster (tests/executors/conftest.py), apart from test_ray.py's, so that the two
files run side by side on two pytest-xdist workers. Skipped only where Ray is not installed and
CI is not set.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from orchardist.procs import processes_with_env
from ray_support import RUN_S, START_S, RayCluster, ray_available
from run_support import spawn, status
from support import git

pytestmark = pytest.mark.skipif(
    not ray_available() and not os.environ.get("CI"),
    reason="Ray is not installed (pip install -e '.[dev]' installs it)",
)


CAPPED_AGENT = """\
import pathlib, sys, time

# Each attempt runs for 5 s and says when (all nodes share this machine's monotonic clock): two
# attempts of the profile at once anywhere on the cluster show as overlapping spans.
start = time.monotonic()
time.sleep(5)
span = f"{start} {time.monotonic()}"
pathlib.Path(sys.argv[1], "span." + sys.argv[2]).write_text(span)
pathlib.Path(sys.argv[2] + ".txt").write_text("done\\n")
"""


@pytest.mark.slow
def test_a_profiles_cpus_memory_and_cap_hold_on_the_cluster(
    cluster: RayCluster, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two tasks of a profile asking two CPUs and 64 MiB per attempt, capped at one attempt
    # at once (two nodes of two CPUs could run both), and a task whose profile asks more CPUs
    # than any node has
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    evidence = Path(tempfile.mkdtemp(prefix="caps-", dir=cluster.shared))
    (repo / "agent.py").write_text(CAPPED_AGENT)
    (repo / "plan.toml").write_text(
        textwrap.dedent(
            f"""\
            [run]
            executor = "ray"
            max_parallel = 4
            [agents.big]
            kind = "shell"
            command = "python agent.py {evidence} {{task}}"
            num_cpus = 2
            memory_mb = 64
            max_parallel = 1
            timeout = "5m"
            [agents.huge]
            kind = "shell"
            command = "touch {{task}}.txt"
            num_cpus = 64
            [[task]]
            id = "a"
            title = "A"
            prompt = "p"
            agent = "big"
            verify = "test -f a.txt"
            [[task]]
            id = "b"
            title = "B"
            prompt = "p"
            agent = "big"
            verify = "test -f b.txt"
            [[task]]
            id = "c"
            title = "C"
            prompt = "p"
            agent = "huge"
            retries = 0
            """
        )
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the plan")
    out = tmp_path / "run.out"

    # When it runs on the cluster
    proc = spawn(repo, "run", "plan.toml", "--json", "--ray-address", cluster.address, log=out)
    try:
        proc.wait(timeout=RUN_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    doc = json.loads(out.read_text()[out.read_text().index("{") :])
    tasks = {t["id"]: t for t in doc["tasks"]}

    # Then both tasks of the capped profile merged, one attempt at a time across the nodes
    assert tasks["a"]["state"] == tasks["b"]["state"] == "done", doc["tasks"]
    spans = sorted(tuple(map(float, p.read_text().split())) for p in evidence.glob("span.*"))
    assert len(spans) == 2, spans
    assert spans[0][1] <= spans[1][0], f"two attempts of a profile capped at 1 overlapped: {spans}"

    # And each attempt held two CPUs and 64 MiB on its node (its log says what Ray gave it)
    logs = repo / ".git" / "orchardist" / "logs" / str(doc["run"])
    for task in ("a", "b"):
        first = (logs / f"{task}.1.log").read_text().splitlines()[0]
        assert "CPU 2" in first and "memory 64 MiB" in first, first

    # And the task no node can hold failed at once, saying why, instead of waiting for good
    assert tasks["c"]["state"] == "failed", tasks["c"]
    detail = tasks["c"]["attempts"][-1]["detail"]
    assert "no live node of the Ray cluster has CPU 64" in detail, detail


HANGING_AGENT = """\
import os, pathlib, socket, sys

# The first attempt to reach the test's socket reports where it runs and hangs until its
# process dies; every later one finds no listener and does the task.
try:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sys.argv[1])
except OSError:
    pathlib.Path("done.txt").write_text("done\\n")
else:
    sock.sendall(os.environ["ORCHARDIST_WORKTREE"].encode() + b"\\n")
    sock.recv(1)
"""


@pytest.mark.slow
def test_a_worker_node_killed_mid_attempt_costs_a_retry_and_nothing_else(
    cluster: RayCluster, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a third worker node (the other tests keep two), and a task whose first attempt
    # hangs on whichever node runs it
    cluster.add_worker()
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    # A short path outside /tmp (an agent in namespaces has a /tmp of its own)
    folder = Path(tempfile.mkdtemp(prefix="ort-sock", dir="/var/tmp"))
    address = folder / "s"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(address))
    listener.listen(1)
    listener.settimeout(START_S)
    (repo / "agent.py").write_text(HANGING_AGENT)
    (repo / "plan.toml").write_text(
        textwrap.dedent(
            f"""\
            [run]
            executor = "ray"
            ray_address = "{cluster.address}"
            [agents.hang]
            kind = "shell"
            command = "python agent.py {address}"
            timeout = "5m"
            [[task]]
            id = "one"
            title = "Write done.txt"
            prompt = "Write done.txt"
            agent = "hang"
            verify = "test -f done.txt"
            """
        )
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the plan")
    base = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "run.out"
    try:
        proc = spawn(
            repo,
            "run",
            "plan.toml",
            "--json",
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            log=out,
        )
        try:
            # When the node running the first attempt dies while its agent hangs
            conn, _ = listener.accept()
            listener.close()
            address.unlink()
            with conn, conn.makefile("rb") as reader:
                conn.settimeout(START_S)
                worktree = Path(reader.readline().decode().strip())
                cluster.kill_node(cluster.node_of(worktree))

                # Then the agent's process is gone with its node (its end of the socket closed)
                assert reader.read(1) == b""

            # And the run completes, the attempt retried on another node
            assert proc.wait(timeout=RUN_S) == 0, out.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
    doc = json.loads(out.read_text()[out.read_text().index("{") :])
    (task,) = doc["tasks"]
    states = [(a["state"], a["failure"]) for a in task["attempts"]]
    assert states[0] == ("failed", "infra_error"), states
    assert states[-1][0] == "merged", states
    assert "lost on the Ray cluster" in task["attempts"][0]["detail"]

    # And the change is on the branch once, and no process of the run is left anywhere
    assert git(repo, "rev-list", "--count", f"{base}..{doc['branch']}") == "1"
    assert git(repo, "show", f"{doc['branch']}:done.txt") == "done"
    assert processes_with_env("ORCHARDIST_RUN", doc["run"]) == set()


RESUMABLE_AGENT = """\
import pathlib, socket, sys

# A first attempt reaches the test's socket, says which task it is and hangs until its process
# dies; a later one (after the resume nobody listens) does the task.
task = sys.argv[2]
try:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sys.argv[1])
except OSError:
    pathlib.Path(task + ".txt").write_text(task + "\\n")
else:
    sock.sendall(task.encode() + b"\\n")
    sock.recv(1)
"""


@pytest.mark.slow
def test_kill_9_of_the_orchestrator_then_resume_loses_nothing_and_merges_nothing_twice(
    cluster: RayCluster, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run on the cluster: one task merged, two more whose first attempts hang on nodes
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    folder = Path(tempfile.mkdtemp(prefix="ort-sock", dir="/var/tmp"))
    address = folder / "s"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(address))
    listener.listen(2)
    listener.settimeout(START_S)
    (repo / "agent.py").write_text(RESUMABLE_AGENT)
    hanging = "".join(
        f'[[task]]\nid = "{t}"\ntitle = "{t}"\nprompt = "p"\nagent = "hang"\n'
        f'depends_on = ["first"]\nverify = "test -f {t}.txt"\n'
        for t in ("a", "b")
    )
    (repo / "plan.toml").write_text(
        textwrap.dedent(
            f"""\
            [run]
            executor = "ray"
            ray_address = "{cluster.address}"
            max_parallel = 4
            [agents.quick]
            kind = "shell"
            command = "echo first > first.txt"
            [agents.hang]
            kind = "shell"
            command = "python agent.py {address} {{task}}"
            timeout = "5m"
            [[task]]
            id = "first"
            title = "First"
            prompt = "p"
            agent = "quick"
            verify = "test -f first.txt"
            """
        )
        + hanging
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the plan")
    base = git(repo, "rev-parse", "HEAD")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, True)
        stack.callback(listener.close)
        proc = spawn(repo, "run", "plan.toml", "--json", log=tmp_path / "run.out")
        stack.callback(_kill_session, proc)
        readers = {}
        for _ in range(2):
            conn, _ = listener.accept()
            stack.enter_context(conn)
            conn.settimeout(START_S)
            reader = stack.enter_context(conn.makefile("rb"))
            readers[reader.readline().strip().decode()] = reader
        assert sorted(readers) == ["a", "b"]
        run_id = str(status(repo, "")["run"])  # the repository's only run

        # When the orchestrator is killed with SIGKILL while both hang on their nodes, and
        # the run is resumed (the new attempts find nobody listening and do their tasks)
        _kill_session(proc)
        listener.close()
        address.unlink()
        out = tmp_path / "resume.out"
        resumed = spawn(repo, "resume", run_id, "--json", log=out)
        stack.callback(_kill_session, resumed)
        assert resumed.wait(timeout=RUN_S) == 0, out.read_text()

        # Then the hanging agents are gone from their nodes (their ends of the sockets closed)
        assert all(reader.read(1) == b"" for reader in readers.values())

    # And every task is done, each merged once: the tree an uninterrupted run gives
    text = out.read_text()
    doc = json.loads(text[text.index("{") :])
    assert {t["id"]: t["state"] for t in doc["tasks"]} == {
        "first": "done",
        "a": "done",
        "b": "done",
    }
    for task in doc["tasks"]:
        if task["id"] != "first":
            states = [a["state"] for a in task["attempts"]]
            assert states[0] == "interrupted" and states[-1] == "merged", states
    branch = str(doc["branch"])
    assert git(repo, "rev-list", "--count", f"{base}..{branch}") == "3"
    files = git(repo, "ls-tree", "--name-only", branch).split()
    assert set(files) - set(git(repo, "ls-tree", "--name-only", base).split()) == {
        "first.txt",
        "a.txt",
        "b.txt",
    }
    assert [git(repo, "show", f"{branch}:{t}.txt") for t in ("first", "a", "b")] == [
        "first",
        "a",
        "b",
    ]

    # And no process of the run is left on any node
    assert processes_with_env("ORCHARDIST_RUN", run_id) == set()


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a spawned orchardist's whole session (kill -9, as a crash)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
