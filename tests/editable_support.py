"""A src-layout package installed editable (``pip install -e``) in a venv of its own, as
Python projects are usually developed: its finder names the checkout by absolute path."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import make_repo

PYPROJECT = """\
[build-system]
requires = []
build-backend = "build_backend"
backend-path = ["."]

[project]
name = "calc"
version = "0.1"
"""
BACKEND = Path(__file__).parent / "fixtures" / "editable" / "build_backend.py"
ADD_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
IMPORT_TEST = "import calc\n\n\ndef test_import():\n    assert calc.add\n"


def calc_files(body: str) -> dict[str, str]:
    """A src-layout package ``calc`` whose ``add`` returns ``body``, with its tests."""
    return {
        "pyproject.toml": PYPROJECT,
        "build_backend.py": BACKEND.read_text(),
        "src/calc/__init__.py": f"def add(a, b):\n    return {body}\n",
        "tests/test_add.py": ADD_TEST,
        "tests/test_import.py": IMPORT_TEST,
        ".gitignore": "__pycache__/\n.pytest_cache/\n*.egg-info/\nbuild/\nplan.toml\n",
    }


def calc_repo(path: Path, body: str) -> Path:
    """A repository of the calc project whose ``add`` returns ``body``."""
    return make_repo(path, calc_files(body))


@dataclass(frozen=True)
class EditableInstall:
    """A venv where pip installed the project at ``project`` editable: its ``.pth`` names
    ``project/src`` by absolute path, whatever repository is checked out there later."""

    venv: Path
    project: Path


def editable_install(folder: Path) -> EditableInstall:
    """The calc project at ``folder/repo-editable`` installed editable by pip into
    ``folder/venv``; pytest comes from this interpreter's site-packages, the build backend is the
    project's own.

    Built once per test process (pip costs ~1.1 s of CPU a venv) and reused read-only: nothing
    a test runs writes in the venv, and each test checks its own repository out at the
    installed path (``checkout``). No git yet: the module's fixture runs before a test's
    isolated git identity exists."""
    project = folder / "repo-editable"
    for name, text in calc_files("a + b").items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site_dir] = (venv / "lib").glob("python3*/site-packages")
    (site_dir / "dev-tools.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation"]
    subprocess.run([*pip, "--no-deps", "-e", str(project)], check=True, capture_output=True)
    [direct_url] = site_dir.glob("calc-*.dist-info/direct_url.json")
    assert '"editable": true' in direct_url.read_text(), "pip made no editable install"
    return EditableInstall(venv, project)


_MADE: list[EditableInstall] = []


def shared_editable_install(tmp_path_factory: pytest.TempPathFactory) -> EditableInstall:
    """``editable_install``, made once per test process for every module that asks (it was
    once per module: a worker that ran both modules made two): what the tests write, each
    at ``checkout``, replaces the project's files whole, and nothing writes in the venv."""
    if not _MADE:
        _MADE.append(editable_install(tmp_path_factory.mktemp("editable")))
    return _MADE[0]


def checkout(install: EditableInstall, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh repository of the calc project (``add`` returns ``body``) at the path pip
    installed, the venv's bin first on PATH (as when activated)."""
    shutil.rmtree(install.project)
    repo = calc_repo(install.project, body)
    monkeypatch.setenv("PATH", f"{install.venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return repo
