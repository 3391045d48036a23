"""Where the real agent CLIs are: installed by ``.ci/tools.sh`` into ``.ci/tools``, else on PATH.

A test that drives a real CLI calls :func:`require_tool`: it skips with the reason when the tool is
absent, and fails instead when env ``CI`` is set (CI must run every real-CLI test). A test of
another production path that may be missing on a developer's machine (a shell, Landlock,
overlays) calls :func:`require` the same way: a skip there must not hide on CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / ".ci" / "tools"

# executable name -> where .ci/tools.sh puts it
INSTALLED = {
    "claude": TOOLS / "node_modules" / ".bin" / "claude",
    "codex": TOOLS / "node_modules" / ".bin" / "codex",
    "gemini": TOOLS / "node_modules" / ".bin" / "gemini",
    "opencode": TOOLS / "node_modules" / ".bin" / "opencode",
    "aider": TOOLS / "aider-venv" / "bin" / "aider",
}


def find_tool(name: str) -> Path | None:
    """The real ``name`` executable: the one in ``.ci/tools`` first, then PATH."""
    installed = INSTALLED.get(name)
    if installed is not None and os.access(installed, os.X_OK):
        return installed
    found = shutil.which(name)
    return Path(found) if found else None


def require_tool(name: str) -> Path:
    """The real ``name`` executable; skip without it, or fail when env CI is set."""
    found = find_tool(name)
    if found is not None:
        return found
    reason = f"real {name} CLI not installed (run `bash .ci/tools.sh`)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-CLI tests: {reason}")
    pytest.skip(reason)


def require(available: bool, reason: str) -> None:
    """Skip, saying ``reason``, when a production path cannot run here; fail instead when env
    CI is set (``.ci/run`` installs what such tests need: CI must run them)."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: {reason}")
    pytest.skip(reason)


def require_modules(*names: str) -> None:
    """The Python tools a test runs as scanners (the dev extras): :func:`require` them."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    require(not missing, f"needs {' and '.join(missing)} (pip install -e '.[dev]')")
