"""The ``slow`` mark stays on every test that drives a real agent CLI, a Ray cluster or a browser,
so ``python -m pytest -m "not slow"`` (the quick loop of CONTRIBUTING.md) keeps skipping them as
files are added. Read from the source: a test module that imports ``require_tool`` or
``RayCluster``, or defines a ``browser`` fixture, carries ``pytestmark`` with
``pytest.mark.slow``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HEAVY_IMPORTS = {"require_tool", "RayCluster"}
HEAVY_FIXTURES = {"browser"}


def is_slow_mark(node: ast.expr) -> bool:
    return ast.unparse(node) == "pytest.mark.slow"


def module_marked_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            marks = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return any(is_slow_mark(mark) for mark in marks)
    return False


def heavy(tree: ast.Module) -> set[str]:
    """What in this module needs a real tool: imported names, fixtures defined."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names} & HEAVY_IMPORTS
        if isinstance(node, ast.FunctionDef) and node.name in HEAVY_FIXTURES:
            found.add(node.name)
    return found


def test_heavy_and_marked_are_read_from_the_source() -> None:
    marked = ast.parse("import pytest\npytestmark = [pytest.mark.skipif(True), pytest.mark.slow]\n")
    unmarked = ast.parse("pytestmark = pytest.mark.skipif(True)\n")
    uses = ast.parse("from realtools import require_tool\ndef browser(): ...\n")
    assert module_marked_slow(marked)
    assert not module_marked_slow(unmarked)
    assert heavy(uses) == {"require_tool", "browser"}


def test_every_test_module_driving_a_real_tool_is_marked_slow() -> None:
    unmarked = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if (uses := heavy(tree)) and not module_marked_slow(tree):
            unmarked[str(path.relative_to(TESTS))] = sorted(uses)
    assert unmarked == {}
