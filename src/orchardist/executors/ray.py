"""Run attempts on a Ray cluster (``[run] executor = "ray"``): only where an attempt runs changes.

The orchestrator (the Ray driver, on the head) keeps the scheduler, the oracle, the store and
the merge train. Per job it sends one Ray task to a worker node, which:

1. makes sure its cache (a bare repository in ``<workdir root>/ray/<repo key>/cache.git``)
   has the job's commits: the head sends each commit as a git bundle put in Ray's object
   store once; a node pulls a bundle only when its cache lacks the commit, so each travels
   once per node (the run's first base in full, later bases as increments on top of it);
2. runs the job with the local executor's own code (:class:`LocalExecutor`: its attempt
   folders, process control, sandbox, verify and snapshot) on that cache;
3. sends back the outcome, the patch commit as a bundle (the very commit: new, deleted,
   renamed, binary files and modes are what git recorded), and the log, capped.

Failures are orchardist's to judge: Ray's task retries are off. A task whose worker or node
died is the attempt's ``infra_error`` (the scheduler retries it by its usual budget). A
cancelled job's task gets Ray's cancel, which the node turns into the local executor's cancel:
the attempt's whole process tree ends there. See docs/ray.md. The node's side is
:mod:`.raynode`'s; reaching the cluster :mod:`.rayconnect`'s.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..confine.layout import Layout
from ..confine.paths import repo_key, workdir_root
from ..errors import GitError
from ..git.repo import Repo
from ..specs import RunConfig
from ..state.agentrecords import NUM_CPUS, AgentProfile, Failure
from ..state.records import AttemptState
from ..state.store import MEMORY, Store
from ..verify.oracle import looks_like_pytest
from . import AttemptJob, Job, Notify, Outcome, Phase, Stacker
from .rayconnect import connect, first_line, import_ray
from .raynode import (
    LOST_GRACE_S,
    BaselineBoard,
    Bundle,
    NodeJob,
    NodeResult,
    bundle_bytes,
    kill_marked,
    kill_run,
    run_on_node,
)

DOCTOR_TIMEOUT_S = 120.0  # for every node to answer doctor --executor ray


# -- on the worker node ------------------------------------------------------------------------


def resources(job: Job) -> dict[str, float]:
    """What the job's Ray task asks for: its profile's ``num_cpus`` and ``memory_mb``; one CPU
    for a job without a profile (a merge's verification)."""
    profile = job.profile if isinstance(job, AttemptJob) else None
    needs = {"num_cpus": profile.num_cpus if profile is not None else NUM_CPUS}
    if profile is not None and profile.memory_mb is not None:
        needs["memory"] = float(int(profile.memory_mb * 1024 * 1024))
    return needs


def _amount(kind: str, value: float) -> str:
    return f"{value / 1024 / 1024:g} MiB" if kind == "memory" else f"{value:g}"


def job_nodes(nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live nodes that may run a job: those with CPUs (every job holds at least one, the
    profile's ``num_cpus`` being positive). A kill sent to a node without CPUs, such as a head
    started with ``--num-cpus 0``, would start a Python worker there for nothing."""
    return [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU")]


def may_ask_baselines(job: Job) -> bool:
    """Whether a job's verification may ask a baseline: it has a check (judged on its base
    first), or tests found for it, or a verify command that runs pytest, and a commit to judge
    them against. A failing command that runs no pytest fails whatever the base did (the
    verifier does not ask: its ``_base``), so a run of such commands needs no board."""
    if isinstance(job, AttemptJob):
        if job.check and (job.check_baseline or job.baseline):
            return True
        if job.auto_verify and job.baseline:
            return True
    return bool(job.baseline) and any(looks_like_pytest(command) for command in job.verify)


def reclaim(address: str, run_id: str) -> int:
    """Kill the run's processes on every node of the cluster at ``address`` that may run a job
    (``resume`` after the orchestrator died: Ray ends a dead driver's tasks in its own time);
    how many."""
    ray = import_ray()
    connect(ray, address)
    try:
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        killer = ray.remote(max_retries=0)(kill_run)
        tasks = [
            killer.options(
                num_cpus=0,
                scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(
                    node["NodeID"], soft=False
                ),
            ).remote(run_id)
            for node in job_nodes(ray.nodes())
        ]
        killed = 0
        for task in tasks:
            with contextlib.suppress(ray.exceptions.RayError):  # a node that died meanwhile
                killed += int(ray.get(task, timeout=DOCTOR_TIMEOUT_S))
        return killed
    finally:
        ray.shutdown()


# -- on the head -------------------------------------------------------------------------------


class RayExecutor:
    """Jobs as Ray tasks on a cluster's worker nodes; patches come back into the repository."""

    def __init__(
        self,
        repo: Repo,
        state_dir: Path,
        settings: RunConfig,
        clock: Callable[[], float] = time.time,
        address: str = "auto",
        store_path: Path | None = None,
    ) -> None:
        self.ray = import_ray()
        self.repo = repo
        self.settings = settings
        self.clock = clock
        self.log_root = Path(state_dir) / "logs"
        self.identity = Layout(repo, workdir_root(), Path(state_dir)).identity()
        self.repo_key = repo_key(repo.common_dir)
        self._owns_connection = not self.ray.is_initialized()
        if self._owns_connection:
            connect(self.ray, address)
        self._remote = self.ray.remote(max_retries=0, retry_exceptions=False)(run_on_node)
        self._killer = self.ray.remote(max_retries=0)(kill_marked)
        self._store_path = store_path
        self._board: Any = None  # the run's BaselineBoard, started when a job may ask it
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self.stacker: Stacker | None = None  # unused: a node verifies on the attempt's base
        self._markers: dict[str, str] = {}  # job id -> its processes' marker
        self._tasks: dict[str, Any] = {}  # job id -> its Ray task (ObjectRef)
        self._cancelled: dict[str, str] = {}  # job id -> reason
        self._bundles: dict[str, Bundle] = {}  # commit -> its bundle, put once
        self._root: str | None = None  # the first base: later ones travel as increments on it
        self._capacity: list[dict[str, float]] = []  # each live node's resources, last seen
        self.nodes_used: dict[str, set[str]] = {}  # node id -> commits it fetched (for tests)

    @classmethod
    def for_run(
        cls,
        repo: Repo,
        state_dir: Path,
        store: Store,
        settings: RunConfig,
        clock: Callable[[], float],
    ) -> RayExecutor:
        """The executor ``[run] executor = "ray"`` asks for, on ``settings.ray_address``."""
        on_disk = str(store.path) != MEMORY
        return cls(
            repo, state_dir, settings, clock, settings.ray_address, store.path if on_disk else None
        )

    def _board_for(self, job: Job) -> Any:
        """The run's BaselineBoard for a job that may ask a baseline, started on this node (it
        opens the store here, holding no CPU) the first time one does; None for a job that
        cannot: an actor is a Python worker process on the head, ~1 s of CPU to start."""
        if not may_ask_baselines(job):
            return None
        with self._lock:
            if self._board is None:
                strategies = importlib.import_module("ray.util.scheduling_strategies")
                here = self.ray.get_runtime_context().get_node_id()
                actor = self.ray.remote(BaselineBoard).options(
                    num_cpus=0,
                    max_restarts=0,
                    scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(here, soft=False),
                )
                self._board = actor.remote(str(self._store_path) if self._store_path else None)
            return self._board

    def submit(self, job: Job, notify: Notify) -> None:
        """Start the job's thread, which sends it to the cluster and waits for it."""
        thread = threading.Thread(
            target=self._main, args=(job, notify), name=f"ray-{job.id}", daemon=True
        )
        with self._lock:
            self._threads[job.id] = thread
            self._markers[job.id] = job.marker
        thread.start()

    def cancel(self, job_id: str, reason: str) -> None:
        """Cancel a job: its node ends the attempt's process trees; unknown jobs are ignored."""
        with self._lock:
            if job_id not in self._threads:
                return
            self._cancelled.setdefault(job_id, reason)
            task = self._tasks.get(job_id)
        if task is not None:
            with contextlib.suppress(Exception):  # a task that already ended
                self.ray.cancel(task, force=False)
            # Ray's cancel does not reach a task blocked in a wait: the attempt's processes
            # are ended by their marker on every node, as the local executor ends them.
            self._kill_everywhere(self._markers[job_id])

    def _kill_everywhere(self, marker: str) -> None:
        """Kill the processes carrying ``marker`` on every node that may run a job (does not
        wait)."""
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        with contextlib.suppress(Exception):  # a node that just died has nothing left
            for node in job_nodes(self.ray.nodes()):
                pinned = strategies.NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                self._killer.options(num_cpus=0, scheduling_strategy=pinned).remote(marker)

    def close(self) -> None:
        """Wait for every job's thread; disconnect when this executor connected."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join()
        if self._owns_connection:
            self.ray.shutdown()

    def log_path(self, run_id: str, job_id: str) -> Path:
        """Where a job's log (as its node sent it) is kept on the head."""
        return self.log_root / run_id / f"{job_id}.log"

    # -- one job -------------------------------------------------------------------------

    def _main(self, job: Job, notify: Notify) -> None:
        started = self.clock()
        log = self.log_path(job.run_id, job.id)
        try:
            outcome = self._run(job, notify, started, log)
        except Exception as exc:  # the scheduler must hear back whatever happens
            outcome = self._failed(job, started, log, f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._threads.pop(job.id, None)
                self._tasks.pop(job.id, None)
                self._markers.pop(job.id, None)
                reason = self._cancelled.pop(job.id, None)
        if reason is not None and outcome.state is not AttemptState.PASSED:
            outcome = replace(outcome, state=AttemptState.CANCELLED, failure=None, detail=reason)
        notify(outcome)

    def _run(self, job: Job, notify: Notify, started: float, log: Path) -> Outcome:
        errors = self.ray.exceptions
        needs = resources(job)
        short = self._unplaceable(needs)
        if short:
            return self._failed(job, started, log, short)
        bundles = self._bundles_for(job)
        board = self._board_for(job)
        spec = NodeJob(job, self.repo_key, self.identity, self.settings, bundles, board=board)
        with self._lock:
            if job.id in self._cancelled:
                return Outcome(job, AttemptState.CANCELLED, started, self.clock(), log_path="")
            task = self._remote.options(name=f"orchardist-{job.id}", **needs).remote(spec)
            self._tasks[job.id] = task
        try:
            result: NodeResult = self.ray.get(task, timeout=job.timeout_s + LOST_GRACE_S)
        except errors.TaskCancelledError:
            return Outcome(job, AttemptState.CANCELLED, started, self.clock(), log_path=str(log))
        except errors.GetTimeoutError:
            with contextlib.suppress(Exception):
                self.ray.cancel(task, force=True)
            detail = f"its Ray task did not report within {job.timeout_s + LOST_GRACE_S:g}s"
            return self._failed(job, started, log, detail)
        except errors.RayTaskError as exc:  # orchardist's code raised on the node
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            detail = f"on its Ray node: {type(cause).__name__}: {cause}"
            return self._failed(job, started, log, detail)
        except errors.RayError as exc:  # its worker process or its node died
            detail = f"lost on the Ray cluster: {type(exc).__name__}: {first_line(exc)}"
            return self._failed(job, started, log, detail)
        with self._lock:
            self.nodes_used.setdefault(result.node, set()).update(result.fetched)
        log.parent.mkdir(parents=True, exist_ok=True)
        held = ", ".join(f"{k} {_amount(k, v)}" for k, v in sorted(result.held.items()))
        where = f"orchardist: ran on Ray node {result.node[:8]} holding {held or 'nothing'}\n"
        log.write_bytes(where.encode() + result.log)
        outcome = replace(result.outcome, job=job, log_path=str(log))
        if outcome.patch_commit and result.patch:
            self._receive(job, outcome.patch_commit, result.patch)
        if outcome.verdict or (isinstance(job, AttemptJob) and job.stage):
            notify(Phase(job, "verifying"))  # it happened on the node; heard of only now
        return outcome

    def _unplaceable(self, needs: dict[str, float]) -> str:
        """Why no live node could ever hold an attempt asking ``needs`` ("" when one can):
        Ray would keep such a task pending for good."""
        wanted = {"CPU": needs["num_cpus"], "memory": needs.get("memory", 0.0)}

        def fits(nodes: list[dict[str, float]]) -> bool:
            return any(all(have.get(k, 0.0) >= v for k, v in wanted.items()) for have in nodes)

        if fits(self._capacity):  # as the cluster was at the last look: no call per job
            return ""
        try:
            alive = [n for n in self.ray.nodes() if n.get("Alive")]
        except Exception:  # the GCS will say so again when the task is sent
            return ""
        self._capacity = [dict(n.get("Resources", {})) for n in alive]
        if fits(self._capacity):
            return ""
        asked = ", ".join(f"{k} {_amount(k, v)}" for k, v in wanted.items() if v)
        return (
            f"no live node of the Ray cluster has {asked} for this attempt (the profile's"
            " num_cpus and memory_mb)"
        )

    def _failed(self, job: Job, started: float, log: Path, detail: str) -> Outcome:
        return Outcome(
            job,
            AttemptState.FAILED,
            started,
            self.clock(),
            Failure.INFRA_ERROR,
            detail,
            log_path=str(log),
        )

    def _receive(self, job: Job, commit: str, data: bytes) -> None:
        """Put the node's patch commit into the repository, under the job's ref."""
        with tempfile.NamedTemporaryFile(dir=self.repo.common_dir, suffix=".bundle") as fh:
            fh.write(data)
            fh.flush()
            self.repo.git("bundle", "unbundle", fh.name)
        if self.repo.try_rev_parse(commit) != commit:
            raise GitError(f"the patch bundle from the node lacks commit {commit}")
        self.repo.set_ref(f"refs/orchardist/runs/{job.run_id}/{job.id}", commit)

    def _bundles_for(self, job: Job) -> tuple[Bundle, ...]:
        """The bundles a node needs for the job's commits, each put in the object store once."""
        commits = [job.base_commit, job.start, job.baseline]
        wanted: list[Bundle] = []
        with self._lock:
            for commit in dict.fromkeys(c for c in commits if c):
                if self._root is None:
                    self._root = commit
                root = self._root
                increment = commit != root and self.repo.is_ancestor(root, commit)
                if increment and root not in self._bundles:
                    self._bundles[root] = self._put(root, None)
                if commit not in self._bundles:
                    self._bundles[commit] = self._put(commit, root if increment else None)
                bundle = self._bundles[commit]
                if bundle.prerequisite is not None:
                    wanted.append(self._bundles[bundle.prerequisite])
                wanted.append(bundle)
        return tuple(dict.fromkeys(wanted))

    def _put(self, commit: str, since: str | None) -> Bundle:
        data = bundle_bytes(self.repo.common_dir, commit, [since] if since else [])
        return Bundle(commit, [self.ray.put(data)], since)


# -- doctor --executor ray ---------------------------------------------------------------------


def node_report(profiles: Sequence[AgentProfile]) -> dict[str, Any]:
    """What a worker node has for the plan (a Ray task's body): git, orchardist, each profile."""
    from .. import __version__
    from ..agents.doctor import check_profile

    ray = import_ray()
    git = shutil.which("git")
    checked = [check_profile(profile) for profile in profiles]
    problems = [] if git else ["`git` not found on PATH"]
    problems += [f"{r.name}: {m}" for r in checked for m in r.missing]
    return {
        "node": str(ray.get_runtime_context().get_node_id()),
        "host": socket.gethostname(),
        "orchardist": __version__,
        "git": git,
        "workdir_root": str(workdir_root()),
        "problems": problems,
    }


def check_cluster(address: str, profiles: Sequence[AgentProfile]) -> dict[str, Any]:
    """Connect to the cluster and ask every live node with CPUs what it has for the plan."""
    from .. import __version__

    ray = import_ray()
    connect(ray, address)
    try:
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        remote = ray.remote(max_retries=0)(node_report)
        nodes = job_nodes(ray.nodes())
        tasks = [
            remote.options(
                num_cpus=0,
                scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(
                    n["NodeID"], soft=False
                ),
            ).remote(list(profiles))
            for n in nodes
        ]
        reports, lost = _answers(ray, nodes, tasks)
    finally:
        ray.shutdown()
    problems = [] if reports else ["no live worker node with CPUs: attempts could not start"]
    for report in reports:
        if report["orchardist"] != __version__:
            report["problems"].append(
                f"orchardist {report['orchardist']} on the node, {__version__} here"
            )
        problems += [f"node {report['host']} {report['node'][:8]}: {p}" for p in report["problems"]]
    return {"address": address, "nodes": reports, "lost": lost, "problems": problems}


def _answers(
    ray: Any, nodes: Sequence[dict[str, Any]], tasks: Sequence[Any]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Each node's report; a node that died while it was being asked (Ray still listed it as
    alive: its heartbeats had not yet timed out) is lost, not a crash of the whole check."""
    exceptions = importlib.import_module("ray.exceptions")
    reports: list[dict[str, Any]] = []
    lost: list[dict[str, str]] = []
    deadline = time.monotonic() + DOCTOR_TIMEOUT_S
    for node, task in zip(nodes, tasks, strict=True):
        try:
            reports.append(ray.get(task, timeout=max(0.0, deadline - time.monotonic())))
        except exceptions.GetTimeoutError:
            raise
        except exceptions.RayError as exc:
            lost.append({"node": str(node["NodeID"]), "error": first_line(exc)})
    return reports, lost


def render_cluster(report: dict[str, Any]) -> str:
    """The cluster report for a person."""
    lines = [f"Ray cluster at {report['address']}: {len(report['nodes'])} worker node(s)"]
    for node in report["nodes"]:
        state = "ok" if not node["problems"] else "PROBLEMS"
        lines.append(f"  {node['host']} {node['node'][:8]}: {state} (git {node['git'] or '-'})")
        lines += [f"    - {p}" for p in node["problems"]]
    for node in report.get("lost", []):
        lines.append(f"  {node['node'][:8]}: lost while being checked ({node['error']})")
    if not report["nodes"]:
        lines += [f"  - {p}" for p in report["problems"]]
    return "\n".join(lines)


__all__ = ["NodeJob", "NodeResult", "RayExecutor", "import_ray", "run_on_node"]
