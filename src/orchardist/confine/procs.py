"""Child processes that always end on time, and leave nothing behind.

Every child starts in its own session (so its own process group), with stdin closed unless we
feed it a file, and with a marker variable in its environment that all its descendants inherit.
Ending a child means: SIGTERM to its group and to every process carrying its marker (which finds
those that called ``setsid`` or daemonized), a grace period, then SIGKILL to whatever is left.

A confined child (``confine``, see isolation.py) runs inside its own pid namespace when
namespaces are available: ending it ends the namespace, and the kernel kills everything in it.
Confined by Landlock only, it is started by a thread that confined itself first
(:func:`landlock.confined_call`), without a wrapper process.

Waiting is event-driven: one ``select`` over the child's pidfd, its output pipe and a cancel
pipe, with the deadline as the only timeout. Output goes to a log file capped in size (head and
tail are kept); an optional callback sees each complete line as it arrives.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import landlock as sandbox
from . import proctable
from .capped import CappedLog
from .isolation import Mode

if TYPE_CHECKING:  # made by what confines with bwrap (a run); a scan gives what is writable
    from .spec import Spec

MARKER_VAR = "ORCHARDIST_PROCESS_MARK"
DEFAULT_GRACE_S = 3.0
DEFAULT_MAX_LOG_BYTES = 8 * 1024 * 1024
_CHUNK = 65536


class CancelToken:
    """Set once to cancel; wakes every ``run_process`` waiting on it, without polling."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._event = threading.Event()
        self._close_lock = threading.Lock()
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel (idempotent); the first reason is kept."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()
            with self._close_lock, contextlib.suppress(OSError):
                if self._write >= 0:
                    os.write(self._write, b"x")

    @property
    def cancelled(self) -> bool:
        """Whether cancel() was called."""
        return self._event.is_set()

    def fileno(self) -> int:
        """Readable once cancelled."""
        return self._read

    def close(self) -> None:
        """Release the pipe (idempotent: fd numbers are reused, so never close twice)."""
        with self._close_lock:
            fds, self._read, self._write = (self._read, self._write), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        self.close()


@dataclass(frozen=True)
class ProcessResult:
    """How a child ended."""

    exit_code: int  # negative: killed by that signal
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False
    output_bytes: int = 0
    truncated: bool = False


def new_marker() -> str:
    """A fresh value for the marker variable: 32 random hex digits (as ``uuid4().hex``, without
    importing uuid, which loads ``platform`` on every start of the command line)."""
    return os.urandom(16).hex()


@dataclass(frozen=True)
class ProcessRequest:
    """One child to run: what, where, with what, for how long, and what may end it early.

    ``marker`` tags the child and its descendants (a fresh one if None); share one marker
    across the processes of an attempt so that a later cleanup can find them all.
    ``stop`` is a second token, the caller's own (say, a budget it watches in ``on_line``):
    either token ends the run as cancelled.
    ``confine`` says how the child is isolated (None: not at all); ``writable`` is the older
    spelling of a Landlock-only confinement. ``on_start`` is called (on the calling thread)
    once the child runs: a caller may then do other work while it does.
    """

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    log: Path
    timeout_s: float | None
    cancel: CancelToken | None = None
    stop: CancelToken | None = None
    stdin_file: Path | None = None
    on_line: Callable[[bytes], None] | None = None
    grace_s: float = DEFAULT_GRACE_S
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    marker: str | None = None
    clock: Callable[[], float] = time.monotonic
    writable: Sequence[Path] | None = None
    confine: Spec | None = None
    on_start: Callable[[], None] | None = None


def run_process(request: ProcessRequest) -> ProcessResult:
    """Run the request's child to its end, its timeout, or cancellation; always kill what it
    leaves."""
    cwd, clock = request.cwd, request.clock
    marker = request.marker or new_marker()
    argv, spare, landlocked = _confined(request.argv, cwd, request.writable, request.confine)
    start = clock()
    sink = CappedLog(request.log, request.max_log_bytes, request.on_line)
    env = {**request.env, MARKER_VAR: marker}
    proc = _start(argv, cwd, env, request.stdin_file, sink, landlocked)
    if proc is None:
        return ProcessResult(exit_code=127, duration_s=clock() - start)
    assert proc.stdout is not None
    deadline = None if request.timeout_s is None else start + request.timeout_s
    pidfd = -1
    try:  # from the child's first instant: a Ctrl-C in the main thread must not leave it
        pidfd = os.pidfd_open(proc.pid)
        if request.on_start is not None:
            request.on_start()
        pipe = proc.stdout.fileno()
        os.set_blocking(pipe, False)
        exited, timed_out, cancelled = _wait(
            pidfd, pipe, (request.cancel, request.stop), sink, deadline, clock
        )
        # a fresh marker is carried by nothing older than the child: only its descendants
        _end(proc, marker, exited, spare, request.grace_s, request.marker is None)
        _drain(pipe, sink, seconds=2.0)
    finally:
        if proc.returncode is None:  # the loop raised (say, on_line did): still leave nothing
            kill_tree(proc.pid, marker, grace_s=0.0)
            proc.wait()
        if pidfd >= 0:
            os.close(pidfd)
        proc.stdout.close()
        truncated = sink.close()
    return ProcessResult(
        exit_code=proc.returncode,
        duration_s=clock() - start,
        timed_out=timed_out,
        cancelled=cancelled,
        output_bytes=sink.total,
        truncated=truncated,
    )


def _end(
    proc: subprocess.Popen[bytes],
    marker: str,
    exited: bool,
    spare: bool,
    grace_s: float,
    own_marker: bool,
) -> None:
    """Kill what the child left (the child too, unless it ``exited``), then reap it.
    ``own_marker``: the marker is the child's alone (not shared with earlier processes)."""
    # A namespace whose bwrap ended is empty: its init died, and the kernel reaps every
    # process in it before that death is reported. Nothing to look for in /proc.
    if not (exited and spare):
        grace = 0.0 if exited else grace_s
        kill_tree(proc.pid, marker, grace_s=grace, spare_leader=spare, descendants=own_marker)
    proc.wait()


def _confined(
    argv: Sequence[str], cwd: Path, writable: Sequence[Path] | None, confine: Spec | None
) -> tuple[Sequence[str], bool, Sequence[Path] | None]:
    """``argv`` wrapped in its confinement, whether its leader (bwrap) is to be spared, and
    what it may write when Landlock (applied by the thread that starts it) confines it."""
    if confine is None:  # Landlock alone (a scan's), or nothing: no Spec made nor imported
        return argv, False, None if writable is None else tuple(writable)
    if confine.mode is Mode.LANDLOCK:
        home_tmp = (p for p in (confine.home, confine.tmp) if p is not None)
        return argv, False, (*confine.writable, *home_tmp)
    from .spec import wrap

    # bwrap dies of SIGTERM at once and takes its namespace along: spare it until SIGKILL,
    # so that the command inside gets its grace period.
    return wrap(argv, confine, cwd=cwd), confine.mode is Mode.NAMESPACES, None


def _start(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    stdin_file: Path | None,
    sink: CappedLog,
    landlock: Sequence[Path] | None = None,
) -> subprocess.Popen[bytes] | None:
    """The child in a session of its own, its output on a pipe, confined by Landlock to
    writing beneath ``landlock`` when given; None, said in its log (then closed), when it
    cannot be started."""
    # opened here, not by Popen on a confined thread, where /dev/null may not be writable
    stdin = (stdin_file or Path(os.devnull)).open("rb")

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )

    try:
        return popen() if landlock is None else _landlocked(popen, landlock, env[MARKER_VAR])
    except OSError as exc:
        sink.write(f"orchardist: cannot start {argv[0]!r}: {exc}\n".encode())
        sink.close()
        return None
    finally:
        stdin.close()


def _landlocked(
    popen: Callable[[], subprocess.Popen[bytes]], writable: Sequence[Path], marker: str
) -> subprocess.Popen[bytes]:
    """``popen()`` on a thread confined to writing beneath ``writable``, so that the child is
    born confined (nothing runs between its fork and its exec); an OSError when the
    confinement cannot be made."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        started.append(popen())
        return started[-1]

    try:
        return sandbox.confined_call(start, writable)
    except BaseException:  # a Ctrl-C while it started: it must not be left running
        for proc in started:
            kill_tree(proc.pid, marker, grace_s=0.0)
            proc.wait()
        raise


def _wait(
    pidfd: int,
    pipe: int,
    tokens: Sequence[CancelToken | None],
    sink: CappedLog,
    deadline: float | None,
    clock: Callable[[], float],
) -> tuple[bool, bool, bool]:
    """Copy the child's output into ``sink`` until it exits (``pidfd`` is readable), a token
    is set or the deadline passes: ``(exited, timed_out, cancelled)``."""
    with selectors.DefaultSelector() as sel:
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        sel.register(pipe, selectors.EVENT_READ, "out")
        for token in tokens:
            if token is not None:
                sel.register(token.fileno(), selectors.EVENT_READ, "cancel")
        return _select(sel, pipe, sink, deadline, clock)


def _select(
    sel: selectors.BaseSelector,
    pipe: int,
    sink: CappedLog,
    deadline: float | None,
    clock: Callable[[], float],
) -> tuple[bool, bool, bool]:
    exited = cancelled = False
    while not exited:
        wait = None if deadline is None else max(0.0, deadline - clock())
        for key, _ in sel.select(wait):
            if key.data == "out":
                if not _read_into(pipe, sink):
                    sel.unregister(pipe)
            elif key.data == "exit":
                exited = True
            elif key.data == "cancel":
                cancelled = True
        if cancelled:
            return exited, False, True
        # checked even when output keeps coming, or a chatty child would never time out
        if not exited and deadline is not None and clock() >= deadline:
            return False, True, False
    return True, False, False


def _read_into(fd: int, sink: CappedLog) -> bool:
    """Read one chunk, if any is ready; False at end of file.

    One chunk per wake-up, not "until empty": writers faster than us would keep us here forever,
    past the deadline and deaf to cancellation.
    """
    try:
        data = os.read(fd, _CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not data:
        return False
    sink.write(data)
    return True


def _drain(fd: int, sink: CappedLog, seconds: float) -> None:
    """Read the pipe to its end; bounded, in case an escaped process still holds it."""
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return
            if not _read_into(fd, sink):
                return


def kill_tree(
    leader: int,
    marker: str | None,
    grace_s: float = DEFAULT_GRACE_S,
    spare_leader: bool = False,
    descendants: bool = False,
) -> int:
    """SIGTERM the group led by ``leader`` and every process with ``marker``; SIGKILL after grace.

    With ``spare_leader`` the leader itself gets only the SIGKILL. With ``descendants`` only
    the leader and what it started carry the marker, so processes that started before it (in
    ``/proc``, the clock tick the leader started in) are not read: the sweep reads their
    ``stat`` but not their environment. Returns how many processes had to be signalled. Waits
    for them on pidfds, not by polling.
    """
    needle = f"{MARKER_VAR}={marker}".encode() if marker else None
    born = proctable.start_ticks(leader) if descendants else 0
    return _kill(leader, needle, grace_s, spare_leader, born)


def kill_by_env(name: str, value: str, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Kill every process whose environment has ``name=value`` (cleanup after a crash)."""
    return _kill(-1, f"{name}={value}".encode(), grace_s)


def _kill(
    leader: int, needle: bytes | None, grace_s: float, spare_leader: bool = False, born: int = 0
) -> int:
    targets = proctable.members(leader, needle, born)
    if not targets:
        return 0
    told = _told(leader, targets, spare_leader) if grace_s > 0 else set()
    if told:
        _signal_all(told, signal.SIGTERM, -1 if spare_leader else leader)
        survivors = _wait_gone(targets, grace_s)
        if survivors:
            _signal_all(survivors | proctable.members(leader, needle, born), signal.SIGKILL, leader)
    else:
        _signal_all(targets, signal.SIGKILL, leader)
    _wait_gone(proctable.members(leader, needle, born) | targets, 5.0)
    return len(targets)


def _told(leader: int, targets: set[int], spare_leader: bool) -> set[int]:
    """Who gets the SIGTERM: every target, or, with the leader (bwrap) spared, what runs in its
    namespace but its init (the leader's child, deaf to a SIGTERM from outside). Cancelled as
    it starts, a confined command has nothing else yet: a grace would wait for nothing."""
    if not spare_leader:
        return targets
    return {pid for pid in targets - {leader} if proctable.parent(pid) != leader}


def _signal_all(pids: set[int], sig: signal.Signals, leader: int) -> None:
    if leader > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, sig)
    for pid in _parents_first(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _parents_first(pids: set[int]) -> list[int]:
    """``pids`` with every process before its descendants among them.

    A shell that traps SIGTERM must get it before its children die: signalled after them, it
    may reap them and run to its end first, and its trap never runs (a set's order would do
    that whenever a child's pid hashes before its parent's).
    """
    parent = {pid: proctable.parent(pid) for pid in pids}

    def depth(pid: int) -> int:
        seen = 0
        while parent.get(pid, 0) in parent and seen < len(parent):
            pid, seen = parent[pid], seen + 1
        return seen

    return sorted(pids, key=lambda pid: (depth(pid), pid))


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    """Wait until the processes exit (zombies count as gone); return those still alive."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except (ProcessLookupError, OSError):
            continue
    alive = set(fds.values())
    deadline = time.monotonic() + seconds
    try:
        with selectors.DefaultSelector() as sel:
            for fd in fds:
                sel.register(fd, selectors.EVENT_READ)
            while alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                events = sel.select(left)
                if not events:
                    break
                for key, _ in events:
                    sel.unregister(key.fd)
                    alive.discard(fds[key.fd])
    finally:
        for fd in fds:
            os.close(fd)
    return alive
