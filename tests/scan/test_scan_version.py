"""A cached scan asks the tool's version only when the tool changed: the ``version`` command
runs again when a file it names moved (path, inode, size, modification time), and then what
changed invalidates the cache as before. SARIF is written compactly."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from scan_support import invocations
from test_scan_engine import scan, todo_plan

from orchardist.scan.toolstamp import tool_stamp
from run_support import orchardist
from support import make_repo

VERSION_SCRIPT = """#!/bin/sh
echo asked >> {marker}
echo "todo-tool {version}"
"""


def version_tool(folder: Path, version: str) -> tuple[Path, Path]:
    """An executable that says ``version`` and adds a line to its marker file each time it
    runs (the proof that it ran); its path and the marker's."""
    tool, marker = folder / "bin" / "todo-tool", folder / "asked.log"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text(VERSION_SCRIPT.format(marker=shlex.quote(str(marker)), version=version))
    tool.chmod(0o755)
    return tool, marker


def asked(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.fixture
def todo_repo(tmp_path: Path) -> Path:
    """Six Python files with a TODO each (as test_scan_engine's)."""
    files = {f"src/m{i}.py": f"x = {i}\n# TODO: item {i}\n" for i in range(6)}
    return make_repo(tmp_path / "repo", files)


@pytest.fixture
def versioned(todo_repo: Path, tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A plan whose scanner's version command is an executable of its own; the plan, the
    scanner's invocation log, the tool and its marker."""
    tool, marker = version_tool(tmp_path, "1.0")
    plan, log = todo_plan(todo_repo, tmp_path, extra=f"version = {json.dumps(str(tool))}")
    return plan, log, tool, marker


def test_a_cached_scan_does_not_ask_the_version_of_a_tool_that_did_not_change(
    versioned: tuple[Path, Path, Path, Path],
) -> None:
    # Given a first scan, which asked the version and ran the scanner
    plan, log, _, marker = versioned
    scan(plan)
    assert asked(marker) == 1 and invocations(log)

    # When the unchanged tree is scanned again, twice
    runs = len(invocations(log))
    second, third = scan(plan), scan(plan)

    # Then every result came from the cache, and neither scan ran the version command
    assert second.reports[0].hits == third.reports[0].hits == 6
    assert len(invocations(log)) == runs
    assert asked(marker) == 1


def test_an_upgraded_tool_is_asked_again_and_its_results_are_not_reused(
    versioned: tuple[Path, Path, Path, Path],
) -> None:
    # Given a scan with the tool at 1.0
    plan, log, tool, marker = versioned
    scan(plan)
    runs = len(invocations(log))

    # When the tool is replaced by another version (another size and time)
    version_tool(tool.parent.parent, "1.10")
    os.utime(tool, ns=(1, 1))
    again = scan(plan)

    # Then its version was asked, and every file was scanned again
    assert asked(marker) == 2
    assert again.reports[0].misses == 6 and again.reports[0].hits == 0
    assert len(invocations(log)) > runs


def test_the_stamp_follows_the_files_a_version_command_names(tmp_path: Path) -> None:
    # Given a virtual environment's interpreter and tool, and a command naming the interpreter
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    python, _ = version_tool(venv, "3.11")
    command = f"{python} -m ruff --version"
    first = tool_stamp(command, str(venv / "bin"))
    assert first is not None and first == tool_stamp(command, str(venv / "bin"))

    # When a package is upgraded in its site-packages (python -m names only the interpreter)
    (site / "ruff-0.6.0.dist-info").mkdir()
    os.utime(site, ns=(2, 2))

    # Then the stamp changed
    assert tool_stamp(command, str(venv / "bin")) != first
    # and a name found on the search path is stamped too, a builtin-only command not at all
    assert tool_stamp("todo-tool --version", str(venv / "bin")) is not None
    assert tool_stamp("todo-tool --version", str(tmp_path / "nowhere")) is None
    assert tool_stamp("exit 3", str(tmp_path / "nowhere")) is None


def test_sarif_is_written_on_one_line(todo_repo: Path, tmp_path: Path) -> None:
    plan, _ = todo_plan(todo_repo, tmp_path)
    out = tmp_path / "findings.sarif"
    assert orchardist(todo_repo, "scan", str(plan), "-o", str(out)).returncode == 0
    text = out.read_text()
    assert text.count("\n") == 1 and text.endswith("}\n")
    assert json.loads(text)["version"] == "2.1.0"
