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
the attempt's whole process tree ends there. See docs/ray.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import GitError, UsageError
from ..gitrepo import Repo
from ..oracle import CommandOutcome
from ..procs import MARKER_VAR, CancelToken, kill_by_env
from ..records import AgentProfile, AttemptState, Failure
from ..safeio import flocked
from ..specs import RunConfig
from ..store import MEMORY, Store
from ..worktree import Layout, repo_key, workdir_root
from . import Job, Notify, Outcome, Phase

RAY_MISSING = "the ray executor needs Ray on this machine: pip install 'orchardist[ray]'"
MAX_LOG_BYTES = 2 * 1024 * 1024  # of an attempt's log sent back (its head and its tail)
NUM_CPUS = 1.0  # Ray CPUs an attempt holds on its node
JOB_ENDED = b"ended"  # what a worker tells its reaper when the job ended normally
LOST_GRACE_S = 300.0  # past its timeout, a job whose task never reports is given up
DOCTOR_TIMEOUT_S = 120.0  # for every node to answer doctor --executor ray
RUN_VAR = "ORCHARDIST_RUN"  # every process of a run carries it (see runs.reconcile)
CONNECT_TIMEOUT_S = 30.0  # for the cluster's address to connect, and as long to answer


def import_ray() -> Any:
    """The ``ray`` module; a UsageError saying how to install it when it is missing."""
    try:
        ray = importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError(f"{RAY_MISSING} ({exc})") from None
    _driver_messages_to_stderr(importlib.import_module("ray._private.worker"))
    return ray


def _driver_messages_to_stderr(worker: Any) -> None:
    """Ray's driver prints the cluster's messages ("node ... marked dead") on stdout from a
    background thread; stdout is orchardist's own (``--json``), so they go to stderr."""
    original = worker.print_to_stdstream
    if getattr(original, "orchardist", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.orchardist = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def reachable(address: str, timeout_s: float | None = None) -> str:
    """The ``host:port`` Ray would dial for ``address`` (``auto``: the cluster ``ray start``
    made here), once a Ray cluster answers there; a UsageError naming the address otherwise.

    Ray's own connect retries an address that does not answer for many minutes; this look
    takes at most ``timeout_s`` for the TCP connection plus as long for Ray's answer.
    """
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    services = importlib.import_module("ray._private.services")
    try:
        resolved = str(services.canonicalize_bootstrap_address_or_die(address))
        host, _, port = resolved.rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
        problem = _gcs_answers(resolved, timeout_s)
    except (OSError, ValueError) as exc:  # ConnectionError is an OSError
        problem = _first_line(exc) or type(exc).__name__
    if problem:
        raise UsageError(
            f"cannot reach the Ray cluster at {address!r}: {problem} "
            "(start one with `ray start --head`, or name it with --ray-address; docs/ray.md)"
        )
    return resolved


def _gcs_answers(resolved: str, timeout_s: float) -> str:
    """Why the Ray cluster at ``resolved`` (which accepts connections) is not one, or ""."""
    client = getattr(importlib.import_module("ray._raylet"), "GcsClient", None)
    if client is None:  # another Ray: its own connect will say
        return ""
    box: list[BaseException | None] = []

    def ask() -> None:
        try:
            client(address=resolved, cluster_id=None)
        except Exception as exc:
            box.append(exc)
        else:
            box.append(None)

    # Ray's client blocks in native code and cannot be interrupted: a daemon thread it may
    # stay in while this process goes on to exit 2.
    thread = threading.Thread(target=ask, name="ray-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        return f"{resolved} accepts connections but no Ray cluster answered within {timeout_s:g}s"
    error = box[0]
    return "" if error is None else f"{resolved} is not a Ray cluster ({_first_line(error)})"


def connect(ray: Any, address: str) -> None:
    """Connect this process to the cluster at ``address`` as its driver (fails fast: see
    :func:`reachable`)."""
    reachable(address)
    try:
        ray.init(
            address=address, namespace="orchardist", log_to_driver=False, logging_level="ERROR"
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None


# -- what travels ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # one per commit, compared by identity
class Bundle:
    """A commit's bundle in Ray's object store; ``prerequisite`` must be fetched before it."""

    commit: str
    ref: list[Any]  # [ObjectRef]: wrapped, so Ray fetches it only when a node asks (ray.get)
    prerequisite: str | None = None


@dataclass(frozen=True)
class NodeJob:
    """What a worker node gets for one job."""

    job: Job
    repo_key: str
    identity: tuple[str, str]  # the head's git identity, for the commits made on the node
    settings: RunConfig
    bundles: tuple[Bundle, ...]  # prerequisites first
    max_log_bytes: int = MAX_LOG_BYTES
    board: Any = None  # the run's BaselineBoard (an actor handle); None: baselines per node


@dataclass(frozen=True)
class NodeResult:
    """What a worker node sends back for one job."""

    outcome: Outcome  # its log_path is the node's, meaningless on the head
    patch: bytes  # a bundle of refs/orchardist/patch (the patch commit); b"" when none
    log: bytes
    node: str  # the node's Ray id
    fetched: tuple[str, ...]  # the commits this job had to pull into the node's cache
    held: dict[str, float] = field(default_factory=dict)  # the Ray resources the task held


# -- on the worker node ------------------------------------------------------------------------


def resources(job: Job) -> dict[str, float]:
    """What the job's Ray task asks for: its profile's ``num_cpus`` and ``memory_mb``; one CPU
    for a job without a profile (a merge's verification)."""
    profile = job.profile
    needs = {"num_cpus": profile.num_cpus if profile is not None else NUM_CPUS}
    if profile is not None and profile.memory_mb is not None:
        needs["memory"] = float(int(profile.memory_mb * 1024 * 1024))
    return needs


def _amount(kind: str, value: float) -> str:
    return f"{value / 1024 / 1024:g} MiB" if kind == "memory" else f"{value:g}"


def run_on_node(spec: NodeJob) -> NodeResult:
    """Run one job on this node with the local executor's code (the Ray task's body)."""
    from .local import LocalBaselines, LocalExecutor

    ray = import_ray()
    node = str(ray.get_runtime_context().get_node_id())
    root = workdir_root() / "ray" / spec.repo_key
    job = spec.job
    cache = NodeCache(root / "cache.git", spec.identity)
    fetched = cache.ensure(spec.bundles, lambda refs: bytes(ray.get(refs[0])))
    repo = Repo(cache.path)
    # A workspace per job: a job's executor tidies its run folder when it closes, which on
    # a node would pull the run's listing directory from under the other jobs of the run here.
    workspace = root / "work" / f"{job.run_id}.{job.id}"
    settings = replace(spec.settings, guard_checkout=False, workspace=workspace)
    store = Store(root / "state" / "baselines.db")  # without a board: once per node
    # One executor per job here: a pristine checkout for overlays would serve a single attempt.
    executor = LocalExecutor.for_run(
        repo, root / "state", store, settings, time.time, overlays=False
    )
    if spec.board is not None:  # once per base commit and command on the whole cluster
        local = LocalBaselines(executor, store)
        executor.verifier = replace(
            executor.verifier, baselines=ClusterBaselines(local, spec.board)
        )
    ended = threading.Event()
    box: list[Outcome] = []

    def notify(message: Phase | Outcome) -> None:
        if isinstance(message, Outcome):
            box.append(message)
            ended.set()

    reaper = _start_reaper(job.marker)
    try:
        executor.submit(job, notify)
        try:
            _wait_cancellable(ended, lambda: executor.cancel(job.id, "cancelled on the head"))
        finally:
            executor.close()
            store.close()
            with contextlib.suppress(OSError):
                workspace.rmdir()  # emptied by the executor's tidy
    finally:
        _stop_reaper(reaper)
    outcome = box[0]
    log = Path(outcome.log_path)
    text = _capped(log, spec.max_log_bytes)
    for leftover in (log, log.with_suffix(".prompt.md"), log.with_suffix(".inputs.json")):
        leftover.unlink(missing_ok=True)
    patch = b""
    if outcome.patch_commit and outcome.patch_commit != job.base_commit:
        patch = cache.bundle(outcome.patch_commit, job.base_commit)
    cache.forget(f"refs/orchardist/runs/{job.run_id}/{job.id}")
    held = dict(ray.get_runtime_context().get_assigned_resources())
    return NodeResult(replace(outcome, log_path=""), patch, text, node, fetched, held)


def _start_reaper(marker: str) -> subprocess.Popen[bytes]:
    """A process of its own session that kills the job's processes (by their marker) when
    this Ray worker dies before the job ended: its end of our pipe closes either way."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchardist.executors.ray", "reap", marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # no marker of ours
        start_new_session=True,
    )


def _stop_reaper(reaper: subprocess.Popen[bytes]) -> None:
    """The job ended here: tell the reaper so, and let it go (not waited for: it may still be
    starting, and Python reaps it with a later subprocess)."""
    assert reaper.stdin is not None
    with contextlib.suppress(OSError):
        reaper.stdin.write(JOB_ENDED)
        reaper.stdin.close()


def reap(marker: str) -> int:
    """The reaper's body: wait for the worker's pipe to close; unless the job ended, kill
    every process carrying the job's marker."""
    said = sys.stdin.buffer.read()
    if said != JOB_ENDED:
        kill_by_env(MARKER_VAR, marker)
    return 0


def kill_marked(marker: str) -> int:
    """Kill this node's processes carrying ``marker`` (a cancelled job's); how many there were."""
    return kill_by_env(MARKER_VAR, marker)


def kill_run(run_id: str) -> int:
    """Kill this node's processes of the run (what a dead orchestrator's attempts left here);
    how many there were."""
    return kill_by_env(RUN_VAR, run_id, grace_s=1.0)


def reclaim(address: str, run_id: str) -> int:
    """Kill the run's processes on every live node of the cluster at ``address`` (``resume``
    after the orchestrator died: Ray ends a dead driver's tasks in its own time); how many."""
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
            for node in ray.nodes()
            if node.get("Alive")
        ]
        killed = 0
        for task in tasks:
            with contextlib.suppress(ray.exceptions.RayError):  # a node that died meanwhile
                killed += int(ray.get(task, timeout=DOCTOR_TIMEOUT_S))
        return killed
    finally:
        ray.shutdown()


def _wait_cancellable(ended: threading.Event, cancel: Callable[[], None]) -> None:
    """Wait for the job; Ray's cancel arrives as KeyboardInterrupt: pass it on, wait again."""
    while True:
        try:
            ended.wait()
            return
        except KeyboardInterrupt:
            cancel()


def _capped(path: Path, max_bytes: int) -> bytes:
    """A log's bytes; a larger one as its head and tail with a line saying what was cut."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
            if len(data) <= max_bytes:
                return data
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - max_bytes // 2))
            tail = fh.read()
    except OSError:
        return b""
    note = f"\n[orchardist: {size - max_bytes:,} bytes of this log left on the node]\n"
    return data[: max_bytes // 2] + note.encode() + tail


class NodeCache:
    """A node's bare repository of the commits it was sent, shared by its jobs (flock)."""

    def __init__(self, path: Path, identity: tuple[str, str]) -> None:
        self.path = path
        self.lock = path.parent / "cache.lock"
        with flocked(self.lock):
            if not (path / "HEAD").is_file():
                path.mkdir(parents=True, exist_ok=True)
                _git(path, "init", "-q", "--bare", str(path))
                _git(path, "config", "gc.auto", "0")  # the attempts' alternates point here
            name, email = identity
            _git(path, "config", "user.name", name)
            _git(path, "config", "user.email", email)

    def has(self, commit: str) -> bool:
        """Whether the commit (and so its history) is here."""
        probe = _run_git(self.path, "cat-file", "-e", f"{commit}^{{commit}}")
        return probe.returncode == 0

    def ensure(
        self, bundles: Sequence[Bundle], fetch: Callable[[list[Any]], bytes]
    ) -> tuple[str, ...]:
        """Fetch the bundles of the commits missing here, in order; returns those fetched."""
        fetched = []
        with flocked(self.lock):
            for bundle in bundles:
                if self.has(bundle.commit):
                    continue
                data = fetch(bundle.ref)
                with tempfile.NamedTemporaryFile(dir=self.path, suffix=".bundle") as fh:
                    fh.write(data)
                    fh.flush()
                    _git(self.path, "bundle", "unbundle", fh.name)
                _git(
                    self.path, "update-ref", f"refs/orchardist/have/{bundle.commit}", bundle.commit
                )
                fetched.append(bundle.commit)
        return tuple(fetched)

    def bundle(self, commit: str, since: str) -> bytes:
        """``commit`` as a bundle of what it adds to ``since`` (which the head has)."""
        return _bundle_bytes(self.path, commit, [since])

    def forget(self, ref: str) -> None:
        """Drop a ref the attempt left (its objects go with the next gc)."""
        _run_git(self.path, "update-ref", "-d", ref)


# -- baselines, once per base commit and command on the whole cluster --------------------------


class BaselineBoard:
    """The run's baselines (a Ray actor on the orchestrator's node): which node runs each, and
    their outcomes, kept in the head's store (one truth with local runs); nodes wait here for a
    baseline another node is running."""

    def __init__(self, store_path: str | None) -> None:
        self.store = Store(Path(store_path)) if store_path else None
        self.outcomes: dict[str, CommandOutcome] = {}
        self.running: dict[str, asyncio.Event] = {}  # key -> set when its run ended

    async def claim(self, key: str, wait_s: float) -> CommandOutcome | None:
        """The baseline's outcome, or None: the caller runs it, then :meth:`put` or
        :meth:`drop`. A run that has not ended within ``wait_s`` is presumed lost (its node
        died) and passes to the caller."""
        while True:
            known = self._known(key)
            if known is not None:
                return known
            ended = self.running.get(key)
            if ended is None:
                self.running[key] = asyncio.Event()
                return None
            try:
                await asyncio.wait_for(ended.wait(), wait_s)
            except TimeoutError:
                if self.running.get(key) is ended:
                    self.running[key] = asyncio.Event()
                    ended.set()
                    return None

    def put(self, key: str, commit: str, outcome: CommandOutcome, now: float) -> None:
        """A baseline ran: keep its outcome, wake whoever waits for it."""
        self.outcomes[key] = outcome
        if self.store is not None:
            with self.store.transaction() as tx:
                tx.put_baseline(key, commit, outcome, now)
        self.drop(key)

    def drop(self, key: str) -> None:
        """A baseline's run ended without an outcome (cancelled): the next caller runs it."""
        ended = self.running.pop(key, None)
        if ended is not None:
            ended.set()

    def _known(self, key: str) -> CommandOutcome | None:
        if key not in self.outcomes and self.store is not None:
            cached = self.store.baseline(key)
            if cached is not None:
                self.outcomes[key] = cached
        return self.outcomes.get(key)


@dataclass
class ClusterBaselines:
    """A node's baselines through the run's :class:`BaselineBoard` (the Baselines seam)."""

    local: Any  # LocalBaselines: runs one on this node
    board: Any  # the BaselineBoard's actor handle

    def outcome(
        self,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str = "",
        cancel: CancelToken | None = None,
        network: bool = False,
    ) -> CommandOutcome:
        """The cluster's outcome for the key, or run it here when this node is the first."""
        key = self.local.key(commit, command, workdir, network)
        known = _answer(self.board.claim.remote(key, timeout_s + LOST_GRACE_S), cancel)
        if known is _CANCELLED:
            return CommandOutcome(command, -1)  # the attempt is cancelled: its verdict is moot
        if known is not None:
            return known  # type: ignore[no-any-return]
        try:
            outcome, cancelled = self.local.run(
                key, commit, command, workdir, timeout_s, run_id, cancel, network
            )
        except BaseException:
            self.board.drop.remote(key)
            raise
        if cancelled:  # a cut-short run says nothing about the base
            self.board.drop.remote(key)
        else:
            import_ray().get(self.board.put.remote(key, commit, outcome, time.time()))
        return outcome  # type: ignore[no-any-return]


_CANCELLED = object()


def _answer(ref: Any, cancel: CancelToken | None) -> Any:
    """A Ray task's result, or ``_CANCELLED`` as soon as ``cancel`` is (no polling)."""
    future = ref.future()
    woken, wake = os.pipe()

    def done(_: object) -> None:
        with contextlib.suppress(OSError):
            os.write(wake, b"x")
        os.close(wake)  # here only: the write end lives until the answer came

    future.add_done_callback(done)
    try:
        watched = [woken] + ([cancel.fileno()] if cancel is not None else [])
        select.select([fd for fd in watched if fd >= 0], [], [])
        if future.done():
            return future.result()
        return _CANCELLED
    finally:
        os.close(woken)


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
        self.board = self._start_board(store_path)
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
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

    def _start_board(self, store_path: Path | None) -> Any:
        """The run's BaselineBoard, on this node (it opens the store here), holding no CPU."""
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        here = self.ray.get_runtime_context().get_node_id()
        actor = self.ray.remote(BaselineBoard).options(
            num_cpus=0,
            max_restarts=0,
            scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(here, soft=False),
        )
        return actor.remote(str(store_path) if store_path else None)

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
        """Kill the processes carrying ``marker`` on every live node (does not wait)."""
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        with contextlib.suppress(Exception):  # a node that just died has nothing left
            for node in self.ray.nodes():
                if not node.get("Alive"):
                    continue
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
        spec = NodeJob(job, self.repo_key, self.identity, self.settings, bundles, board=self.board)
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
            detail = f"lost on the Ray cluster: {type(exc).__name__}: {_first_line(exc)}"
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
        if outcome.verdict or job.stage:
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
        commits = [job.base_commit, job.start_commit, job.baseline]
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
        data = _bundle_bytes(self.repo.common_dir, commit, [since] if since else [])
        return Bundle(commit, [self.ray.put(data)], since)


# -- doctor --executor ray ---------------------------------------------------------------------


def node_report(profiles: Sequence[AgentProfile]) -> dict[str, Any]:
    """What a worker node has for the plan (a Ray task's body): git, orchardist, each profile."""
    from .. import __version__
    from ..doctor import check_profile

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
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU")]
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
            lost.append({"node": str(node["NodeID"]), "error": _first_line(exc)})
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


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


# -- git on raw paths (the node's cache has no Repo until it exists) ---------------------------


def _run_git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
    try:
        return subprocess.run(
            ["git", f"--git-dir={git_dir}", *args],
            capture_output=True,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from exc


def _git(git_dir: Path, *args: str) -> bytes:
    proc = _run_git(git_dir, *args)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise GitError(f"git {' '.join(args)} failed ({proc.returncode}): {err}")
    return proc.stdout


def _bundle_bytes(git_dir: Path, commit: str, prerequisites: Sequence[str]) -> bytes:
    """``commit`` (named by a ref, which a bundle needs) as a bundle, without ``prerequisites``."""
    ref = f"refs/orchardist/bundle/{commit}-{os.getpid()}-{threading.get_ident()}"
    _git(git_dir, "update-ref", ref, commit)
    try:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "out.bundle"
            _git(
                git_dir, "bundle", "create", "-q", str(out), ref, *(f"^{p}" for p in prerequisites)
            )
            return out.read_bytes()
    finally:
        _run_git(git_dir, "update-ref", "-d", ref)


__all__ = ["NodeJob", "NodeResult", "RayExecutor", "import_ray", "run_on_node"]


if __name__ == "__main__":  # python -m orchardist.executors.ray reap MARKER (see _start_reaper)
    if sys.argv[1:2] != ["reap"] or len(sys.argv) != 3:
        sys.exit("usage: python -m orchardist.executors.ray reap MARKER")
    sys.exit(reap(sys.argv[2]))
