"""A real local Ray cluster for tests: a head with no CPUs and worker nodes on 127.0.0.1.

Each node is a ``ray start --block`` in its own session, with its own attempt root
(``ORCHARDIST_WORKDIR_ROOT``) so that the nodes' caches are as separate as on two machines, and
a marker variable every process of the cluster inherits: teardown kills the sessions and then
whatever still carries the marker, so nothing of the cluster survives a test run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from orchardist.confine.procs import kill_by_env
from support import processes_with_env

CLUSTER_VAR = "ORCHARDIST_TEST_RAY_CLUSTER"
NODE_VAR = "ORCHARDIST_TEST_RAY_NODE"
START_TIMEOUT_S = 180.0
NODE_START_RETRIES = 1  # a node's ray start once more after Ray gave up waiting for it
RAY_GAVE_UP = "timed out during startup"  # ray start's words when it did
# Ray's own settings (RAY_<name> overrides the default of src/ray/common/ray_config_def.h), the
# same on every node, for a cluster that notices a killed node in seconds:
# - the GCS checks each node every 500 ms instead of 3 s: a killed node refuses the check at once
#   and is marked dead after 5 failed checks in a row, ~2.5 s instead of ~15 s (~30 s on a loaded
#   machine), while Ray still places tasks there and lists it alive. A live node that is merely
#   slow is not marked dead: each check still waits 10 s for its answer.
# - a node pulling an object retries the pull after 1 s instead of 10 s: a retried attempt's
#   bundle whose copy Ray chose to pull was on the dead node cost its retry 10 s (every other
#   time, measured: the source is picked at random among the object's copies).
# - no metrics collected or exported (nobody scrapes them here).
# - Ray's workers, and so the attempts they start (agents, verify commands, git), at niceness 0
#   instead of Ray's 15: the rest of the suite runs beside this cluster at 0, and Linux gives a
#   process at 15 a weight of 36 against 1024 at 0, so while both cores were busy the Ray tests,
#   which bound the suite's time, were the last to get CPU.
# - a raylet starts one Python worker at a time, not as many as it has CPUs: for a job's first
#   task Ray started workers for every CPU of the node at once (measured: two on a node of two
#   CPUs for a driver with one task), ~0.75 s of CPU each, and a run's workers end with it: a
#   run with fewer tasks on a node than it has CPUs started workers that ran nothing. A second
#   task on the node waits for the first worker to register.
RAY_SETTINGS = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "5",
    "RAY_health_check_timeout_ms": "10000",
    "RAY_object_manager_pull_timeout_ms": "1000",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_enable_metrics_collection": "0",
    "RAY_worker_niceness": "0",
    "RAY_worker_maximum_startup_concurrency": "1",
}


KEPT_LOGS = ("gcs_server.*", "raylet*", "*agent*", "ray_process_exit.log")  # what stop() keeps


def ray_available() -> bool:
    """Whether Ray is installed in this interpreter's environment."""
    return shutil.which("ray", path=str(Path(sys.executable).parent)) is not None


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(count: int) -> list[int]:
    """``count`` different free ports: each socket stays bound until all are chosen (a port
    asked for alone, then released, may be handed out again by the next ask: Ray refuses to
    start a node whose components were given the same port)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[str]
    root: Path  # its ORCHARDIST_WORKDIR_ROOT
    alive: bool = True


@dataclass
class RayCluster:
    """Start with :meth:`start`; always :meth:`stop`."""

    folder: Path
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    port: int = field(default_factory=_free_port)
    nodes: dict[str, Node] = field(default_factory=dict)
    temp: Path | None = None  # Ray's session folder

    @property
    def shared(self) -> Path:
        """A folder every node's attempts may write to (ORCHARDIST_SHARE_WRITABLE): evidence."""
        return self.folder / "shared"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, workers: int = 2, cpus_per_worker: int = 2) -> None:
        """The head, then the worker nodes, each up when ``ray start`` says so."""
        temp = self.temp = Path(tempfile.mkdtemp(prefix="ort", dir="/tmp"))  # short socket paths
        self.shared.mkdir(parents=True, exist_ok=True)
        self._start(
            "head",
            [
                "--head",
                f"--port={self.port}",
                "--num-cpus=0",
                f"--temp-dir={temp}",
                f"--dashboard-port={_free_port()}",
                "--include-dashboard=false",
                # the autoscaler's monitor, a Python process polling the GCS every few seconds:
                # this cluster has no autoscaler (ray start's hidden flag)
                "--no-monitor",
            ],
        )
        for n in range(1, workers + 1):
            self._start(
                f"worker{n}", [f"--address={self.address}", f"--num-cpus={cpus_per_worker}"]
            )

    def add_worker(self, cpus: int = 2) -> str:
        """One more worker node; returns its name."""
        name = f"worker{len(self.nodes)}"
        self._start(name, [f"--address={self.address}", f"--num-cpus={cpus}"])
        return name

    def node_of(self, path: Path) -> str:
        """The node whose attempt root holds ``path``."""
        for node in self.nodes.values():
            if path.is_relative_to(node.root):
                return node.name
        raise AssertionError(f"{path} is on no node of the cluster")

    def _start(self, name: str, args: list[str]) -> None:
        """Start a node; once more if Ray gave up waiting for it to register (on a machine
        running two suites at once the head can take over 30 s, Ray's fixed wait, to answer)."""
        root = self.folder / name
        (root / "home").mkdir(parents=True)
        for retries_left in reversed(range(NODE_START_RETRIES + 1)):
            proc, seen = self._ray_start(name, root, args)
            if proc is not None:
                self.nodes[name] = Node(name, proc, root)
                _drain(proc, (self.folder / f"{name}.out").open("w"))
                return
            if retries_left == 0 or not any(RAY_GAVE_UP in line for line in seen):
                raise RuntimeError(f"ray node {name} did not start:\n{''.join(seen[-40:])}")

    def _ray_start(
        self, name: str, root: Path, args: list[str]
    ) -> tuple[subprocess.Popen[str] | None, list[str]]:
        """``ray start`` of one node: its process once up, or None and what it printed (what
        it left running is killed)."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GIT_", "RAY_", "ORCHARDIST_"))
        }
        env.update(
            HOME=str(root / "home"),
            PATH=env.get("PATH", "/usr/bin:/bin"),  # python without pytest's plugins: conftest
            **RAY_SETTINGS,
            ORCHARDIST_WORKDIR_ROOT=str(root / "work"),
            ORCHARDIST_SHARE_WRITABLE=str(self.shared),
            PYTHONDONTWRITEBYTECODE="1",
            **{CLUSTER_VAR: self.marker, NODE_VAR: f"{self.marker}-{name}"},
        )
        components = (
            "node-manager",
            "object-manager",
            "metrics-export",
            "dashboard-agent-listen",
            "dashboard-agent-grpc",
            "runtime-env-agent",
        )
        chosen = _free_ports(len(components))
        ports = [f"--{c}-port={port}" for c, port in zip(components, chosen, strict=True)]
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--block",
                "--node-ip-address=127.0.0.1",
                "--disable-usage-stats",
                # the log monitor sends workers' output to drivers: orchardist's driver asks
                # for none (log_to_driver=False), and it is a process per node polling files
                "--include-log-monitor=false",
                *ports,
                *args,
            ],
            env=env,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        seen = []
        # ray start prints this once the node is registered; a blocking read, no polling.
        for line in proc.stdout:
            seen.append(line)
            if "Ray runtime started" in line:
                return proc, seen
        proc.stdout.close()
        proc.wait(timeout=60)
        kill_by_env(NODE_VAR, f"{self.marker}-{name}", grace_s=0)
        return None, seen

    def kill_node(self, name: str) -> None:
        """SIGKILL a node's processes, as a machine that loses power."""
        node = self.nodes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        kill_by_env(NODE_VAR, f"{self.marker}-{name}", grace_s=0)
        node.proc.wait(timeout=60)
        node.alive = False

    def _keep_logs(self) -> None:
        """Copy what the GCS and the raylets logged (which node was marked dead, and why) into
        the cluster's folder, which pytest keeps after the session: a failure can be read."""
        assert self.temp is not None
        kept = self.folder / "ray-logs"
        for session in self.temp.glob("session_2*"):
            for pattern in KEPT_LOGS:
                for log in (session / "logs").glob(pattern):
                    kept.mkdir(exist_ok=True)
                    with contextlib.suppress(OSError):
                        shutil.copy2(log, kept / log.name)

    def processes_of(self, name: str) -> set[int]:
        """Live processes of one node (its Ray workers among them)."""
        return processes_with_env(NODE_VAR, f"{self.marker}-{name}")

    def leftovers(self) -> set[int]:
        """Live processes of the cluster."""
        return processes_with_env(CLUSTER_VAR, self.marker)

    def stop(self) -> None:
        """End every node (a test cluster keeps nothing: SIGKILL to their sessions), then kill
        whatever still carries the marker, and remove the session folder."""
        for node in reversed(self.nodes.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait(timeout=60)
        kill_by_env(CLUSTER_VAR, self.marker, grace_s=0)
        if self.temp is not None:
            self._keep_logs()
            shutil.rmtree(self.temp, ignore_errors=True)
        for node in self.nodes.values():
            if node.proc.stdout is not None:
                node.proc.stdout.close()


def _drain(proc: subprocess.Popen[str], log: object) -> None:
    """Keep reading a node's output into its log file (a full pipe would stall the node)."""
    import threading

    def pump() -> None:
        assert proc.stdout is not None
        with contextlib.suppress(ValueError, OSError), log:  # type: ignore[attr-defined]
            for line in proc.stdout:
                log.write(line)  # type: ignore[attr-defined]
                log.flush()  # type: ignore[attr-defined]

    threading.Thread(target=pump, daemon=True).start()
