"""Shared fixtures: real git repositories in temporary folders, and plan writing."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist import Workspace, create_run, execute, load_plan, status_document
from orchardist.confine.confinement import SHARE_READONLY_VAR, SHARE_WRITABLE_VAR
from orchardist.confine.paths import ROOT_VAR
from orchardist.confine.procs import kill_by_env
from run_support import forked
from suite_order import slow_files_first
from support import Finished, make_repo


def pytest_configure(config: pytest.Config) -> None:
    """Let pytest cache its assertion-rewritten test modules even under
    PYTHONDONTWRITEBYTECODE=1: rewriting them all again costs each xdist worker ~4 s of CPU.
    Only this process's own imports are affected (the caches are ``__pycache__/*.pyc``, which
    git ignores); the processes the tests start keep the environment as it is."""
    sys.dont_write_bytecode = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files first (suite_order.py says why)."""
    slow_files_first(items)


@pytest.fixture(autouse=True, scope="session")
def _python_on_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``python`` and ``python3`` on PATH are this interpreter, as in an activated virtualenv,
    with pytest's plugin autoloading off: the verify commands the tests' plans run
    (``python -m pytest``) then start without the plugins of orchardist's dev environment
    (hypothesis, anyio, xdist), which none of those plans' suites use, in half the CPU time
    (0.41 to 0.45 s of CPU instead of 0.84 to 0.89 s each, measured on 2 cores). The venv's own
    scripts (``orchardist``, ``ray``) come next; anything that names ``sys.executable`` is
    unaffected."""
    folder = tmp_path_factory.mktemp("python-bin")
    for name in ("python", "python3"):
        wrapper = folder / name
        wrapper.write_text(
            f'#!/bin/sh\nPYTEST_DISABLE_PLUGIN_AUTOLOAD=1 exec "{sys.executable}" "$@"\n'
        )
        wrapper.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        parts = [str(folder), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        patch.setenv("PATH", os.pathsep.join(parts))
        yield folder


@pytest.fixture(scope="session")
def _git_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """git's template folder without its sample hooks (inactive files ending in .sample):
    ``git init`` then writes 3 files instead of 16; the folders (``hooks/``, ``info/``) and
    ``info/exclude`` are there as in any repository."""
    made = tmp_path_factory.mktemp("git-init")
    subprocess.run(["git", "init", "-q", str(made)], check=True, env={**os.environ, "HOME": "/"})
    folder = tmp_path_factory.mktemp("git-template") / "template"
    shutil.copytree(
        made / ".git",
        folder,
        ignore=lambda where, names: [
            name
            for name in names
            if name.endswith(".sample") or (Path(where) == made / ".git" and name in MADE_BY_INIT)
        ],
    )
    return folder


MADE_BY_INIT = {"HEAD", "config", "objects", "refs"}  # not from the template folder


@pytest.fixture(autouse=True)
def _isolated_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, _git_template: Path
) -> None:
    """No user or system git config leaks into tests; an identity is set unless a test drops it.

    The tests' own git commands (making repositories, committing their changes) run none of
    what git would start on its own: no ``git maintenance run --auto`` process after each
    commit (one git process in four when a test makes a repository), no sample hooks copied
    by ``git init``. orchardist's git reads no global config (git.env): what it runs is as
    it would be anyway."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n"
        f"[init]\n\tdefaultBranch = main\n\ttemplateDir = {_git_template}\n"
        "[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n"
    )


@pytest.fixture(autouse=True)
def _private_workdirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Attempt folders go to a temporary root, never to the real ~/.cache."""
    root = tmp_path_factory.mktemp("workdirs")
    monkeypatch.setenv(ROOT_VAR, str(root))
    return root


@pytest.fixture(autouse=True)
def _host_view_of_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Confined attempts see the tests' temporary folders read-only, as they see the rest of
    the host: in a real run, the repository and the agents' tools are not under /tmp."""
    monkeypatch.setenv(SHARE_READONLY_VAR, str(tmp_path_factory.getbasetemp()))


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A fresh repository with a README and a .gitignore for Python caches."""
    yield make_repo(
        tmp_path / "repo",
        {"README.md": "hello\n", ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    )


# -- end-to-end runs through the public API --------------------------------------------------

SHELL_PRELUDE = """\
set -eu
SYNC={sync}
PY={python}
wait_for() {{  # wait_for CMD...: until CMD succeeds; give up after about 10 s
  i=0
  until "$@"; do
    i=$((i + 1))
    [ "$i" -lt 400 ] || {{ echo "gave up waiting for: $*" >&2; exit 9; }}
    sleep 0.025
  done
}}
on_branch() {{  # on_branch PATH: the run branch's tip has PATH (read from the user's repository,
  # found through the alternates of the attempt's private git directory)
  user_git=$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")
  git --git-dir="$user_git" cat-file -e "orchardist/$ORCHARDIST_RUN:$1" 2>/dev/null
}}
"""


@pytest.fixture
def run_plan() -> Iterator[Callable[..., Finished]]:
    """Load, create and execute a plan (keyword arguments go to ``execute``)."""
    opened: list[Workspace] = []

    def run(plan_path: Path, **kwargs: Any) -> Finished:
        plan = load_plan(plan_path)
        ws = Workspace.open(plan.repo)
        opened.append(ws)
        run = create_run(ws, plan)
        state = execute(ws, plan, run, **kwargs)
        return Finished(ws, run, state, status_document(ws.store, ws.resolve_run(run.id)))

    yield run
    for ws in opened:
        ws.store.close()


@pytest.fixture
def sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside the repository where agents leave evidence and wait for each other."""
    path = tmp_path / "sync"
    path.mkdir()
    monkeypatch.setenv(SHARE_WRITABLE_VAR, str(path))  # writable inside confined attempts too
    return path


@pytest.fixture
def shell_scripts(tmp_path: Path, sync: Path) -> Callable[..., str]:
    """Write one shell script per task outside the repository; return a profile's ``command``.

    Each script starts with ``set -eu``, ``$SYNC`` (the ``sync`` folder), ``$PY`` (this Python),
    ``wait_for CMD...`` and ``on_branch PATH``. The returned command runs the task's own script.
    """
    folder = tmp_path / "agents"
    folder.mkdir(exist_ok=True)
    prelude = SHELL_PRELUDE.format(sync=shlex.quote(str(sync)), python=shlex.quote(sys.executable))

    def write(**bodies: str) -> str:
        for task, body in bodies.items():
            (folder / f"{task}.sh").write_text(prelude + textwrap.dedent(body))
        return f"sh {shlex.quote(str(folder))}/{{task}}.sh"

    return write


# -- orchestrators as separate processes -----------------------------------------------------


@pytest.fixture
def launch(repo: Path, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``orchardist ARGS`` in the repository, in its own session, output to
    ``orchestrator-N.log``: a fork of the test process (``run_support.Forked``).

    Whatever a failing test leaves is ended afterwards: orchestrators get SIGTERM, and the
    processes of every run in the repository are killed.
    """
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = forked(repo, *args, log=tmp_path / f"orchestrator-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
    ws = Workspace.open(repo)
    try:
        for run in ws.store.runs():
            kill_by_env("ORCHARDIST_RUN", run.id, grace_s=0.5)
    finally:
        ws.store.close()
