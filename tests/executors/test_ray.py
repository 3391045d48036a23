"""The Ray executor on a real local cluster: a head with no CPUs and two worker nodes.

The quickstart runs on it and must give the run branch the local executor gives: the same
tree, the same number of commits, the same subjects (both are compared with the quickstart's
canned changes applied in dependency order: tests/quickstart_support.py). Skipped only where
Ray is not installed and CI is not set (under CI it is part of the dev extra, and a missing Ray
fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchardist.cli import main
from orchardist.executors import executor_class
from orchardist.git.repo import Repo
from orchardist.specs import RunConfig
from orchardist.state.store import Store
from quickstart_support import expected_branch, quickstart_repo
from ray_support import RayCluster, ray_available
from run_support import spawn, status
from support import git, processes_with_env

START_S = 180.0  # for an attempt to start on the cluster (a loaded 2-core machine)
RUN_S = 600.0  # for a whole run

pytestmark = [
    pytest.mark.skipif(
        not ray_available() and not os.environ.get("CI"),
        reason="Ray is not installed (pip install -e '.[dev]' installs it)",
    ),
    pytest.mark.slow,
]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A local cluster for the whole session, always torn down (pytest-xdist's ``--dist
    loadfile``, in pyproject.toml, runs this whole file on one worker: one cluster)."""
    started = RayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        started.start(workers=2, cpus_per_worker=2)
        yield started
    finally:
        started.stop()
    assert started.leftovers() == set()


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc: dict[str, object] = json.loads(out)
    return doc


def subjects(repo: Path, since: str, branch: str) -> list[str]:
    return git(repo, "log", "--reverse", "--format=%s", f"{since}..{branch}").splitlines()


def test_the_quickstart_on_a_two_node_cluster_gives_the_local_run_branch(
    cluster: RayCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the quickstart, `python` meaning this interpreter (it has pytest), and the branch
    # every run of it gives: its canned changes applied in dependency order (the local
    # executor's run gives it too: tests/test_quickstart.py)
    remote = quickstart_repo(tmp_path / "ray")
    base = git(remote, "rev-parse", "HEAD")
    expected = expected_branch(tmp_path / "expected")

    # When it runs on the cluster
    on_ray = run_json(
        [
            "run",
            str(remote / "plan.toml"),
            "--json",
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
        ],
        capsys,
    )

    # Then the run is done, stats retried once
    assert on_ray["state"] == "done"
    attempts = {t["id"]: len(t["attempts"]) for t in on_ray["tasks"]}  # type: ignore[attr-defined]
    assert attempts["stats"] == 2
    assert {n for task, n in attempts.items() if task != "stats"} == {1}

    # And the run branch has the local run's tree and the same commits, one per task titled
    # as the task (in the order they merged, which parallel tasks decide by finishing first)
    assert git(remote, "rev-parse", f"{on_ray['branch']}^{{tree}}") == expected.tree
    assert sorted(subjects(remote, base, str(on_ray["branch"]))) == sorted(expected.subjects)
    assert len(expected.subjects) == 9

    # And the attempts ran on the worker nodes, not here: their logs came back from there
    logs = list((remote / ".git" / "orchardist" / "logs").rglob("*.log"))
    assert any(b"passed" in log.read_bytes() for log in logs)
    node_caches = [
        node.root / "work" / "ray"
        for node in cluster.nodes.values()
        if (node.root / "work" / "ray").is_dir()
    ]
    assert node_caches, "no worker node made a repository cache"

    # And the user's checkout is untouched
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=remote, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""


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


def test_a_worker_node_killed_mid_attempt_costs_a_retry_and_nothing_else(
    cluster: RayCluster, tmp_path: Path, repo: Path
) -> None:
    # Given a third worker node (the other tests keep two), and a task whose first attempt
    # hangs on whichever node runs it
    cluster.add_worker()
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


def test_the_ray_executor_builds_from_a_runs_settings_on_a_cluster(
    cluster: RayCluster, repo: Path, tmp_path: Path
) -> None:
    # Given: [run] settings naming the cluster (the executor table's contract, see
    # tests/contracts/test_contract_executor.py)
    settings = RunConfig(executor="ray", ray_address=cluster.address)
    store = Store.in_memory()
    # When: the executor is built by its name
    executor = executor_class("ray").for_run(
        Repo(repo), tmp_path / "state", store, settings, time.time
    )
    # Then: it is an executor, and closes with nothing submitted
    assert callable(executor.submit) and callable(executor.cancel)
    executor.close()
    store.close()


RACING_AGENT = """\
import os, pathlib, socket, sys

# Both candidates report to the test; candidate 0 does the task when the test says so,
# candidate 1 hangs until its process is killed.
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.sendall(os.environ["ORCHARDIST_CANDIDATE"].encode() + b"\\n")
sock.recv(1)
pathlib.Path("done.txt").write_text("done\\n")
"""


def test_a_first_wins_round_kills_the_loser_on_its_node(
    cluster: RayCluster, tmp_path: Path, repo: Path
) -> None:
    # Given a task with two candidates, the first to pass wins, on the cluster
    folder = Path(tempfile.mkdtemp(prefix="ort-sock", dir="/var/tmp"))
    address = folder / "s"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(address))
    listener.listen(2)
    listener.settimeout(START_S)
    (repo / "agent.py").write_text(RACING_AGENT)
    (repo / "plan.toml").write_text(
        textwrap.dedent(
            f"""\
            [run]
            executor = "ray"
            candidates = 2
            select = "first"
            [agents.race]
            kind = "shell"
            command = "python agent.py {address}"
            timeout = "5m"
            [[task]]
            id = "one"
            title = "Write done.txt"
            prompt = "Write done.txt"
            agent = "race"
            verify = "test -f done.txt"
            """
        )
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the plan")
    base = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "run.out"
    proc = spawn(repo, "run", "plan.toml", "--json", "--ray-address", cluster.address, log=out)
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(shutil.rmtree, folder, True)
            stack.callback(listener.close)
            readers = {}
            for _ in range(2):  # both candidates are under way
                conn, _ = listener.accept()
                stack.enter_context(conn)
                conn.settimeout(START_S)
                reader = stack.enter_context(conn.makefile("rb"))
                readers[reader.readline().strip()] = (conn, reader)
            assert sorted(readers) == [b"0", b"1"]

            # When candidate 0 finishes and passes
            readers[b"0"][0].sendall(b"go")

            # Then candidate 1's agent is killed on its node (its end of the socket closed)
            assert readers[b"1"][1].read(1) == b""
            assert proc.wait(timeout=RUN_S) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    doc = json.loads(out.read_text()[out.read_text().index("{") :])
    (task,) = doc["tasks"]
    by_candidate = {a["candidate"]: a["state"] for a in task["attempts"]}
    assert by_candidate[0] == "merged", task["attempts"]
    assert by_candidate[1] == "cancelled", task["attempts"]
    assert git(repo, "rev-list", "--count", f"{base}..{doc['branch']}") == "1"
    assert processes_with_env("ORCHARDIST_RUN", doc["run"]) == set()


def test_doctor_checks_every_worker_node_of_the_cluster(
    cluster: RayCluster, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a plan whose shell profile needs nothing, and one whose claude profile needs its CLI
    # and a key that no node has
    fine = repo / "fine.toml"
    fine.write_text(
        '[agents.sh]\nkind = "shell"\ncommand = "true"\n'
        '[[task]]\nid = "a"\ntitle = "A"\nprompt = "p"\nagent = "sh"\n'
    )
    needy = repo / "needy.toml"
    needy.write_text(
        '[agents.c]\nkind = "claude"\n[[task]]\nid = "a"\ntitle = "A"\nprompt = "p"\nagent = "c"\n'
    )
    flags = ["--executor", "ray", "--ray-address", cluster.address, "--json"]

    # When doctor checks the cluster for each
    fine_code = main(["doctor", str(fine), *flags])
    fine_report = json.loads(capsys.readouterr().out)
    needy_code = main(["doctor", str(needy), *flags])
    needy_report = json.loads(capsys.readouterr().out)

    # Then every live worker node answered: git found, orchardist's version, no problem
    alive = [n for n in cluster.nodes.values() if n.alive and n.name != "head"]
    assert fine_code == 0, fine_report
    assert len(fine_report["nodes"]) == len(alive), fine_report
    assert all(node["git"] and not node["problems"] for node in fine_report["nodes"])

    # And the claude profile's missing CLI or key is a problem on each node: exit 1
    assert needy_code == 1
    assert len(needy_report["nodes"]) == len(alive), needy_report
    assert all(node["problems"] for node in needy_report["nodes"])


def test_a_node_that_dies_while_doctor_asks_it_is_reported_lost_not_a_crash() -> None:
    # Given: Ray listed two nodes as alive, and one died before its report could be scheduled
    # (its heartbeats had not yet timed out: what a loaded CI machine showed)
    pytest.importorskip("ray")
    from ray.exceptions import TaskUnschedulableError

    from orchardist.executors.ray import _answers

    class Answering:
        def get(self, task: object, timeout: float) -> dict[str, object]:
            if task == "dead":
                raise TaskUnschedulableError("The node specified ... doesn't exist any more")
            return {"node": "n1", "problems": []}

    nodes = [{"NodeID": "n1" * 20}, {"NodeID": "n2" * 20}]

    # When the answers are collected
    reports, lost = _answers(Answering(), nodes, ["fine", "dead"])

    # Then the live node's report is kept and the dead one is named as lost
    assert reports == [{"node": "n1", "problems": []}]
    assert [entry["node"] for entry in lost] == ["n2" * 20]
    assert "exist" in lost[0]["error"]


KNOWN_FAILURE = """\
import os, subprocess, tempfile

def test_known_failure():
    # Fails everywhere; a run on a base leaves a file naming the base commit.
    if os.environ.get("ORCHARDIST_PHASE") == "baseline":
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        fd, _ = tempfile.mkstemp(prefix=f"base.{{head}}.", dir={evidence!r})
        os.write(fd, os.getcwd().encode())
        os.close(fd)
    assert False, "known to fail on the base"
"""


def test_a_baseline_runs_once_per_base_commit_on_the_whole_cluster(
    cluster: RayCluster, repo: Path, tmp_path: Path
) -> None:
    # Given four tasks launched together on one base, each verified by a pytest suite whose
    # one test already fails on the base (so every attempt asks for the base's results)
    evidence = Path(tempfile.mkdtemp(prefix="baselines-", dir=cluster.shared))
    (repo / "test_known.py").write_text(KNOWN_FAILURE.format(evidence=str(evidence)))
    tasks = "".join(
        f'[[task]]\nid = "t{n}"\ntitle = "T{n}"\nprompt = "p"\nagent = "edit"\n' for n in range(4)
    )
    (repo / "plan.toml").write_text(
        textwrap.dedent(
            f"""\
            [run]
            executor = "ray"
            max_parallel = 4
            verify = "python -m pytest -q -p no:cacheprovider test_known.py"
            [agents.edit]
            kind = "shell"
            command = "echo {{task}} > {{task}}.txt && pwd > {evidence}/agent.{{task}}"
            timeout = "5m"
            """
        )
        + tasks
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the plan")
    base = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "run.out"

    # When it runs on the cluster
    proc = spawn(repo, "run", "plan.toml", "--json", "--ray-address", cluster.address, log=out)
    try:
        assert proc.wait(timeout=RUN_S) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # Then the first attempts ran on more than one node (two CPUs each, four at once)
    nodes = {cluster.node_of(Path(f.read_text().strip())) for f in evidence.glob("agent.*")}
    assert len(nodes) >= 2, nodes

    # And the base's suite ran once for all of them, and every base commit once
    runs: dict[str, int] = {}
    for f in evidence.glob("base.*"):
        commit = f.name.split(".")[1]
        runs[commit] = runs.get(commit, 0) + 1
    assert runs.get(base) == 1, runs
    assert set(runs.values()) == {1}, runs

    # And the run merged the four tasks, each once
    doc = json.loads(out.read_text()[out.read_text().index("{") :])
    assert {t["state"] for t in doc["tasks"]} == {"done"}, doc["tasks"]
    assert git(repo, "rev-list", "--count", f"{base}..{doc['branch']}") == "4"


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


def test_a_profiles_cpus_memory_and_cap_hold_on_the_cluster(
    cluster: RayCluster, repo: Path, tmp_path: Path
) -> None:
    # Given two tasks of a profile asking two CPUs and 64 MiB per attempt, capped at one attempt
    # at once (two nodes of two CPUs could run both), and a task whose profile asks more CPUs
    # than any node has
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


def test_kill_9_of_the_orchestrator_then_resume_loses_nothing_and_merges_nothing_twice(
    cluster: RayCluster, repo: Path, tmp_path: Path
) -> None:
    # Given a run on the cluster: one task merged, two more whose first attempts hang on nodes
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
