"""Finding the real agent CLIs that .ci/run installs, for the real-CLI contract tests.

The pinned tools live in ``<repo>/.ci/tools/node_modules/.bin/`` (npm ``--prefix``); a tool on
PATH is used otherwise. When neither is there the test is skipped with the reason printed, except
under CI (env ``CI`` set), where a missing tool fails the test: CI must run them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NPM_BIN = REPO / ".ci" / "tools" / "node_modules" / ".bin"


def real_cli(name: str, install: str) -> Path:
    """The real ``name`` executable; skip (fail under CI) when it is not installed."""
    pinned = NPM_BIN / name
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return pinned
    found = shutil.which(name)
    if found:
        return Path(found)
    why = f"{name} is not installed (expected {pinned} or on PATH; install: {install})"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-CLI tests: {why}")
    pytest.skip(why)
