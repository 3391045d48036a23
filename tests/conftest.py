"""Shared fixtures: real git repositories in temporary folders, and plan writing."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No user or system git config leaks into tests; an identity is set unless a test drops it."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
    )


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stripped stdout."""
    out = subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=os.environ
    )
    return out.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository at ``path`` with one commit of ``files``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, text in (files or {"README.md": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    return path


def write_plan(repo: Path, text: str, name: str = "plan.toml", commit: bool = False) -> Path:
    """Write a plan (dedented) into the repository; optionally commit it."""
    plan = repo / name
    plan.write_text(textwrap.dedent(text))
    if commit:
        git(repo, "add", name)
        git(repo, "commit", "-qm", f"add {name}")
    return plan


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A fresh repository with a README and a .gitignore for Python caches."""
    yield make_repo(
        tmp_path / "repo",
        {"README.md": "hello\n", ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    )
