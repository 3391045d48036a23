"""Driving a run: hold its lock, route signals to a graceful stop or a cancel, show progress,
execute it, then print its summary (``run``, ``resume``, ``retry`` and ``scan --fix``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any

from ..engine.hooks import Hook, Hooks
from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError
from ..runs.control import CANCEL_SIGNAL, REVIEW_SIGNAL
from ..state.records import RunState
from .options import EXIT_REVIEW, load_plan, with_executor
from .summary import SUMMARY_ROWS, lock_held, print_next, print_summary


class StopRelay:
    """Passes a stop request to the scheduler, or keeps it until the scheduler exists."""

    def __init__(self) -> None:
        self.pending: tuple[str, RunState] | None = None
        self.scheduler: Any = None
        self._lock = threading.Lock()  # signals arrive on their own thread (see _on_signals)

    def request(self, reason: str = "interrupted", state: RunState = RunState.INTERRUPTED) -> None:
        with self._lock:
            if self.scheduler is not None:
                self.scheduler.stop(reason, state)
            elif self.pending is None or state is RunState.CANCELLED:
                self.pending = (reason, state)

    def cancel(self) -> None:
        self.request("cancelled by orchardist cancel", RunState.CANCELLED)

    def review(self) -> None:
        """A review decision was recorded: wake the loop (before it exists, its start reads
        the store anyway)."""
        if self.scheduler is not None:
            self.scheduler.review_decided()

    def attach(self, scheduler: Any) -> None:
        with self._lock:
            self.scheduler = scheduler
            if self.pending is not None:
                scheduler.stop(*self.pending)


def drive(
    ws: Any,
    plan: Any,
    run: Any,
    args: argparse.Namespace,
    resuming: bool = False,
    prepare: Callable[[Any], list[Any]] | None = None,
) -> int:
    """Hold the run's lock, reconcile if resuming, ``prepare`` the run, and execute it with
    progress and signals (SIGINT/SIGTERM interrupt it, SIGUSR1 from ``cancel`` cancels it)."""
    from ..runs.start import run_lock
    from ..state.report import status_document

    plan = with_executor(plan, args)
    relay = StopRelay()
    restore = _on_signals(relay)  # before anything slow: no signal lost
    try:
        with run_lock(ws, run.id), dashboard(ws, args) as served:
            state = _execute(ws, plan, run, args, resuming, relay, prepare)
            tell_ended(ws, plan, run.id, served if isinstance(served, str) else None)
    finally:
        restore()
    doc = status_document(ws.store, ws.resolve_run(run.id))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_summary(doc, quiet=args.quiet, limit=SUMMARY_ROWS)
        if not args.quiet:
            print_next(doc)
    codes = {
        RunState.DONE: EXIT_OK,
        RunState.INTERRUPTED: EXIT_INTERRUPTED,
        RunState.AWAITING_REVIEW: EXIT_REVIEW,
    }
    return codes.get(state, EXIT_FAILED)


def _execute(
    ws: Any,
    plan: Any,
    run: Any,
    args: argparse.Namespace,
    resuming: bool,
    relay: StopRelay,
    prepare: Callable[[Any], list[Any]] | None,
) -> RunState:
    from ..runs.start import execute, reconcile

    header = f"run {run.id} → branch {run.branch}  ({isolation_note(plan)})"
    states = {t.task_id: t.state.value for t in ws.store.tasks(run.id)}
    hooks = _progress_hooks(plan, args, header, states)
    try:
        if resuming:
            summary = reconcile(ws, run)
            summary["killed"] += _reclaim_on_cluster(plan, run)
            out = sys.stderr if args.json else sys.stdout
            print(
                f"resuming run {run.id}: killed {summary['killed']} leftover process(es), "
                f"removed {summary['worktrees_removed']} worktree(s)",
                file=out,
            )
            for line in summary["fixed"]:
                print(f"  {line}", file=out)
        if prepare is not None:
            hooks.emit(prepare(run))  # the progress display hears of skipped or reset tasks
        return execute(
            ws,
            plan,
            ws.resolve_run(run.id),
            hooks=hooks,
            max_parallel=args.max_parallel,
            on_scheduler=relay.attach,
            fail_fast=getattr(args, "fail_fast", False),
        )
    finally:
        hooks.close()


def tell_ended(ws: Any, plan: Any, run_id: str, served: str | None) -> None:
    """``[run] notify``: the run has ended (whatever its state; awaiting review: it needs a
    person); a failing notifier is an event and a line on stderr, never the run's failure."""
    if plan.run.notify is None:
        return
    from ..runs.notify import notice_for, notify

    try:
        run = ws.resolve_run(run_id)
        delivery = notify(
            ws.store,
            run,
            plan.run.notify,
            plan.run.notify_timeout_s,
            notice_for(run),
            cwd=plan.repo,
            log_dir=ws.state_dir / "logs" / run_id,
            dashboard=served,
        )
    except Exception as exc:  # the run has ended as it did, whatever the notifier's trouble
        print(f"notify failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if not delivery.ok:
        print(f"notify failed: {delivery.detail}", file=sys.stderr)


def _reclaim_on_cluster(plan: Any, run: Any) -> int:
    """With the ray executor, kill the run's processes a dead orchestrator left on the nodes."""
    if plan.run.executor != "ray":
        return 0
    from ..executors.ray import reclaim

    return reclaim(plan.run.ray_address, run.id)


def dashboard(ws: Any, args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """With ``--serve``, the dashboard of the run's repository while the run goes on."""
    if not getattr(args, "serve", False):
        return contextlib.nullcontext()
    from ..web.serve import serving_in_background

    @contextlib.contextmanager
    def serving() -> Iterator[object]:
        with serving_in_background(ws.repo.root) as url:
            print(f"dashboard: {url}", file=sys.stderr, flush=True)
            yield url

    return serving()


def isolation_note(plan: Any) -> str:
    """Which isolation the run gets, for its first line; IsolationError (exit 2) when
    ``[run] isolation = "required"`` and namespaces cannot be made here."""
    from ..confine import isolation

    return isolation.describe(plan.run.isolation, isolation.choose(plan.run.isolation))


def checkout_note(plan: Any, env: Mapping[str, str] | None = None) -> str:
    """Where attempts cannot be shown at the repository's path (no namespaces), what names the
    checkout by absolute path, so that verify tests it; with namespaces, the folders on PATH
    inside the repository that attempts will not see (see checkoutrefs.py); "" when none."""
    from ..confine import isolation
    from ..confine.checkoutrefs import explain, references, unseen_path_entries

    if isolation.choose(plan.run.isolation) is isolation.Mode.NAMESPACES:
        return unseen_path_entries(plan.repo, plan.run.environment, env)
    return explain(plan.repo, references(plan.repo, env))


def _progress_hooks(
    plan: Any, args: argparse.Namespace, header: str, states: dict[str, str] | None = None
) -> Hooks:
    if args.quiet:  # nothing shown: rich and the display not even imported (0.1 s loaded)
        return Hooks([])
    from ..runs.display import LiveTable, PlainLines

    hooks: list[Hook]
    if not args.json and sys.stdout.isatty():
        from rich.console import Console

        # NO_COLOR in the environment is honoured by rich itself; --no-color is passed here and
        # never put into the environment, which agents inherit.
        hooks = [LiveTable(plan, Console(no_color=args.no_color or None), header, states)]
    else:
        stream = sys.stderr if args.json else sys.stdout
        print(header, file=stream, flush=True)
        hooks = [PlainLines(stream, verbose=args.verbose > 0)]
    return Hooks(hooks)


def _on_signals(relay: StopRelay) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to a graceful stop, SIGUSR1 (``orchardist cancel``) to a cancel
    and SIGUSR2 (a review decision) to a wake-up; a second signal is not needed to end.

    The signals are acted on by a thread that reads them from the interpreter's wake-up fd, not
    by Python handlers: a handler runs in the main thread only, at its next bytecode, and when
    the kernel delivers the signal to another thread (an attempt's, say) while the main thread
    blocks on the scheduler's queue, nothing wakes it until some other message arrives (a
    review decision waited for a slow task's end). The C handler writes to the fd whatever
    thread it runs on."""
    signals = (signal.SIGINT, signal.SIGTERM, CANCEL_SIGNAL, REVIEW_SIGNAL)
    readable, writable = os.pipe()
    os.set_blocking(writable, False)
    previous = {sig: signal.signal(sig, _ignored) for sig in signals}  # the C handler, armed
    previous_fd = signal.set_wakeup_fd(writable, warn_on_full_buffer=False)
    actions = {
        CANCEL_SIGNAL: relay.cancel,
        REVIEW_SIGNAL: relay.review,
        signal.SIGINT: relay.request,
        signal.SIGTERM: relay.request,
    }
    reader = threading.Thread(
        target=_relay_signals, args=(readable, actions), name="signals", daemon=True
    )
    reader.start()

    def restore() -> None:
        signal.set_wakeup_fd(previous_fd)
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(writable)  # the reader reads the end of its pipe, and ends
        reader.join()

    return restore


def _ignored(signum: int, frame: FrameType | None) -> None:
    """The Python side of a relayed signal: nothing (the relay's thread acts on it)."""


def _relay_signals(readable: int, actions: Mapping[int, Callable[[], None]]) -> None:
    """Act on each signal number written to the wake-up fd, until the pipe is closed."""
    try:
        while data := os.read(readable, 64):
            for signum in data:
                action = actions.get(signum)
                if action is not None:
                    action()
    finally:
        os.close(readable)


def interactive() -> bool:
    """Whether a person can be asked (a terminal on both ends, not --json)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def confirm(question: str) -> bool:
    """Ask on the terminal; Enter means yes."""
    try:
        answer = input(f"{question} [Y/n] ").strip().lower()
    except EOFError:  # Ctrl-D: no answer is not a yes, nor a licence to start afresh
        print(file=sys.stderr)
        raise UsageError("no answer: pass --resume to continue that run or --fresh") from None
    return answer in ("", "y", "yes")


def cluster_reachable(plan: Any) -> None:
    """With the ray executor, a UsageError (exit 2) unless the cluster's address answers."""
    if plan.run.executor == "ray":
        from ..executors.rayconnect import reachable

        reachable(plan.run.ray_address)


def refuse_if_driven(ws: Any, run: Any) -> None:
    """A run another orchardist drives can be watched or cancelled, not resumed."""
    from ..runs.control import lock_path

    path = lock_path(ws.state_dir, run.id)
    if lock_held(path):
        pid = path.read_text(errors="replace").strip() or "?"
        raise UsageError(
            f"run {run.id} is being driven by another orchardist process (pid {pid}): "
            f"watch it with `orchardist status {run.id} --watch`, stop it with "
            f"`orchardist cancel {run.id}`, or start another run with --fresh"
        )


def select(ws: Any, plan: Any, args: argparse.Namespace) -> Callable[[Any], list[Any]]:
    """Apply --only/--skip to a run (under its lock, before it executes)."""
    from ..runs.start import select_tasks

    def prepare(run: Any) -> list[Any]:
        if args.only or args.skip:
            return select_tasks(ws, plan, run, args.only, args.skip)
        return []

    return prepare


def plan_of(ws: Any, run: Any) -> Any:
    """The run's plan file, reloaded; its task ids must still be the run's."""
    plan = load_plan(run.plan_path)
    known = {t.task_id for t in ws.store.tasks(run.id)}
    if {t.id for t in plan.tasks} != known:
        raise UsageError(
            f"{run.plan_path} no longer has the tasks run {run.id} was started with; "
            "start a new run instead"
        )
    return plan
