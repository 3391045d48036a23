"""A src-layout package installed editable (``pip install -e``) in a venv of its own, as
Python projects are usually developed: its finder names the checkout by absolute path."""

from __future__ import annotations

import os
import site
import subprocess
import sys
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


def calc_repo(path: Path, body: str) -> Path:
    """A src-layout package ``calc`` whose ``add`` returns ``body``, with its tests."""
    return make_repo(
        path,
        {
            "pyproject.toml": PYPROJECT,
            "build_backend.py": BACKEND.read_text(),
            "src/calc/__init__.py": f"def add(a, b):\n    return {body}\n",
            "tests/test_add.py": ADD_TEST,
            "tests/test_import.py": IMPORT_TEST,
            ".gitignore": "__pycache__/\n.pytest_cache/\n*.egg-info/\nbuild/\nplan.toml\n",
        },
    )


def editable_venv(folder: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A venv with ``project`` installed editable by pip, its bin first on PATH (as when
    activated); pytest comes from this interpreter's site-packages, the build backend is the
    project's own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    [site_dir] = (folder / "lib").glob("python3*/site-packages")
    (site_dir / "dev-tools.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = folder / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation"]
    subprocess.run([*pip, "--no-deps", "-e", str(project)], check=True, capture_output=True)
    [direct_url] = site_dir.glob("calc-*.dist-info/direct_url.json")
    assert '"editable": true' in direct_url.read_text(), "pip made no editable install"
    monkeypatch.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return python
