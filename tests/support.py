"""Helpers for tests: git in a repository, repositories with files, plans on disk.

Importable from every test module (``pythonpath = ["tests"]`` in pyproject.toml).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchardist import RunState, Workspace
from orchardist.confine.procs import MARKER_VAR
from orchardist.state.eventlog import Event
from orchardist.state.records import Run


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stripped stdout."""
    out = subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=os.environ
    )
    return out.stdout.strip()


def processes_with_env(name: str, value: str) -> set[int]:
    """Live processes (zombies aside) whose environment holds ``name=value``, read from /proc
    here rather than asked of orchardist, so a leak check sees what really still runs."""
    needle, me = f"{name}={value}".encode(), os.getpid()
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
            if stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.add(int(entry.name))
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def marked_processes(marker: str) -> set[int]:
    """Live processes carrying an attempt's process ``marker``."""
    return processes_with_env(MARKER_VAR, marker)


def baselines_cached(ws: Workspace) -> int:
    """How many baselines the workspace's store holds (each one a real run), read from its
    SQLite file."""
    with contextlib.closing(
        sqlite3.connect(f"{ws.store.path.resolve().as_uri()}?mode=ro", uri=True)
    ) as db:
        return int(db.execute("select count(*) from baselines").fetchone()[0])


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository at ``path`` with one commit of ``files``.

    Made once per content (and git identity) in each test process, then copied: the copy and
    a ``git update-index --refresh`` (the copied index holds the original files' inodes and
    ctimes, which plumbing such as ``git diff-index`` would take for changes) are one git
    process instead of an init, an add, a commit and its ``git maintenance``; about a third
    of the CPU (11 ms instead of 22-26 ms, measured under load). The repository is the same:
    the same objects, refs, reflog, config and files; only its one commit's date is that of the
    first repository of that content (several tests commit within one second anyway)."""
    files = files or {"README.md": "hello\n"}
    if path.exists() and any(path.iterdir()):
        return _init_repo(path, files)  # what is already there is committed too
    template = _TEMPLATES.get(key := _template_key(files))
    if template is None:
        template = _TEMPLATES[key] = _init_repo(_template_root() / str(len(_TEMPLATES)), files)
    shutil.copytree(template, path, symlinks=True, dirs_exist_ok=True)
    git(path, "update-index", "-q", "--refresh")
    return path


_TEMPLATES: dict[tuple[object, ...], Path] = {}


def _template_key(files: dict[str, str]) -> tuple[object, ...]:
    """What a repository made by ``make_repo`` depends on: the files, and whatever chooses its
    commit's identity and dates (the global config, git's and the identity's variables)."""
    config = Path.home() / ".gitconfig"
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("GIT_") or k == "EMAIL")
    return (tuple(files.items()), config.read_text() if config.exists() else None, tuple(env))


@functools.cache
def _template_root() -> Path:
    """A folder for this process's template repositories, removed when it exits."""
    root = Path(tempfile.mkdtemp(prefix="orchardist-test-repos-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _init_repo(path: Path, files: dict[str, str]) -> Path:
    """``git init`` at ``path``, then add and commit ``files`` and whatever is there."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    return path


def add_worktree(repo: Path, path: Path, commit: str) -> Path:
    """A detached git worktree of ``repo`` at ``commit`` (a checkout for the snapshot and
    hashing tests; orchardist's own attempt folders are worktree.Layout's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    return path


def write_plan(repo: Path, text: str, name: str = "plan.toml", commit: bool = False) -> Path:
    """Write a plan (dedented) into the repository; optionally commit it."""
    plan = repo / name
    plan.write_text(textwrap.dedent(text))
    if commit:
        git(repo, "add", name)
        git(repo, "commit", "-qm", f"add {name}")
    return plan


@dataclass
class Finished:
    """A run driven to its end through the public API, and what it left behind."""

    ws: Workspace
    run: Run
    state: RunState
    doc: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.ws.repo.root

    @property
    def branch(self) -> str:
        return self.run.branch

    def task(self, task_id: str) -> dict[str, Any]:
        """The task's entry in the status document."""
        return next(t for t in self.doc["tasks"] if t["id"] == task_id)

    def states(self) -> dict[str, str]:
        return {t["id"]: t["state"] for t in self.doc["tasks"]}

    def events(self, kind: str | None = None, task: str | None = None) -> list[Event]:
        return [
            e
            for e in self.ws.store.events(self.run.id)
            if (kind is None or e.kind == kind) and (task is None or e.task_id == task)
        ]

    def commits(self) -> list[str]:
        """The run branch's commits since the base, oldest first."""
        out = git(self.root, "rev-list", "--reverse", f"{self.run.base_commit}..{self.branch}")
        return out.split()

    def tree(self) -> set[str]:
        """Every path in the run branch's final tree."""
        return set(git(self.root, "ls-tree", "-r", "--name-only", self.branch).splitlines())

    def read(self, path: str) -> str:
        """A file of the run branch's final tree."""
        return git(self.root, "show", f"{self.branch}:{path}")


def toml_str(value: object) -> str:
    """``value`` as a TOML basic string (JSON's escapes are valid TOML)."""
    return json.dumps(str(value))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def running_with_arg(arg: str) -> set[int]:
    """Live processes (host pids) with ``arg`` among their arguments: a pid written from inside
    a pid namespace means nothing outside, a unique argument is seen from everywhere."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if arg.encode() in argv and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


@dataclass(frozen=True)
class Stubborn:
    """A child that takes SIGTERM as the start of a slow clean-up (``cleanup_s``), ignoring
    further SIGTERMs: it writes when the SIGTERM came to ``term_file``, and ``done_file`` only
    if it was left to finish. What it leaves shows how the SIGTERM-grace-SIGKILL went."""

    folder: Path
    cleanup_s: float

    @property
    def term_file(self) -> Path:
        return self.folder / "sigterm-at"

    @property
    def done_file(self) -> Path:
        return self.folder / "cleanup-done"

    def argv(self) -> list[str]:
        """The command line: prints ``ready`` once its handler is in place, then waits."""
        code = textwrap.dedent(
            f"""
            import signal, sys, time
            def term(*_):
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                open({str(self.term_file)!r}, "w").write(repr(time.time()))
                time.sleep({self.cleanup_s!r})
                open({str(self.done_file)!r}, "w").write("done")
                sys.exit(0)
            signal.signal(signal.SIGTERM, term)
            print("ready", flush=True)
            time.sleep(120)
            """
        )
        return [sys.executable, "-c", code]

    def grace_s(self, killed_at: float) -> float:
        """Seconds from the SIGTERM to ``killed_at`` (a ``time.time()``)."""
        return killed_at - float(self.term_file.read_text())


# The start of a ``python -c`` program that notes each dataclass made, as it is made, in
# ``made`` ("module.QualName"): each costs about a millisecond (its methods are compiled from
# source), so the start-up tests bound how many a command makes.
NOTING_DATACLASSES = """
import dataclasses
made = []
process_class = dataclasses._process_class
def noting(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return process_class(cls, *args, **kwargs)
dataclasses._process_class = noting
"""
