"""Baselines: how a verify command does on the base, run once per (base commit, workdir,
command, network) in a tree of its own and kept in the store for every later candidate and task
(and, under a file lock, for every orchestrator on the repository)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from ..agents import scrubbed_env
from ..confine.isolation import Spec
from ..confine.layout import Layout
from ..confine.paths import AttemptPaths
from ..confine.procs import CancelToken
from ..safeio import flocked
from ..state.store import Store
from ..verify.oracle import CommandOutcome, baseline_key
from ..verify.verifier import CommandRequest, run_one
from .views import make_view


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
