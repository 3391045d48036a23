"""Child processes that always end on time, and leave nothing behind.

Every child starts in its own session (so its own process group), with stdin closed unless we
feed it a file, and with a marker variable in its environment that all its descendants inherit.
Ending a child means: SIGTERM to its group and to every process carrying its marker (which finds
those that called ``setsid`` or daemonized), a grace period, then SIGKILL to whatever is left.

A confined child (``confine``, see isolation.py) runs inside its own pid namespace when
namespaces are available: ending it ends the namespace, and the kernel kills everything in it.

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

from .isolation import Mode, Spec, wrap

MARKER_VAR = "ORCHARDIST_PROCESS_MARK"
DEFAULT_GRACE_S = 3.0
DEFAULT_MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
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


class _CappedLog:
    """Writes the first half of the budget to the file, keeps the last half in memory."""

    def __init__(self, path: Path, max_bytes: int, on_line: Callable[[bytes], None] | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("ab")
        self.head_left = self.head_max = max_bytes // 2
        self.tail_max = max_bytes - self.head_left
        self.tail = bytearray()
        self.total = 0
        self.on_line = on_line
        self.partial = bytearray()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        head = data[: max(self.head_left, 0)]
        if head:
            self.file.write(head)
            self.file.flush()
            self.head_left -= len(head)
        rest = data[len(head) :]
        if rest:
            self.tail += rest
            if len(self.tail) > 2 * self.tail_max:
                del self.tail[: len(self.tail) - self.tail_max]
        if self.on_line is not None:
            self._lines(data)

    def _lines(self, data: bytes) -> None:
        assert self.on_line is not None
        self.partial += data
        *lines, last = bytes(self.partial).split(b"\n")
        self.partial = bytearray(last if len(last) <= MAX_LINE_BYTES else b"")
        for line in lines:
            if len(line) <= MAX_LINE_BYTES:
                self.on_line(line)

    def close(self) -> bool:
        if self.on_line is not None and self.partial:
            self.on_line(bytes(self.partial))
        truncated = len(self.tail) > self.tail_max
        if self.tail:
            kept = self.tail[-self.tail_max :]
            # not file.tell(): the log may already hold earlier commands' output
            omitted = self.total - (self.head_max - self.head_left + len(kept))
            if omitted > 0:
                self.file.write(f"\n[orchardist: {omitted} bytes of output omitted]\n".encode())
            self.file.write(kept)
            truncated = omitted > 0
        self.file.close()
        return truncated


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
    spelling of a Landlock-only confinement.
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


def run_process(request: ProcessRequest) -> ProcessResult:
    """Run the request's child to its end, its timeout, or cancellation; always kill what it
    leaves."""
    cwd, clock = request.cwd, request.clock
    marker = request.marker or new_marker()
    argv, spare = _confined(request.argv, cwd, request.writable, request.confine)
    start = clock()
    sink = _CappedLog(request.log, request.max_log_bytes, request.on_line)
    proc = _start(argv, cwd, {**request.env, MARKER_VAR: marker}, request.stdin_file, sink)
    if proc is None:
        return ProcessResult(exit_code=127, duration_s=clock() - start)
    assert proc.stdout is not None
    deadline = None if request.timeout_s is None else start + request.timeout_s
    pidfd = -1
    try:  # from the child's first instant: a Ctrl-C in the main thread must not leave it
        pidfd = os.pidfd_open(proc.pid)
        pipe = proc.stdout.fileno()
        os.set_blocking(pipe, False)
        exited, timed_out, cancelled = _wait(
            pidfd, pipe, (request.cancel, request.stop), sink, deadline, clock
        )
        _end(proc, marker, exited, spare, request.grace_s)
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
    proc: subprocess.Popen[bytes], marker: str, exited: bool, spare: bool, grace_s: float
) -> None:
    """Kill what the child left (the child too, unless it ``exited``), then reap it."""
    # A namespace whose bwrap ended is empty: its init died, and the kernel reaps every
    # process in it before that death is reported. Nothing to look for in /proc.
    if not (exited and spare):
        kill_tree(proc.pid, marker, grace_s=0.0 if exited else grace_s, spare_leader=spare)
    proc.wait()


def _confined(
    argv: Sequence[str], cwd: Path, writable: Sequence[Path] | None, confine: Spec | None
) -> tuple[Sequence[str], bool]:
    """``argv`` wrapped in its confinement, and whether its leader (bwrap) is to be spared."""
    if confine is None and writable is not None:
        confine = Spec(tuple(writable), mode=Mode.LANDLOCK)
    if confine is not None:
        argv = wrap(argv, confine, cwd=cwd)
    # bwrap dies of SIGTERM at once and takes its namespace along: spare it until SIGKILL,
    # so that the command inside gets its grace period.
    return argv, confine is not None and confine.mode is Mode.NAMESPACES


def _start(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    stdin_file: Path | None,
    sink: _CappedLog,
) -> subprocess.Popen[bytes] | None:
    """The child in a session of its own, its output on a pipe; None, said in its log (then
    closed), when it cannot be started."""
    stdin = stdin_file.open("rb") if stdin_file is not None else None
    try:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        sink.write(f"orchardist: cannot start {argv[0]!r}: {exc}\n".encode())
        sink.close()
        return None
    finally:
        if stdin is not None:
            stdin.close()


def _wait(
    pidfd: int,
    pipe: int,
    tokens: Sequence[CancelToken | None],
    sink: _CappedLog,
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
    sink: _CappedLog,
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


def _read_into(fd: int, sink: _CappedLog) -> bool:
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


def _drain(fd: int, sink: _CappedLog, seconds: float) -> None:
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
    leader: int, marker: str | None, grace_s: float = DEFAULT_GRACE_S, spare_leader: bool = False
) -> int:
    """SIGTERM the group led by ``leader`` and every process with ``marker``; SIGKILL after grace.

    With ``spare_leader`` the leader itself gets only the SIGKILL. Returns how many processes
    had to be signalled. Waits for them on pidfds, not by polling.
    """
    needle = f"{MARKER_VAR}={marker}".encode() if marker else None
    return _kill(leader, needle, grace_s, spare_leader)


def kill_by_env(name: str, value: str, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Kill every process whose environment has ``name=value`` (cleanup after a crash)."""
    return _kill(-1, f"{name}={value}".encode(), grace_s)


def _kill(leader: int, needle: bytes | None, grace_s: float, spare_leader: bool = False) -> int:
    targets = _members(leader, needle)
    if not targets:
        return 0
    told = _told(leader, targets, spare_leader) if grace_s > 0 else set()
    if told:
        _signal_all(told, signal.SIGTERM, -1 if spare_leader else leader)
        survivors = _wait_gone(targets, grace_s)
        if survivors:
            _signal_all(survivors | _members(leader, needle), signal.SIGKILL, leader)
    else:
        _signal_all(targets, signal.SIGKILL, leader)
    _wait_gone(_members(leader, needle) | targets, 5.0)
    return len(targets)


def _told(leader: int, targets: set[int], spare_leader: bool) -> set[int]:
    """Who gets the SIGTERM: every target, or, with the leader (bwrap) spared, what runs in its
    namespace but its init (the leader's child, deaf to a SIGTERM from outside). Cancelled as
    it starts, a confined command has nothing else yet: a grace would wait for nothing."""
    if not spare_leader:
        return targets
    return {pid for pid in targets - {leader} if _parent(pid) != leader}


def _parent(pid: int) -> int:
    """``pid``'s parent, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError):
        return 0


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
    parent = {pid: _parent(pid) for pid in pids}

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


def _members(leader: int, needle: bytes | None) -> set[int]:
    """Live (non-zombie) processes in ``leader``'s group, or whose environment holds ``needle``."""
    found: set[int] = set()
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            state, pgrp = fields[0], int(fields[2])
            if state in (b"Z", b"X"):
                continue
            if leader > 0 and pgrp == leader:
                found.add(pid)
                continue
            if needle is not None:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        found.add(pid)
        except (OSError, ValueError):
            continue
    return found
