"""The Python files of src/orchardist and of tests/, read and parsed for the meta tests that walk
them all with more than one test: the event vocabulary (state/test_events.py) and the slow marks
and skips (test_suite_marks.py). Each such module parses the files once, in a module fixture (it
parsed them again in each test, ~0.5 s of CPU each time).

The trees are not kept for the whole session: 600,000 live nodes make each of the garbage
collector's full passes cost ~0.6 s, in every later test of the worker and at its end (pytest
collects twice there). A module that reads the files in one test (test_layout.py,
test_imports.py) parses them one at a time, each tree dropped before the next is made.
"""

from __future__ import annotations

import ast
import gc
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "orchardist"
TESTS = ROOT / "tests"


@dataclass(frozen=True)
class SourceFile:
    """One Python file: where it is, its text, and its syntax tree."""

    path: Path
    text: str
    tree: ast.Module


def python_files(folder: Path, naming: tuple[str, ...] = ()) -> list[SourceFile]:
    """Every ``*.py`` under ``folder``, in path order, each read and parsed; with ``naming``,
    only those whose text holds one of these strings (a check that looks for a name in the
    trees finds nothing in a file that never writes it: reading is cheap, parsing is not).

    The garbage collector pauses meanwhile: the trees hold no reference cycles (they are freed
    when dropped), and its passes over the growing set of live nodes made parsing the tests
    take 1.5 s of CPU instead of 0.4."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = []
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not naming or any(name in text for name in naming):
                found.append(SourceFile(path, text, ast.parse(text, str(path))))
        return found
    finally:
        if was_enabled:
            gc.enable()
