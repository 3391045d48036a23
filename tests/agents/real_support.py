"""Driving a real agent CLI through ``orchardist run`` on a one-bug repository."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from npm_registry import NpmRegistry

from orchardist import Workspace
from orchardist.confine.confinement import SHARE_READONLY_VAR
from realtools import TOOLS
from run_support import ORCHARDIST, only_run, status
from support import make_repo, toml_str, write_plan

BUGGY = "def add(a, b):\n    return a - b\n"
PROMPT = "add() in calc.py subtracts; make it add."
VERIFY = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"
# what a fresh private home lacks until orchardist makes the tools' state folders itself
HOME_STATE = (
    ".codex",
    ".cache/opencode",
    ".config/opencode",
    ".local/share",
    ".local/state",
    ".npm",
    ".bun",
    ".aider",
)


def copy_tree(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` as hard links, symlinks kept as they are; where links
    cannot be made (another file system), each top-level entry is a symlink to its source."""
    try:
        shutil.copytree(source, target, symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for entry in source.iterdir():
            (target / entry.name).symlink_to(entry.resolve())


def npm_links_first(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The npm CLIs of ``.ci/tools`` copied under ``folder`` (in the host's /tmp, which attempts
    do not see: the suite's sharing of its temporary folders is turned off), their ``.bin``
    first on PATH; that ``.bin``."""
    monkeypatch.delenv(SHARE_READONLY_VAR, raising=False)
    copy_tree(TOOLS / "node_modules", folder / "node_modules")
    bin_dir = folder / "node_modules" / ".bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def buggy_project(tmp_path: Path) -> Path:
    """A repository whose calc.add subtracts."""
    return make_repo(tmp_path / "repo", {"calc.py": BUGGY, ".gitignore": "__pycache__/\n"})


@contextlib.contextmanager
def local_npm(profile: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """For OpenCode, the profile and environment that send its start-up install of
    ``@opencode-ai/plugin`` to a stand-in registry on 127.0.0.1 (tests/agents/npm_registry.py);
    other kinds unchanged.

    Every test's repository is new, so orchardist has kept no tool cache for the profile yet
    (test_tool_caches.py shows it keeps one), and each OpenCode attempt fetched the plugin and
    its dependencies from the public registry, 16 MB: 12-20 s of waiting, a second of npm's CPU,
    and a test that needs the internet. The stand-in serves the version the pinned OpenCode asks
    for."""
    if profile.get("kind") != "opencode":
        yield profile, {}
        return
    package = json.loads((TOOLS / "node_modules" / "opencode-ai" / "package.json").read_text())
    with NpmRegistry(["@opencode-ai/plugin"], package["version"]) as registry:
        passed = [*profile.get("env", []), "NPM_CONFIG_REGISTRY"]
        yield {**profile, "env": passed}, {"NPM_CONFIG_REGISTRY": registry.url}


def run_task(
    project: Path,
    profile: dict[str, Any],
    env: dict[str, str],
    tmp_path: Path,
    task_keys: str = "",
    retries: int = 0,
) -> dict[str, Any]:
    """``orchardist run`` of the one fix task with an agent profile (its keys and values).

    ``env`` adds to a minimal environment (PATH and a fresh HOME); ``task_keys`` are more TOML
    lines for the task, retried ``retries`` times. Returns the task's status
    document, with the run's output under ``"output"``.
    """
    with local_npm(profile) as (profile, npm):
        (task,) = _run_plan(project, profile, {**env, **npm}, tmp_path, task_keys, retries, "")
    return task


def run_tasks(
    project: Path, profile: dict[str, Any], env: dict[str, str], tmp_path: Path, more: str
) -> dict[str, dict[str, Any]]:
    """As :func:`run_task`, with ``more`` of the plan after the fix task (other profiles, other
    tasks, in one run); every task's status document by its id. A profile of ``more`` that
    runs OpenCode passes ``NPM_CONFIG_REGISTRY`` (``env = ["NPM_CONFIG_REGISTRY"]``)."""
    with local_npm(profile) as (profile, npm):
        tasks = _run_plan(project, profile, {**env, **npm}, tmp_path, "", 0, more)
    return {task["id"]: task for task in tasks}


def _run_plan(
    project: Path,
    profile: dict[str, Any],
    env: dict[str, str],
    tmp_path: Path,
    task_keys: str,
    retries: int,
    more: str,
) -> list[dict[str, Any]]:
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in profile.items())
    plan = (
        f'[agents.tool]\ntimeout = "120s"\n{table}\n\n'
        f'[[task]]\nid = "fix"\nagent = "tool"\nretries = {retries}\nprompt = {toml_str(PROMPT)}\n'
        f"verify = {toml_str(VERIFY)}\n{task_keys}\n{more}"
    )
    write_plan(project, plan)
    home = tmp_path / "home"
    for name in HOME_STATE:
        (home / name).mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [*ORCHARDIST, "run", "plan.toml"],
        cwd=project,
        env={"PATH": os.environ["PATH"], "HOME": str(home), **workdir_root(), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    tasks: list[dict[str, Any]] = status(project, only_run(project))["tasks"]
    for task in tasks:
        task["output"] = proc.stdout + proc.stderr
    return tasks


def run_events(project: Path, kind: str) -> list[dict[str, Any]]:
    """The data of the run's events of one kind, from its store."""
    ws = Workspace.open(project)
    try:
        return [dict(e.data) for e in ws.store.events(only_run(project)) if e.kind == kind]
    finally:
        ws.store.close()


def breaker_states(project: Path) -> list[str]:
    """The states the run's circuit breakers went through."""
    return [str(data.get("state")) for data in run_events(project, "breaker")]


def requeued(project: Path) -> list[dict[str, Any]]:
    """The attempts requeued without counting a retry (rate limits), from the events."""
    return [data for data in run_events(project, "attempt") if data.get("state") == "requeued"]


def workdir_root() -> dict[str, str]:
    """The test session's folder for orchardist's attempt folders (conftest sets it)."""
    root = os.environ.get("ORCHARDIST_WORKDIR_ROOT")
    return {"ORCHARDIST_WORKDIR_ROOT": root} if root else {}
