"""The scripted agent's step player: a script that starts without the orchardist package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from orchardist.agents.scripted import PLAYER, player_argv


def test_the_step_player_imports_only_the_standard_library() -> None:
    # Given the player's source
    tree = ast.parse(PLAYER.read_text(encoding="utf-8"))
    # When every module it imports is listed
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # Then each is the standard library's (no relative import, nothing of orchardist)
    roots = {name.split(".")[0] for name in imported}
    assert roots and roots <= set(sys.stdlib_module_names) | {"__future__"}, roots


def test_the_player_plays_a_step_as_a_script_in_isolated_mode(tmp_path: Path) -> None:
    # Given a step that writes, appends, deletes, prints and exits with a code
    (tmp_path / "old.txt").write_text("old\n")
    (tmp_path / "log.txt").write_text("a\n")
    step = {
        "write": {"pkg/new.py": "X = 1\n"},
        "append": {"log.txt": "b\n"},
        "delete": ["old.txt"],
        "print": "hello",
        "exit": 3,
    }
    # When it is played the way the agent runs it: as a script, in isolated mode
    proc = subprocess.run(
        player_argv(step),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then the tree holds its changes and the process its output and exit code
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "hello\n", "")
    assert (tmp_path / "pkg" / "new.py").read_text() == "X = 1\n"
    assert (tmp_path / "log.txt").read_text() == "a\nb\n"
    assert not (tmp_path / "old.txt").exists()


def test_a_step_that_edits_and_prints_starts_nothing_the_interpreter_does_not_load_anyway(
    tmp_path: Path,
) -> None:
    # Given a step that writes into a new folder, deletes, prints and exits with a code
    step = {"write": {"a/b.txt": "x\n"}, "delete": ["gone.txt"], "print": "hi", "exit": 2}
    # When it is played with Python listing every module it imports
    argv = player_argv(step)
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it did its work, and imported none of the modules that cost most of a step's start
    assert (proc.returncode, proc.stdout) == (2, "hi\n")
    assert (tmp_path / "a" / "b.txt").read_text() == "x\n"
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}
    assert "site" in imported  # the listing is there
    heavy = {"re", "enum", "json", "pathlib", "subprocess", "typing", "signal"}
    assert imported & heavy == set(), imported & heavy
