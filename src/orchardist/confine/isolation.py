"""Namespaces for every agent and command: deny by default instead of listing what to protect.

With bubblewrap (``bwrap``) each confined process gets

- its own pid namespace, whose init is killed when the process we started ends (or when the
  thread that started it dies): the kernel then kills everything left inside, daemons that
  called ``setsid`` or cleared their environment included. ``/proc`` inside shows only the
  namespace's own processes, so the orchestrator's environment cannot be read;
- a read-only view of the host, with writable only the paths of its
  :class:`~.spec.Spec` (the
  attempt's tree, git dir, home, tmp and io folders), a private ``/tmp``, a minimal ``/dev``
  (null, zero, random, tty, ...: no block devices) and a fresh ``/proc``;
- no capabilities, and no network but loopback unless the spec allows it.

Where namespaces cannot be made (no ``bwrap``, user namespaces disabled), the older Landlock
layer (:mod:`orchardist.confine.landlock`) confines writes only; :func:`choose` picks the mode from
the
plan's ``[run] isolation`` policy and :func:`describe` says which one a run got; :mod:`.spec`
holds how one process is confined (:class:`~.spec.Spec`) and the command line that does it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import IsolationError

if TYPE_CHECKING:
    from .bwrapprobe import Probe

PROBE_TIMEOUT_S = 10.0


class Policy(StrEnum):
    """What the plan asks for (``[run] isolation``)."""

    AUTO = "auto"  # namespaces where they work, else Landlock, else nothing
    REQUIRED = "required"  # namespaces, or refuse to run
    LANDLOCK = "landlock"  # Landlock write confinement only
    OFF = "off"  # no confinement: detection after the fact only


class Mode(StrEnum):
    """What a run actually gets."""

    NAMESPACES = "namespaces"  # bwrap: private pid space, read-only host, private /tmp
    LANDLOCK = "landlock"  # writes confined beneath the writable set; same pid space
    NONE = "none"  # nothing confined


@cache
def probe() -> Probe:
    """Find bwrap and check, once per process, that it can make the namespaces we use."""
    from ..git.which import which  # (here: a Ray node's reaper imports this module, no git)
    from .bwrapprobe import Probe  # (made only where it is asked: validate asks only if need be)

    found = which("bwrap")
    if found is None:
        return Probe(None, False, reason="bwrap not found on PATH (install bubblewrap)")
    argv = [
        *namespaces(found, network=False, tmp=None),
        "--",
        "/bin/true",
    ]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
        version = subprocess.run(
            [found, "--version"], capture_output=True, timeout=PROBE_TIMEOUT_S, text=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(found, False, reason=f"{found} failed to start: {exc}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit {done.returncode}"
        return Probe(found, False, reason=f"bwrap cannot create namespaces here: {why}")
    return Probe(found, True, version=version)


def namespaces(bwrap: str, network: bool, tmp: Path | None) -> list[str]:
    """The namespaces and the read-only host, before a spec's own paths (:mod:`.spec`);
    ``network`` False: loopback only; ``tmp`` None: an empty ``/tmp``.

    No ``--new-session``: procs.py already starts each child in its own session without a
    controlling terminal (so no TIOCSTI), and keeping the command in that process group lets
    a timeout send it SIGTERM before the namespace is torn down.
    """
    argv = [
        bwrap,
        "--die-with-parent",  # the namespace's init dies with bwrap, and bwrap with us
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    if not network:
        argv.append("--unshare-net")
    if tmp is None:
        argv += ["--tmpfs", "/tmp"]
    else:
        argv += ["--bind", str(tmp), "/tmp"]
    return argv


def _landlock_available() -> bool:
    """Whether the kernel offers Landlock; its module (and ctypes) imported only when asked,
    which ``validate`` never does for a plan whose commands namespaces would show."""
    from . import landlock

    return landlock.available()


def choose(
    policy: Policy,
    *,
    found: Callable[[], Probe] = probe,
    landlock: Callable[[], bool] = _landlock_available,
) -> Mode:
    """The mode a run gets under ``policy``; IsolationError when "required" cannot be met."""
    if policy is Policy.OFF:
        return Mode.NONE
    if policy is Policy.LANDLOCK:
        return Mode.LANDLOCK if landlock() else Mode.NONE
    result = found()
    if result.usable:
        return Mode.NAMESPACES
    if policy is Policy.REQUIRED:
        raise IsolationError(
            f'[run] isolation = "required", but namespaces are unavailable: {result.reason}. '
            'Install bubblewrap, or set isolation = "auto" to fall back to Landlock'
        )
    return Mode.LANDLOCK if landlock() else Mode.NONE


def describe(policy: Policy, mode: Mode, found: Callable[[], Probe] = probe) -> str:
    """One line for the top of a run: which isolation it got, and why when it is weaker."""
    if mode is Mode.NAMESPACES:
        return f"isolation: namespaces ({found().version or 'bwrap'})"
    if policy is Policy.OFF:
        return 'isolation off: [run] isolation = "off"'
    why = "" if policy is Policy.LANDLOCK else f"; namespaces unavailable: {found().reason}"
    if mode is Mode.LANDLOCK:
        from . import landlock as sandbox

        return f"isolation: Landlock ABI {sandbox.abi_version()}, writes only{why}"
    return f"isolation off: no namespaces and no Landlock, writes only detected afterwards{why}"


def hidden_by_tmp(paths: Iterable[Path | str]) -> tuple[Path, ...]:
    """Those of ``paths`` that live under the host's ``/tmp``, resolved: the private ``/tmp``
    hides them, so whatever a confined process must still read there (the interpreter, tools
    on ``PATH``, the user's objects) is bound again, read-only."""
    found = []
    for path in paths:
        if not path:
            continue
        real = Path(os.path.realpath(path))
        if real.is_relative_to("/tmp") and real != Path("/tmp"):
            found.append(real)
    return tuple(dict.fromkeys(found))
