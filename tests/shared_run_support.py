"""One finished run, and its dashboard, shared by the tests of a module that only read them.

Running a plan and starting ``orchardist serve`` cost ~0.5 s of CPU each; tests that look at
the same finished run through HTTP, and change nothing in it, need them once per module.
A module's fixture runs before the per-test fixtures of conftest.py set the environment, so
``isolated`` sets the same for the module's lifetime.

Importable from every test module (``pythonpath = ["tests"]`` in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchardist import Workspace, create_run, execute, load_plan, status_document
from orchardist.confine.confinement import SHARE_READONLY_VAR
from orchardist.confine.paths import ROOT_VAR
from support import Finished, make_repo, write_plan


@contextmanager
def isolated(factory: pytest.TempPathFactory) -> Iterator[None]:
    """What conftest's autouse fixtures give each test (``_isolated_git``,
    ``_private_workdirs``, ``_host_view_of_tmp``), for as long as a module's fixture lasts."""
    home = factory.mktemp("home")
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        for var in ("GIT_CONFIG_GLOBAL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            patch.delenv(var, raising=False)
        patch.setenv(ROOT_VAR, str(factory.mktemp("workdirs")))
        patch.setenv(SHARE_READONLY_VAR, str(factory.getbasetemp()))
        yield


@contextmanager
def finished_run(factory: pytest.TempPathFactory, plan: str) -> Iterator[Finished]:
    """``plan`` run to its end (as conftest's ``run_plan`` runs it) in a fresh repository like
    conftest's ``repo``; its store is open until the context ends."""
    repo = make_repo(
        factory.mktemp("shared") / "repo",
        {"README.md": "hello\n", ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    )
    loaded = load_plan(write_plan(repo, plan))
    ws = Workspace.open(loaded.repo)
    try:
        run = create_run(ws, loaded)
        state = execute(ws, loaded, run)
        yield Finished(ws, run, state, status_document(ws.store, ws.resolve_run(run.id)))
    finally:
        ws.store.close()
