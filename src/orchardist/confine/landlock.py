"""Write containment with Linux Landlock: an agent may write only where its attempt may.

A Landlock domain belongs to the thread that makes it, and every process that thread starts
inherits it, for good. :func:`confined_call` therefore starts a confined child from a fresh
thread that restricts itself first and ends right after: no second interpreter before the
program (the wrapper below cost ~17 ms of CPU a process), and no code run between ``fork`` and
``exec`` (no ``preexec_fn``, which is unsafe with threads). Reading and executing stay
unrestricted; creating, changing, renaming or deleting files is allowed only beneath the given
directories.

``python -m orchardist.confine.landlock --write DIR ... -- PROGRAM ARGS`` does the same as a
wrapper: it restricts itself, then execs the program (what ``doctor`` shows a confined command
as). On a kernel without Landlock neither is used (:func:`available` says so), and detection
after the fact (see the executor) still applies.
"""

from __future__ import annotations

# The wrapper runs as a script before every sandboxed program: it imports only what it needs
# (``os``, ``sys``, ``ctypes``), not ``pathlib``, ``contextlib``, ``functools`` or ``typing``,
# whose imports took more than its interpreter's start-up.
import ctypes
import os
import sys

TYPE_CHECKING = False  # the type checker's names, without importing ``typing`` at run time

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import TypeVar

    _T = TypeVar("_T")

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64/arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_VERSION_FLAG = 1

# Write-like access rights by the Landlock ABI version that introduced them.
_WRITE_FILE = 1 << 1
_V1_WRITES = (
    _WRITE_FILE
    | (1 << 4)  # remove dir
    | (1 << 5)  # remove file
    | (1 << 6)  # make char
    | (1 << 7)  # make dir
    | (1 << 8)  # make reg
    | (1 << 9)  # make sock
    | (1 << 10)  # make fifo
    | (1 << 11)  # make block
    | (1 << 12)  # make sym
)
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE  # the rights that apply to a single file


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # ABI 4
        ("scoped", ctypes.c_uint64),  # ABI 6
    ]


# ABI 6 scopes: no signals to, and no abstract unix sockets of, processes outside the sandbox
# (the orchestrator, other candidates).
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


_abi: list[int] = []  # the version, once asked


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is unavailable."""
    if not _abi:
        _abi.append(_ask_abi())
    return _abi[0]


def _ask_abi() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _VERSION_FLAG)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def available() -> bool:
    """Whether this kernel can confine writes."""
    return abi_version() >= 1


def handled_rights(abi: int) -> int:
    """The write rights a ruleset handles on this ABI."""
    rights = _V1_WRITES
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


def restrict_writes(writable: Sequence[str | Path]) -> None:
    """Confine this process and its future children to writing beneath ``writable``."""
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available on this kernel")
    libc = _libc()
    rights = handled_rights(abi)
    attr = _RulesetAttr(rights, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0)
    # Older kernels take the shorter struct they know.
    size = ctypes.sizeof(attr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist cannot be written either
            try:
                allowed = rights if os.path.isdir(path) else rights & _FILE_RIGHTS
                rule = _PathBeneathAttr(allowed, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


def confined_call(start: Callable[[], _T], writable: Sequence[str | Path]) -> _T:
    """``start()`` run on a new thread confined to writing beneath ``writable``: every process
    it starts is confined, and so are their descendants. The thread ends with the call, so the
    domain leaves with it; nothing else in this process is restricted. An OSError when the
    domain cannot be made (``start`` is then not called)."""
    import threading  # not at the top: the wrapper script imports only os, sys and ctypes

    outcome: list[tuple[bool, object]] = []
    done = threading.Event()

    def run() -> None:
        try:
            restrict_writes(writable)  # this thread only: no_new_privs and Landlock are per task
            outcome.append((True, start()))
        except BaseException as exc:  # handed to the caller, raised there
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="landlock-start").start()
    try:
        done.wait()
    except BaseException:  # a Ctrl-C: the start ends first, so the caller can end what it started
        done.wait()
        raise
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def wrap(argv: Sequence[str], writable: Sequence[Path]) -> list[str]:
    """``argv`` run through the sandbox wrapper, allowed to write beneath ``writable``."""
    # Run this file as a script, isolated and without site: it needs only the standard
    # library, so it neither imports orchardist nor pays for its start-up.
    wrapped = [sys.executable, "-I", "-S", os.path.realpath(__file__)]
    for path in writable:
        wrapped += ["--write", str(path)]
    return [*wrapped, "--", *argv]


def beside(top: Path, protected: Sequence[Path]) -> list[Path]:
    """``top`` itself, or, when protected paths lie inside it, everything in ``top`` but the
    paths down to them (siblings at every level), so that the protected paths stay read-only.

    Symlinks are never allowed: Landlock follows them, and one could alias a protected path.
    """
    top = top.resolve()
    inside = [p.resolve() for p in protected if p.resolve().is_relative_to(top)]
    if not inside:
        return [top]
    if top in inside:
        return []
    allowed: list[Path] = []
    try:
        for child in top.iterdir():
            if child.is_symlink():
                continue
            real = child.resolve()
            if not any(p.is_relative_to(real) for p in inside):
                allowed.append(child)
            elif child.is_dir():
                allowed += beside(child, inside)
    except OSError:
        pass  # an unreadable folder: what was found so far
    return allowed


def main(args: Sequence[str]) -> int:
    """The wrapper: ``--write DIR``... ``--`` then the program to exec."""
    writable: list[str] = []
    rest = list(args)
    while rest and rest[0] == "--write":
        writable.append(rest[1])
        rest = rest[2:]
    if not rest or rest[0] != "--" or len(rest) < 2:
        print(
            "usage: python -m orchardist.confine.landlock [--write DIR]... -- PROGRAM [ARGS]",
            file=sys.stderr,
        )
        return 2
    try:
        restrict_writes(writable)
    except OSError as exc:
        print(f"orchardist sandbox: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(rest[1], rest[1:])
    except OSError as exc:
        print(f"orchardist sandbox: cannot run {rest[1]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
