"""xdist hands the slow files to its workers first (suite_order.py): checked by running pytest
with the project's own settings (addopts) on generated files, on one worker, and reading the
order the tests ran in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"

HOOK = """from suite_order import slow_files_first


def pytest_collection_modifyitems(items):
    slow_files_first(items)
"""
SLOW = "import pytest\n\npytestmark = pytest.mark.slow\n"
QUICK = "".join(f"def test_quick_{n}():\n    pass\n\n\n" for n in range(4))


def ran(folder: Path) -> list[str]:
    """The tests' names in the order one xdist worker ran them, with the project's addopts.

    Only xdist is loaded (``-p xdist.plugin``), not every installed plugin: hypothesis and anyio,
    which these files do not use, cost each of the two processes (pytest and its worker) ~0.4 s
    of CPU to import, half of what the run took. Its temporary folder is its own
    (``--basetemp``): xdist asks for one to hand its worker, and without it pytest made a new
    numbered folder beside the outer suite's and removed the old ones there first, the trees of
    earlier sessions (11 s with 3.3 s of system time after two quick loops; 1.9 s without)."""
    command = [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-c", str(PYPROJECT)]
    proc = subprocess.run(
        [
            *command,
            "--rootdir",
            str(folder),
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(folder / ".basetemp"),  # a dot folder: not collected
            "-n",
            "1",
            "-v",
            str(folder),
        ],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::")[1].split()[0] for line in proc.stdout.splitlines() if "PASSED" in line]


def test_the_slow_file_runs_first_then_the_quick_files_most_tests_first(tmp_path: Path) -> None:
    # Given, by name, a quick file of one test, a quick file of four, a slow file of one and a
    # slow file of two
    (tmp_path / "conftest.py").write_text(HOOK)
    (tmp_path / "test_a_small.py").write_text("def test_small():\n    pass\n")
    (tmp_path / "test_b_quick.py").write_text(QUICK)
    (tmp_path / "test_c_slow.py").write_text(SLOW + "def test_slow():\n    pass\n")
    slower = "".join(f"def test_slower_{n}():\n    pass\n\n\n" for n in range(2))
    (tmp_path / "test_d_slow.py").write_text(SLOW + slower)
    # When the suite's settings run them on one worker
    order = ran(tmp_path)
    # Then the slow files ran first (xdist's own order, most tests first, ran them last), the
    # larger first, then the quick files, the larger first, each file's tests in their order
    quick = [f"test_quick_{n}" for n in range(4)]
    assert order == ["test_slower_0", "test_slower_1", "test_slow", *quick, "test_small"]
