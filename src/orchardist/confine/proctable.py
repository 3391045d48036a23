"""Reading the process table (``/proc``): who is in a process group or carries a marker in
its environment, when a process started, and its parent.

Apart from ending processes (procs.py), which asks these questions after every child: the
sweep reads one ``stat`` file per process on the machine, so it reads each with one
``os.open`` and ``os.read`` (no buffered file object: ~2/3 of ``open()``'s CPU a file).
"""

from __future__ import annotations

import os

_STAT_BYTES = 4096  # a stat line is under 1 KB; the comm field is at most 16 bytes


def _read(path: str, size: int = _STAT_BYTES) -> bytes:
    """The file's first ``size`` bytes (``/proc`` files are made whole at the first read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _environ(pid: int) -> bytes:
    """``pid``'s whole environment (it may be larger than one read returns)."""
    fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command's name (which may hold spaces)."""
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rindex(b")") + 2 :].split()


def parent(pid: int) -> int:
    """``pid``'s parent, 0 when it is gone."""
    try:
        return int(_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return 0


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot; 0 when unknown."""
    try:
        return int(_fields(pid)[19])
    except (OSError, ValueError, IndexError):
        return 0


def members(leader: int, needle: bytes | None, born: int = 0) -> set[int]:
    """Live (non-zombie) processes in ``leader``'s group, or whose environment holds ``needle``
    (looked at only in processes that started at tick ``born`` or later)."""
    found: set[int] = set()
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            fields = _fields(pid)
            state, pgrp = fields[0], int(fields[2])
            if state in (b"Z", b"X"):
                continue
            if leader > 0 and pgrp == leader:
                found.add(pid)
                continue
            if (
                needle is not None
                and int(fields[19]) >= born
                and needle in _environ(pid).split(b"\0")
            ):
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found
