"""Continuing an agent's own session on the task's next attempt.

A retry after a failed verification (and a reviewer's change request) is the same agent working
on the same task again. Started afresh, it reads the whole brief and the repository again, and
the provider's prompt cache misses; continued, it keeps what it learned and is told only what
went wrong (:attr:`AttemptJob.followup`). Each agent CLI keeps its sessions in files under its
HOME, and an attempt's HOME is private and emptied before verify runs, so the files named by the
kind's ``session_files`` are copied out when the agent ends, into orchardist's state folder::

    <state>/sessions/<run>/<task>/<candidate>-<profile>/session.json   the tool, its session id
                                                          /home/…         its session files

and back into the next attempt's HOME of that task, candidate and profile only: another task's
attempt, or another profile's, never sees them. The agent is then asked to continue the session
by its id (``AgentContext.resume``); a kind that cannot, a session that was never recorded, one
that worked in another folder (without isolation's view each attempt's tree has a path of its
own, which the conversation names), or files that are missing start afresh with the whole
prompt and, quoted, what the agent said at the end of its earlier session. Which one happened
is the attempt's ``session`` note: ``continued <id>`` or ``fresh (why)``.

Session files come from the agent's HOME: only regular files and folders are copied (never a
symlink or a FIFO, never through one), and no more than :data:`MAX_SESSION_BYTES` in all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..quoting import quoted
from ..safeio import copy_regular, fresh_folder, read_capped, remove_tree, write_whole

MAX_SESSION_BYTES = 64 << 20  # a tool's session files kept per task; larger ones are not kept
SAID_CHARS = 4000  # what the agent said last, quoted to a fresh session that replaces it
RECORD = "session.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class SessionKey:
    """Whose session it is: one task's attempts by one candidate slot and profile."""

    run_id: str
    task_id: str
    candidate: int
    profile: str

    def folder(self, root: Path) -> Path:
        """Its folder under ``root``."""
        return (
            root
            / _safe(self.run_id)
            / _safe(self.task_id)
            / f"{self.candidate}-{_safe(self.profile)}"
        )


@dataclass(frozen=True)
class Saved:
    """A session kept after an attempt ended."""

    kind: str  # the agent kind that wrote it
    session_id: str
    attempt: int
    said: str = ""  # what the agent said at its end (summary or error), for a fresh start
    where: str = ""  # the folder it worked in, as it saw it: its conversation names paths there


@dataclass(frozen=True)
class Continuation:
    """How an attempt's agent starts: continuing a session (``resume``), or afresh."""

    prompt: str  # what the agent is told
    resume: str | None = None  # the session id it continues
    note: str = ""  # ``continued <id>`` / ``fresh (why)``; "" when nothing was to continue


class Sessions:
    """The session files of a run's tasks, in orchardist's state folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def begin(
        self,
        key: SessionKey,
        kind: str,
        files: tuple[str, ...],
        prompt: str,
        followup: str,
        home: Path,
        where: str = "",
    ) -> Continuation:
        """How the attempt starts, its session files put back in ``home`` when it continues
        (``followup``: what a continued session is told; "" starts afresh). ``where``: the
        folder it works in, as it sees it; a session that worked elsewhere is not continued
        (its paths would lead the agent to the earlier attempt's folder)."""
        if not followup:
            return Continuation(prompt)
        if not files:
            return Continuation(prompt, note=f"fresh ({kind} cannot continue a session)")
        saved = self.load(key)
        if saved is None:
            return Continuation(prompt, note="fresh (no earlier session of this task)")
        if saved.kind != kind:
            return fresh(prompt, saved, f"the earlier session is {saved.kind}'s")
        if saved.where != where:
            return fresh(prompt, saved, f"the earlier session worked in {saved.where}")
        if not self.restore(key, files, home):
            return fresh(prompt, saved, "its session files are missing")
        return Continuation(followup, saved.session_id, f"continued {saved.session_id}")

    def load(self, key: SessionKey) -> Saved | None:
        """The session kept for ``key``, if any."""
        data = read_capped(key.folder(self.root) / RECORD, 1 << 20)
        try:
            record = json.loads(data or b"")
            return Saved(
                str(record["kind"]),
                str(record["session_id"]),
                int(record["attempt"]),
                str(record.get("said", "")),
                str(record.get("where", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def keep(self, key: SessionKey, saved: Saved, files: tuple[str, ...], home: Path) -> str:
        """Keep an ended attempt's session, replacing the task's earlier one; why it was not
        kept, or ""."""
        folder = key.folder(self.root)
        record = {
            "kind": saved.kind,
            "session_id": saved.session_id,
            "attempt": saved.attempt,
            "said": saved.said[-SAID_CHARS:],
            "where": saved.where,
        }
        try:
            fresh_folder_tree(folder)
            copied = copy_files(home, folder / "home", files, MAX_SESSION_BYTES)
            if copied is not None:
                write_whole(folder / RECORD, json.dumps(record).encode())
                return ""
        except OSError as exc:
            with contextlib.suppress(OSError):
                remove_tree(folder)
            return f"cannot write them: {exc}"
        remove_tree(folder)
        return f"larger than {MAX_SESSION_BYTES >> 20} MiB"

    def restore(self, key: SessionKey, files: tuple[str, ...], home: Path) -> bool:
        """Put the kept session files back into ``home``; False when none are there."""
        kept = key.folder(self.root) / "home"
        if not any(os.path.lexists(kept / name) for name in files):
            return False
        with contextlib.suppress(OSError):
            return copy_files(kept, home, files, MAX_SESSION_BYTES) is not None
        return False

    def forget(self, run_id: str) -> None:
        """Remove a run's kept sessions."""
        remove_tree(self.root / _safe(run_id))


def fresh(prompt: str, saved: Saved, why: str) -> Continuation:
    """A fresh start with the whole prompt and, quoted, what the earlier session ended with."""
    if saved.said.strip():
        label = "What the agent said at the end of its earlier session on this task"
        prompt = f"{prompt.rstrip()}\n\n{quoted(saved.said[-SAID_CHARS:], label)}\n"
    return Continuation(prompt, note=f"fresh ({why})")


def copy_files(source: Path, target: Path, names: tuple[str, ...], limit: int) -> int | None:
    """Copy ``names`` (files or folders, relative) from ``source`` to ``target``: regular
    files and folders only, never through a symlink. Returns the bytes copied, or None when
    they would pass ``limit`` (what was copied stays)."""
    total = 0
    for name in names:
        for path in _walk(source, Path(name)):
            rel = path.relative_to(source)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                (target / rel).mkdir(parents=True, exist_ok=True)
                continue
            total += st.st_size
            if total > limit:
                return None
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            copy_regular(path, target / rel)
    return total


def _walk(root: Path, rel: Path) -> list[Path]:
    """``root/rel`` and, for a folder, everything in it; regular files and folders only, and
    only beneath folders that are real ones (no symlink on the way)."""
    path = root
    for part in rel.parts:
        path = path / part
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return []
    if not os.path.lexists(path):
        return []
    found = []
    for folder, dirs, names in os.walk(path, followlinks=False):
        here = Path(folder)
        found.append(here)
        for name in sorted(names):
            if stat.S_ISREG(os.lstat(here / name).st_mode):
                found.append(here / name)
        dirs[:] = [d for d in sorted(dirs) if not os.path.islink(here / d)]
    if not found:  # a single file
        return [path] if stat.S_ISREG(os.lstat(path).st_mode) else []
    return found


def fresh_folder_tree(folder: Path) -> None:
    """An empty ``folder``, its parents made."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh_folder(folder)


def _safe(name: str) -> str:
    return _UNSAFE.sub("-", name).strip(".-") or "_"
