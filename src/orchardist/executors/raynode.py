"""The Ray executor's side on a worker node: what travels between head and node, the task that
runs a job there with the local executor's code, the node's cache of commits, the reaper that
ends a job's processes when its worker dies, and the baselines shared across the cluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..confine.paths import workdir_root
from ..confine.procs import MARKER_VAR, CancelToken, kill_by_env
from ..confine.reaper import JOB_ENDED
from ..errors import GitError
from ..git.repo import Repo
from ..safeio import flocked
from ..specs import RunConfig
from ..state.store import Store
from ..verify.oracle import CommandOutcome
from . import Job, Outcome, Phase
from .rayconnect import import_ray

MAX_LOG_BYTES = 2 * 1024 * 1024  # of an attempt's log sent back (its head and its tail)
LOST_GRACE_S = 300.0  # past its timeout, a job whose task never reports is given up
RUN_VAR = "ORCHARDIST_RUN"  # every process of a run carries it (see runs.reconcile)


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


def run_on_node(spec: NodeJob) -> NodeResult:
    """Run one job on this node with the local executor's code (the Ray task's body)."""
    from .baselines import LocalBaselines
    from .local import LocalExecutor

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
        [sys.executable, "-m", "orchardist.confine.reaper", marker],
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


def kill_marked(marker: str) -> int:
    """Kill this node's processes carrying ``marker`` (a cancelled job's); how many there were."""
    return kill_by_env(MARKER_VAR, marker)


def kill_run(run_id: str) -> int:
    """Kill this node's processes of the run (what a dead orchestrator's attempts left here);
    how many there were."""
    return kill_by_env(RUN_VAR, run_id, grace_s=1.0)


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
        return bundle_bytes(self.path, commit, [since])

    def forget(self, ref: str) -> None:
        """Drop a ref the attempt left (its objects go with the next gc)."""
        _run_git(self.path, "update-ref", "-d", ref)


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


def bundle_bytes(git_dir: Path, commit: str, prerequisites: Sequence[str]) -> bytes:
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
