"""Helpers for tests that drive whole runs: the CLI as a real process, and leak checks.

Shared by the resume, policy, containment and gc tests. Everything here works on a repository
in a temporary folder; nothing touches the repository the tests live in.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import gc
import importlib
import logging
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from orchardist import Workspace, status_document
from orchardist.__main__ import main
from orchardist.confine.paths import repo_key, workdir_root
from orchardist.git.env import GIT
from support import git, processes_with_env

ORCHARDIST = [sys.executable, "-m", "orchardist"]


def orchardist(
    root: Path,
    *args: str,
    timeout_s: float = 120.0,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in ``root`` to its end, in a process of its own: stdin closed (or ``stdin``),
    output captured, ``env`` (default: this one's) its environment.

    The process is a fork of this one calling the console script's entry point
    (``orchardist.__main__.main``, which reads ``sys.argv``), not a new interpreter:
    what the command does, with its own pid, working folder, environment, signals, locks and
    exit status, is the same, without the ~0.2 s of CPU a fresh ``python -m orchardist`` spends
    starting and importing (most of the cost of the quick loop's short commands). The console
    script itself and what a command imports are tested by ``tests/cli/test_cli_startup.py``,
    ``test_resume.py``'s ``python -m orchardist`` test and the others that run ``ORCHARDIST``.
    """
    if threading.active_count() > 1:  # a fork would copy other threads' held locks, not them
        return subprocess.run(
            [*ORCHARDIST, *args], cwd=root, input=stdin or "", env=env, capture_output=True,
            text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="orchardist-cli-") as folder:
        files = [Path(folder) / name for name in ("stdin", "stdout", "stderr")]
        files[0].write_text(stdin or "")
        fds = [os.open(files[0], os.O_RDONLY)]
        fds += [os.open(f, os.O_WRONLY | os.O_CREAT, 0o600) for f in files[1:]]
        _import_what_forks_imported()
        for stream in (sys.stdout, sys.stderr):  # nothing of the test's is written twice
            stream.flush()
        try:
            pid = os.fork()
            if pid == 0:
                _forked_main(root, args, fds, env)
            code = _wait(pid, timeout_s, [*ORCHARDIST, *args])
        finally:
            for fd in fds:
                os.close(fd)
        out, err = (f.read_text(errors="replace") for f in files[1:])
    return subprocess.CompletedProcess([*ORCHARDIST, *args], code, out, err)


def interpreter(
    root: Path, *args: str, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in ``root`` in a new interpreter (``python -m orchardist``), stdin closed:
    for the tests of real agent CLIs, which check a whole installation as a user has it, and
    for those that read the orchestrator from outside (``/proc/PID/environ`` is the
    environment a process was started with: a fork shows its parent's)."""
    return subprocess.run(
        [*ORCHARDIST, *args],
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _wait(pid: int, timeout_s: float, argv: list[str]) -> int:
    """The exit code of child ``pid`` as ``subprocess`` gives it; killed (and reaped) after
    ``timeout_s`` or when the wait is interrupted, as ``subprocess.run`` kills its child."""
    pidfd = os.pidfd_open(pid)
    ready: list[int] = []
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if not ready:
        raise subprocess.TimeoutExpired(argv, timeout_s)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _forked_main(
    root: Path, args: Sequence[str], fds: list[int], env: Mapping[str, str] | None
) -> NoReturn:
    """In the forked child: become a fresh ``python -m orchardist ARGS`` in ``root``, run it
    and exit with its code, never returning into the test that forked it."""
    code = 1
    inherited = (sys.stdout, sys.stderr)
    had = set(sys.modules)
    try:
        gc.freeze()  # the test's objects are its own: never finalized (closed) in here
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # a module imported before the fork may hold pytest's streams (``out=sys.stdout`` as a
        # default): what it writes there goes to the command's output too, as it would
        for stream, fd in zip(inherited, fds[1:], strict=True):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                if stream.fileno() > 2:
                    os.dup2(fd, stream.fileno())
        os.chdir(root)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        _fresh_interpreter_state(args)
        code = _exit_code()
        # as the interpreter does at exit: wake idle pool workers, wait for non-daemon threads
        # (the test's atexit functions are not the command's: they do not run here)
        getattr(threading, "_shutdown")()  # noqa: B009 - private, as the interpreter's own
    finally:
        for stream in (*inherited, sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):  # exiting whatever happens
                stream.flush()
        with contextlib.suppress(BaseException):
            _tell_what_was_imported(set(sys.modules) - had)
        os._exit(code & 0xFF)


# A forked command imports what its command needs (the run loop, the sandbox, the display) that
# the test process had not: ~0.08 s of CPU of a one-task run's ~0.25 s, paid again by each fork.
# Each fork leaves the names of orchardist's modules it imported here (its pid, at its exit);
# the test process imports them before its next fork, which then starts with them, as every
# fork after it does. What a command imports in a new interpreter is tested with new
# interpreters (tests/cli/test_cli_startup.py, test_cli.py), never with these forks. Ray's
# modules are left to the forks: a Ray client does not survive a fork.
_IMPORTED = Path(tempfile.mkdtemp(prefix="orchardist-forks-imported-"))
atexit.register(shutil.rmtree, _IMPORTED, True)  # (the forks leave by os._exit: not theirs)
_NOT_PRELOADED = ("orchardist.executors.ray",)


def _tell_what_was_imported(names: set[str]) -> None:
    """In a forked child at its exit: the orchardist modules it imported, for its parent."""
    wanted = sorted(n for n in names if n.startswith("orchardist.") and sys.modules.get(n))
    if wanted:
        (_IMPORTED / str(os.getpid())).write_text("\n".join(wanted))


def _import_what_forks_imported() -> None:
    """Import in this process the modules earlier forks imported (see above)."""
    for told in list(_IMPORTED.iterdir()):
        names = told.read_text().split()
        told.unlink()
        for name in names:
            if name not in sys.modules and not name.startswith(_NOT_PRELOADED):
                with contextlib.suppress(Exception):
                    importlib.import_module(name)


def _fresh_interpreter_state(args: Sequence[str]) -> None:
    """What a new interpreter would have and pytest changed: standard streams on fds 0-2,
    default signal handlers and mask, Python's default warning filters, no log handlers, and
    none of orchardist's once-per-process answers (``functools.cache``) computed for another
    test's environment."""
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    for name in ("stdin", "stdout", "stderr"):
        setattr(sys, f"__{name}__", getattr(sys, name))
    sys.argv = [str(Path(str(sys.modules["orchardist"].__file__)).with_name("__main__.py")), *args]
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    warnings.resetwarnings()
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    warnings.simplefilter("ignore", ImportWarning)
    warnings.simplefilter("ignore", ResourceWarning)
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    for name, module in list(sys.modules.items()):
        if name.startswith("orchardist") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
    _fresh_module_state()


def _fresh_module_state() -> None:
    """The state orchardist's modules keep once per process, as a new interpreter has it: locks
    another thread of the test process may have held as it forked, and the private mount
    namespace (confine.mounts), which an earlier test's run made for this process and which
    the command must not share (its overlays would outlive it: a kill -9 of a forked
    orchestrator left its attempt folders mounted, and a resume could not remove them)."""
    mounts = sys.modules.get("orchardist.confine.mounts")
    if mounts is not None:
        mounts._lock = threading.Lock()
        mounts._tried, mounts._namespace, mounts._namespace_fd = False, None, None
    views = sys.modules.get("orchardist.executors.views")
    if views is not None:
        views._lock = threading.Lock()


def _exit_code() -> int:
    """``sys.exit(main())`` with ``sys.argv`` set to ARGS, as the interpreter turns it into an
    exit status."""
    try:
        return main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


class Forked(subprocess.Popen[Any]):
    """``subprocess.Popen([*ORCHARDIST, *ARGS], ...)`` whose child is a fork of this process
    running the CLI as ``orchardist`` does, not a new interpreter: the same pid to signal, wait
    for or kill -9, the same session, pipes, working folder, environment and exit status,
    without the 0.25-0.3 s of CPU a new ``python -m orchardist run`` or ``serve`` spends
    starting and importing. What differs is what the kernel keeps from the process's start:
    ``/proc/PID/environ`` and ``cmdline`` are the test process's (tests that read them, and
    those of Ray, whose client does not survive a fork, use ``spawn``'s new interpreter), and
    what orchardist resolves as it is imported (``git`` on PATH: where a test put another git
    first on PATH, the child is a new interpreter, as it would be)."""

    def _execute_child(  # subprocess.Popen's own (private) signature, overridden
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        restore_signals: Any,
        gid: Any,
        gids: Any,
        uid: Any,
        umask: Any,
        start_new_session: bool,
        process_group: Any,
    ) -> None:
        argv = list(args)
        if argv[: len(ORCHARDIST)] != ORCHARDIST or shell or preexec_fn is not None:
            raise ValueError(f"Forked runs the CLI only ([*ORCHARDIST, ...]), not {argv}")
        if (
            shutil.which("git", path=(env or os.environ).get("PATH")) != GIT
            or threading.active_count() > 1
        ):
            # git is found on PATH once, as orchardist is imported: a test that put a git of
            # its own first on PATH since this process imported it needs a new interpreter.
            # So does a test with other threads running (a run in a thread): the fork would
            # hold forever any lock one of them held at that instant (SQLite keeps
            # process-wide mutexes; Python 3.12 warns of such forks)
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                restore_signals, gid, gids, uid, umask, start_new_session, process_group,
            )  # fmt: skip
        fds = [fd if fd != -1 else n for n, fd in enumerate((p2cread, c2pwrite, errwrite))]
        _import_what_forks_imported()
        for stream in (sys.stdout, sys.stderr):  # nothing of the test's is written twice
            stream.flush()
        pid = os.fork()
        if pid == 0:
            for fd in (p2cwrite, c2pread, errread):  # the parent's ends of the pipes
                if fd != -1:
                    os.close(fd)
            if start_new_session:
                os.setsid()
            _forked_main(Path(cwd or os.getcwd()), argv[len(ORCHARDIST) :], fds, env)
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def forked(root: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start the CLI in its own session (as from a terminal of its own), output to ``log``, in a
    fork of this process (``Forked``)."""
    return spawn(root, *args, log=log, start=Forked)


def spawn(
    root: Path, *args: str, log: Path, start: type[subprocess.Popen[Any]] = subprocess.Popen
) -> subprocess.Popen[bytes]:
    """Start the CLI in its own session (as from a terminal of its own), output to ``log``, in
    a new interpreter (``forked`` is cheaper where a fork shows the same)."""
    with log.open("wb") as out:
        return start(
            [*ORCHARDIST, *args],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class Gate:
    """A gate scripted agents wait at without spinning: the test holds an exclusive lock on a
    file from the start, and ``flock -s -w LIMIT_S FILE true`` in a script blocks in the
    kernel until :meth:`open` lets every waiter through, at once and for good. (A loop testing
    for a file costs ~0.055 s of CPU per second waited: a ``sleep`` every 10-50 ms.)"""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def waited(self) -> str:
        """The shell command that waits at the gate (for good: the test opens it in the end)."""
        return f"flock -s {shlex.quote(str(self.path))} true"

    def open(self) -> None:
        """Let the waiters through; forks of this process holding the file share its lock,
        which this unlocks for all of them (closing this copy would not)."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        """Open (no waiter is left blocked, whatever the test did), then close."""
        self.open()
        self.close()


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Wait for something another process does (a file appearing, a state in the store).

    The condition is asked again after 20 ms, then twice as long each time up to 100 ms: a
    condition that reads the store (a git process and an SQLite open, ~7 ms of CPU) was asked
    15-27 times while a run started, 0.3-0.5 s."""
    deadline = time.monotonic() + timeout_s
    pause = 0.02
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


def status(root: Path, run_id: str) -> dict[str, Any]:
    """The run's status document, read from the store."""
    ws = Workspace.open(root)
    try:
        return status_document(ws.store, ws.resolve_run(run_id))
    finally:
        ws.store.close()


def has_run(root: Path) -> bool:
    """Whether the repository's store records a run yet (a starting orchestrator may not have
    made the store, or committed its run, when its branch already exists)."""
    if not (root / ".git" / "orchardist" / "state.db").exists():
        return False
    ws = Workspace.open(root, create=False)
    try:
        return bool(ws.store.runs())
    finally:
        ws.store.close()


def only_run(root: Path) -> str:
    """The id of the repository's one run."""
    ws = Workspace.open(root)
    try:
        (run,) = ws.store.runs()
        return run.id
    finally:
        ws.store.close()


def leftovers(root: Path, run_id: str) -> list[str]:
    """What a run must not leave behind: live processes, worktrees, worktree folders."""
    found = []
    procs = processes_with_env("ORCHARDIST_RUN", run_id)
    if procs:
        found.append(f"processes {sorted(procs)}")
    worktrees = [
        line[len("worktree ") :]
        for line in git(root, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    if worktrees != [str(root)]:
        found.append(f"worktrees {worktrees[1:]}")
    folder = run_folder(root, run_id)
    if folder.exists() and any(folder.iterdir()):
        found.append(f"attempt folders {sorted(p.name for p in folder.iterdir())}")
    return found


def run_folder(root: Path, run_id: str) -> Path:
    """Where a run's attempt folders are (under the tests' ORCHARDIST_WORKDIR_ROOT)."""
    common = Path(git(root, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    return workdir_root() / repo_key(common) / "runs" / run_id


def task_trailers(root: Path, base: str, branch: str) -> list[str]:
    """The ``Orchardist-Task`` of each commit on ``base..branch``, oldest first."""
    out = git(
        root,
        "log",
        "--reverse",
        "--format=%(trailers:key=Orchardist-Task,valueonly)%x1e",
        f"{base}..{branch}",
    )
    return [chunk.strip() for chunk in out.split("\x1e") if chunk.strip()]


def attempt_states(doc: dict[str, Any], task_id: str) -> list[str]:
    """States of a task's attempts, oldest first."""
    return [a["state"] for t in doc["tasks"] if t["id"] == task_id for a in t["attempts"]]
