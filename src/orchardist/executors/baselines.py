"""Baselines: how a verify command does on the base, run once per (base commit, workdir,
command, network) in a tree of its own and kept in the store for every later candidate and task
(and, under a file lock, for every orchestrator on the repository)."""

from __future__ import annotations

import os
import secrets
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Protocol

from ..confine.attemptpaths import AttemptPaths
from ..confine.layout import Layout
from ..confine.procs import CancelToken
from ..confine.scrubbed import scrubbed_env
from ..confine.spec import Spec
from ..safeio import flocked
from ..state.store import Store
from ..verify.oracle import CommandOutcome, baseline_key
from ..verify.verifier import CommandRequest, run_one
from . import Job, VerifyJob
from .views import make_view


def merged_tree(job: Job, stacked: str | None = None) -> str | None:
    """The merged tree a job verifies, whose outcomes are kept as its baselines: a merge
    verification's, or ``stacked`` (an attempt's patch on the run's head); None: neither."""
    if stacked is None and isinstance(job, VerifyJob) and job.purpose == "merge":
        return job.base_commit
    return stacked


def keeper(
    baselines: LocalBaselines | None, job: Job, stacked: str | None = None
) -> Callable[[CommandOutcome], None] | None:
    """Where a merged tree's outcomes go: the baselines of that tree (the next merge or
    attempt stacked on it judges its failures against them instead of running them again)."""
    tree = merged_tree(job, stacked)
    if baselines is None or tree is None:
        return None
    return partial(baselines.keep, tree, job.workdir, job.network)


def verifying(
    baselines: LocalBaselines | None, job: Job, stacked: str | None = None
) -> AbstractContextManager[None]:
    """While a merged tree is verified, a baseline asked of it waits for its outcomes (a
    merge or an attempt stacked on it fails first) instead of running the same commands."""
    tree = merged_tree(job, stacked)
    if baselines is None or tree is None:
        return nullcontext()
    return baselines.verifying(tree)


class _Pending:
    """A merge verification under way: its pipe reads end-of-file once it ended (so a waiter
    selects on it and on its own cancel token at once; the last one out closes it)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._lock = threading.Lock()
        self._users = 1  # the verification itself, and each waiter

    def wait(self, cancel: CancelToken | None, timeout_s: float) -> None:
        """Until the verification ended, ``cancel`` fires or ``timeout_s`` passed."""
        with self._lock:
            if self._users == 0:
                return
            self._users += 1
        try:
            fds = [self._read] + ([cancel.fileno()] if cancel is not None else [])
            select.select(fds, [], [], timeout_s)
        finally:
            self._release()

    def end(self) -> None:
        """The verification ended: wake every waiter."""
        os.close(self._write)
        self._release()

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                os.close(self._read)


class Host(Protocol):
    """What running a baseline needs of the executor: its folders, clock and environment."""

    log_root: Path
    layout: Layout
    environ: Mapping[str, str] | None

    def clock(self) -> float: ...

    def private_env(self, paths: AttemptPaths) -> dict[str, str]: ...

    def confine(self, paths: AttemptPaths, network: bool) -> Spec | None: ...


class LocalBaselines:
    """Runs a command once per (base commit, workdir, command), in its own worktree, and keeps
    the outcome in the store for every later candidate and task on the same base."""

    def __init__(self, executor: Host, store: Store) -> None:
        self.executor = executor
        self.store = store
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._verifying: dict[str, list[_Pending]] = {}  # commit -> its merge verifications

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
        """The cached outcome, or run it now (concurrent callers for one key wait for one run).

        With ``network`` the base is run with network, as the commands it is compared with
        were: a base failing for want of network must not excuse a failure of the change.
        """
        key = self.key(commit, command, workdir, network)
        with self._lock:
            pending = list(self._verifying.get(commit, ()))
        for verification in pending:  # its outcomes come soon: not worth a run of their own
            verification.wait(cancel, timeout_s)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # Across processes too: two orchestrators on one repository run a baseline once.
        with key_lock, flocked(self.executor.log_root.parent / "locks" / f"baseline-{key}.lock"):
            cached = self.store.baseline(key)
            if cached is not None:
                return cached
            outcome, cancelled = self.run(
                key, commit, command, workdir, timeout_s, run_id, cancel, network
            )
            if not cancelled:  # a cut-short run says nothing about the base
                with self.store.transaction() as tx:
                    tx.put_baseline(key, commit, outcome, self.executor.clock())
            return outcome

    def keep(self, commit: str, workdir: str, network: bool, outcome: CommandOutcome) -> None:
        """A command's outcome on ``commit``, run by a verification of that very tree (a merged
        tree): the baseline of the next merge stacked on it, which is then not run again."""
        key = self.key(commit, outcome.command, workdir, network)
        with self.store.transaction() as tx:
            if self.store.baseline(key) is None:
                tx.put_baseline(key, commit, outcome, self.executor.clock())

    @contextmanager
    def verifying(self, commit: str) -> Iterator[None]:
        """``commit``'s tree is being verified: its outcomes are kept, wait for them."""
        pending = _Pending()
        with self._lock:
            self._verifying.setdefault(commit, []).append(pending)
        try:
            yield
        finally:
            with self._lock:
                self._verifying[commit].remove(pending)
                if not self._verifying[commit]:
                    del self._verifying[commit]
            pending.end()

    @staticmethod
    def key(commit: str, command: str, workdir: str, network: bool) -> str:
        """The store's key for ``command``'s outcome on ``commit`` in ``workdir``."""
        scope = f"[{workdir}]" + (" [network]" if network else "")
        return baseline_key(commit, f"{scope} {command}")

    def run(
        self,
        key: str,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str,
        cancel: CancelToken | None,
        network: bool,
    ) -> tuple[CommandOutcome, bool]:
        """Run the command on ``commit`` in a worktree of its own, now; the outcome, and
        whether it was cancelled (then it says nothing about the base)."""
        ex = self.executor
        name = f"baseline-{key[:16]}"
        paths = ex.layout.baseline(f"{name}.{secrets.token_hex(3)}")  # other orchestrators' differ
        log = ex.log_root / "baselines" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            # the same kind of tree as a candidate's verify: exactly the commit's, fresh folders
            make_view(ex.layout, paths, commit, commit, run_id or None)
            env = scrubbed_env((), ex.environ)
            env.update(
                ORCHARDIST_PHASE="baseline",
                ORCHARDIST_RUN=run_id,
                ORCHARDIST_WORKTREE=str(paths.tree),
            )
            env.update(ex.private_env(paths))
            result, report, _ = run_one(
                CommandRequest(
                    command=command,
                    cwd=paths.tree / workdir,
                    env=env,
                    log=log,
                    deadline=time.monotonic() + timeout_s,
                    junit=paths.io / "junit.xml",
                    confine=ex.confine(paths, network=network),
                    cancel=cancel,
                )
            )
        finally:
            ex.layout.remove(paths)
        outcome = CommandOutcome(command, result.exit_code, result.timed_out, report)
        return outcome, result.cancelled
