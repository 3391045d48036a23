"""The Executor seam's contract (test_contract_executor.py) run against the Ray executor, on a
real local cluster: a head with no CPUs and one worker node (tests/ray_support.py).

Slow: the cluster takes seconds to start, and each test's executor connects to it as a driver.
Where Ray is not installed the tests skip, and fail under CI (Ray is in the dev extra).
"""

from __future__ import annotations

import importlib
import os
import select
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_contract_executor import ExecutorContract, Heard, _job

from orchardist.confine.procs import MARKER_VAR
from orchardist.executors import Job
from orchardist.executors.ray import RayExecutor
from orchardist.git.repo import Repo
from orchardist.specs import RunConfig
from orchardist.state.agentrecords import AgentProfile
from orchardist.state.store import Store
from ray_support import RayCluster, ray_available
from realtools import require
from support import make_repo, processes_with_env

pytestmark = pytest.mark.slow

WAIT_S = 180.0  # for a job to start or end on the cluster (a loaded 2-core machine)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """One cluster for this file's tests, always torn down, nothing of it left running."""
    require(ray_available(), "Ray is not installed (pip install -e '.[dev]' installs it)")
    started = RayCluster(tmp_path_factory.mktemp("ray-contract"))
    try:
        started.start(workers=1, cpus_per_worker=4)
        yield started
    finally:
        started.stop()
    assert started.leftovers() == set()


class RayHarness:
    """Jobs as Ray tasks on the cluster's worker node; the test process is the Ray driver."""

    def __init__(self, cluster: RayCluster, tmp_path: Path) -> None:
        self.cluster = cluster
        self.head = cluster.processes_of("head")
        root = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
        self.repo = Repo(root)
        self.base = self.repo.rev_parse("HEAD")
        self.store = Store.in_memory()
        # The FIFO the long job's agent writes into lies in the folder every node may write to.
        self.fifo = cluster.shared / f"started-{uuid.uuid4().hex}"
        os.mkfifo(self.fifo)
        settings = RunConfig(executor="ray", ray_address=cluster.address, sandbox=False)
        self.executor = RayExecutor.for_run(
            self.repo, tmp_path / "state", self.store, settings, time.time
        )
        self.markers: list[str] = []

    def job(self, task_id: str, work: str, *, quick: bool = True) -> Job:
        command = f"echo {work} > done.txt"
        if not quick:  # says it started, then waits to be stopped
            command = f"echo started > {self.fifo} && exec sleep 600"
        job = _job(task_id, self.base, AgentProfile("sh", "shell", options={"command": command}))
        self.markers.append(job.marker)
        return job

    def started(self, job: Job) -> None:
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            readable, _, _ = select.select([fd], [], [], WAIT_S)
            assert readable, "the agent never started"
        finally:
            os.close(fd)

    def finish(self, heard: Heard, job_id: str) -> None:
        assert heard.done[job_id].wait(WAIT_S), f"{job_id} never reported"

    def actors(self) -> list[dict[str, object]]:
        """The actors Ray's GCS holds for this driver's job (none once a test closed the
        executor, which disconnected: asking then would start a local Ray)."""
        ray = importlib.import_module("ray")
        if not ray.is_initialized():
            return []
        job = ray.get_runtime_context().get_job_id()
        table = importlib.import_module("ray._private.state").actors()
        return [actor for actor in table.values() if actor["JobID"] == job]

    def close(self) -> None:
        actors = self.actors()
        self.executor.close()
        self.store.close()
        self.fifo.unlink(missing_ok=True)
        # Then, on every node: no process of these jobs is left (a cancel reached the node)
        for marker in self.markers:
            assert processes_with_env(MARKER_VAR, marker) == set()
        # And Ray holds no actor of this driver's job: these jobs ask no baseline, so the run's
        # baseline board never started; and the head (no CPUs) started no process for them
        # (a board or a kill is a Python worker there; a cancel goes to nodes with CPUs)
        assert actors == []
        assert self.cluster.processes_of("head") - self.head == set()


class TestRayExecutor(ExecutorContract):
    """The contract on the Ray executor."""

    @pytest.fixture
    def harness(self, cluster: RayCluster, tmp_path: Path) -> Iterator[RayHarness]:
        made = RayHarness(cluster, tmp_path)
        try:
            yield made
        finally:
            made.close()
