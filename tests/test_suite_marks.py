"""The ``slow`` mark stays on every test that drives a real agent CLI, a Ray cluster or a browser,
so ``python -m pytest -m "not slow"`` (the quick loop of CONTRIBUTING.md) keeps skipping them as
files are added. Read from the source: a test module that imports ``require_tool`` or
``RayCluster``, or defines a ``browser`` fixture, carries ``pytestmark`` with
``pytest.mark.slow``.

And no skip hides on CI: a test skips only through ``realtools.require`` (or the helpers built on
it), which fails instead when env ``CI`` is set.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from realtools import require

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


# Where a skip may be written out: the helpers that fail under CI, and Ray's own guard (its
# marker skips only outside CI; importorskip("ray") in tests of the Ray executor).
SKIPPING_ALLOWED = {
    "realtools.py",
    "ns_support.py",
    "test_suite_marks.py",
    "executors/test_ray.py",
    "executors/test_ray_cli.py",
}
SKIP_CALLS = {"pytest.skip", "pytest.importorskip"}
SKIP_MARKS = {"pytest.mark.skipif", "pytest.mark.skip"}


def skips(tree: ast.Module) -> list[int]:
    """The lines where the module skips, or marks a test skipped, by itself."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Call) and ast.unparse(node.func) in SKIP_CALLS)
        or (isinstance(node, ast.Attribute) and ast.unparse(node) in SKIP_MARKS)
    )


def test_a_missing_production_path_is_a_skip_here_and_a_failure_on_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require(True, "never said")
    for value in ("1", "true"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.fail.Exception, match="CI must run this test: no zsh"):
            require(False, "no zsh")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no zsh"):
        require(False, "no zsh")


def test_no_test_skips_but_through_the_helpers_that_fail_on_ci() -> None:
    marked = "@pytest.mark.skipif(True, reason='x')\ndef test(): pytest.skip('y')\n"
    assert skips(ast.parse(marked)) == [1, 2]
    assert skips(ast.parse("pytest.raises(pytest.skip.Exception)\n")) == []
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        name = str(path.relative_to(TESTS))
        if name not in SKIPPING_ALLOWED and (lines := skips(ast.parse(path.read_text("utf-8")))):
            found[name] = lines
    assert found == {}
