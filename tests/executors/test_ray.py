"""The Ray executor on a real local cluster: a head with no CPUs and two worker nodes.

The quickstart runs on it and must give the run branch the local executor gives: the same
tree, the same number of commits, the same subjects. Skipped only where Ray is not installed
and CI is not set (under CI it is part of the dev extra, and a missing Ray fails).
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
import time
from pathlib import Path

import pytest

from orchardist.cli import main
from orchardist.executors import executor_class
from orchardist.gitrepo import Repo
from orchardist.plan import RunConfig
from orchardist.procs import processes_with_env
from orchardist.store import Store
from ray_support import RUN_S, START_S, RayCluster, ray_available
from run_support import spawn
from support import git

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart"

pytestmark = pytest.mark.skipif(
    not ray_available() and not os.environ.get("CI"),
    reason="Ray is not installed (pip install -e '.[dev]' installs it)",
)


def quickstart_repo(folder: Path) -> Path:
    """The example as a repository of its own."""
    repo = folder / "quickstart"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "textkit 0.1.0")
    return repo


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    doc: dict[str, object] = json.loads(out)
    return doc


def subjects(repo: Path, since: str, branch: str) -> list[str]:
    return git(repo, "log", "--reverse", "--format=%s", f"{since}..{branch}").splitlines()


@pytest.mark.slow
def test_the_quickstart_on_a_two_node_cluster_gives_the_local_run_branch(
    cluster: RayCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the quickstart twice, `python` meaning this interpreter (it has pytest)
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    local = quickstart_repo(tmp_path / "local")
    remote = quickstart_repo(tmp_path / "ray")
    base = git(local, "rev-parse", "HEAD")
    remote_base = git(remote, "rev-parse", "HEAD")  # the same tree; its commit time may differ
    assert git(remote, "rev-parse", "HEAD^{tree}") == git(local, "rev-parse", "HEAD^{tree}")

    # When one runs with the local executor (an orchestrator of its own) and, meanwhile, the
    # other on the cluster
    local_out = tmp_path / "local.out"
    local_run = spawn(local, "run", "plan.toml", "--json", log=local_out)
    try:
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
        assert local_run.wait(timeout=RUN_S) == 0, local_out.read_text()
    finally:
        if local_run.poll() is None:
            os.killpg(local_run.pid, signal.SIGKILL)
            local_run.wait()
    text = local_out.read_text()
    on_local = json.loads(text[text.index("{") :])

    # Then both runs are done, stats retried once in each
    assert on_local["state"] == on_ray["state"] == "done"
    attempts = {t["id"]: len(t["attempts"]) for t in on_ray["tasks"]}  # type: ignore[attr-defined]
    assert attempts["stats"] == 2
    assert {n for task, n in attempts.items() if task != "stats"} == {1}

    # And the run branches have the same tree and the same commits, one per task (in the
    # order they merged, which parallel tasks decide by finishing first)
    tree = git(local, "rev-parse", f"{on_local['branch']}^{{tree}}")
    assert git(remote, "rev-parse", f"{on_ray['branch']}^{{tree}}") == tree
    local_subjects = subjects(local, base, str(on_local["branch"]))
    assert sorted(subjects(remote, remote_base, str(on_ray["branch"]))) == sorted(local_subjects)
    assert len(local_subjects) == 9

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


@pytest.mark.slow
def test_a_first_wins_round_kills_the_loser_on_its_node(
    cluster: RayCluster, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a task with two candidates, the first to pass wins, on the cluster
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
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


@pytest.mark.slow
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
    assert len(fine_report["nodes"]) == len(alive)
    assert all(node["git"] and not node["problems"] for node in fine_report["nodes"])

    # And the claude profile's missing CLI or key is a problem on each node: exit 1
    assert needy_code == 1
    assert len(needy_report["nodes"]) == len(alive)
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


@pytest.mark.slow
def test_a_baseline_runs_once_per_base_commit_on_the_whole_cluster(
    cluster: RayCluster, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given four tasks launched together on one base, each verified by a pytest suite whose
    # one test already fails on the base (so every attempt asks for the base's results)
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
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
