"""A finished run made once for the tests of a module that only read it (status, runs, logs,
validate): each of them drove the same run of its own before, a second or more of CPU each.

A module fixture is made before the autouse fixtures of conftest.py give the test its
environment, so ``isolated`` gives the run that same environment itself.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist.cli import main
from orchardist.confine.confinement import SHARE_READONLY_VAR
from orchardist.confine.paths import ROOT_VAR
from support import make_repo, write_plan

GIT_CONFIG = (
    "[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
)


@contextlib.contextmanager
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pytest.MonkeyPatch]:
    """The environment conftest.py's autouse fixtures give a test: a git identity and no user
    or system git config, attempt folders under a temporary root, the temporary folders
    read-only to confined attempts."""
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text(GIT_CONFIG)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        for var in ("GIT_CONFIG_GLOBAL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            patch.delenv(var, raising=False)
        patch.setenv(ROOT_VAR, str(tmp_path_factory.mktemp("workdirs")))
        patch.setenv(SHARE_READONLY_VAR, str(tmp_path_factory.getbasetemp()))
        yield patch


def finished_run(
    tmp_path_factory: pytest.TempPathFactory, plan: str, *options: str
) -> tuple[Path, dict[str, Any]]:
    """A new repository in which ``orchardist run plan.toml --json OPTIONS`` ran ``plan`` to
    its end, and the status document it printed."""
    with isolated(tmp_path_factory) as patch:
        repo = make_repo(
            tmp_path_factory.mktemp("shared") / "repo",
            {"README.md": "hello\n", ".gitignore": "__pycache__/\n.pytest_cache/\n"},
        )
        write_plan(repo, plan)
        patch.chdir(repo)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", "plan.toml", "--json", *options])
        assert code == 0, out.getvalue()
        return repo, json.loads(out.getvalue())
