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

import pytest

from realtools import require
from source_trees import TESTS, SourceFile, python_files

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


@pytest.fixture(scope="module")
def suite() -> list[SourceFile]:
    """The suite's Python files that can matter to the two tests that read them all, parsed
    once for both: those whose text names a heavy import or fixture, or a skip (``_is``
    requires the attribute ``skip``, ``skipif`` or ``importorskip``). A file that names none
    of them can neither drive a real tool as ``heavy`` sees it nor skip; about one file in
    four names one, and parsing them all took ~0.4 s of CPU more."""
    return python_files(TESTS, naming=("skip", *HEAVY_IMPORTS, *HEAVY_FIXTURES))


def test_every_test_module_driving_a_real_tool_is_marked_slow(suite: list[SourceFile]) -> None:
    unmarked = {}
    for file in suite:
        if not file.path.name.startswith("test_"):
            continue
        if (uses := heavy(file.tree)) and not module_marked_slow(file.tree):
            unmarked[str(file.path.relative_to(TESTS))] = sorted(uses)
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


SKIP_ATTRS = {name.rsplit(".", 1)[1] for name in SKIP_CALLS | SKIP_MARKS}


def _is(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` reads as one of ``names``: its last attribute is checked before it is
    unparsed (unparsing each of the tests' ~13,000 calls took ~0.3 s)."""
    return (
        isinstance(node, ast.Attribute) and node.attr in SKIP_ATTRS and ast.unparse(node) in names
    )


def skips(tree: ast.Module) -> list[int]:
    """The lines where the module skips, or marks a test skipped, by itself."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Call) and _is(node.func, SKIP_CALLS)) or _is(node, SKIP_MARKS)
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


def test_no_test_skips_but_through_the_helpers_that_fail_on_ci(suite: list[SourceFile]) -> None:
    marked = "@pytest.mark.skipif(True, reason='x')\ndef test(): pytest.skip('y')\n"
    assert skips(ast.parse(marked)) == [1, 2]
    assert skips(ast.parse("pytest.raises(pytest.skip.Exception)\n")) == []
    found = {}
    for file in suite:
        name = str(file.path.relative_to(TESTS))
        if name not in SKIPPING_ALLOWED and (lines := skips(file.tree)):
            found[name] = lines
    assert found == {}
