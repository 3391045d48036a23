"""``git.which``: a program found on PATH as :func:`shutil.which` finds it on POSIX, so the
commands that read and end at once need not import :mod:`shutil` (and the compression modules
it imports) to find git, an agent's program or bwrap."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchardist.git.which import which


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Folders a, b and c: ``tool`` is a plain file in a, a folder in b, a program in c and in
    d; ``here`` is a program in the working folder (tmp_path)."""
    for name in "abcd":
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "tool").write_text("not a program\n")
    (tmp_path / "b" / "tool").mkdir()
    for folder in ("c", "d", "."):
        program = tmp_path / folder / ("here" if folder == "." else "tool")
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASES = [
    ("tool", "{a}:{b}:{c}:{d}"),  # the first executable file, past a plain file and a folder
    ("tool", "{d}:{c}"),  # in the folders' order
    ("tool", "{a}:{b}"),  # none: a plain file and a folder are not programs
    ("tool", "{a}:{a}:{c}"),  # a folder named twice
    ("tool", ""),  # an empty PATH finds nothing
    ("here", ":"),  # an empty entry is the working folder
    ("here", "{a}"),
    ("./here", "{a}"),  # a name with a slash is checked as it stands
    ("./tool", "{c}"),
    ("{c}/tool", ""),
    ("{a}/tool", "{c}"),
    ("missing", "{c}:{d}"),
]


@pytest.mark.parametrize(("program", "path"), CASES)
def test_which_finds_what_shutil_which_finds(folders: Path, program: str, path: str) -> None:
    # Given a program's name and a PATH
    where = {name: str(folders / name) for name in "abcd"}
    program, path = program.format(**where), path.format(**where)

    # When it is looked up, then it is found where shutil.which finds it, or not at all
    assert which(program, path=path) == shutil.which(program, path=path)


def test_which_reads_path_from_the_environment(
    folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in (f"{folders / 'a'}:{folders / 'c'}", "", ":"):
        monkeypatch.setenv("PATH", path)
        for program in ("tool", "here"):
            assert which(program) == shutil.which(program), (path, program)
    monkeypatch.delenv("PATH")  # unset: the system's default search path
    assert which("sh") == shutil.which("sh") is not None
    assert os.environ.get("PATH") is None
