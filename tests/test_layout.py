"""Modules and functions stay small enough to read: no module in src/orchardist over 500 lines,
no function (methods and nested functions included) over 60, counted from its ``def`` line to
its last line, docstring included (issue 8).

Nothing is exempt. A module that grows past the limit is split along a seam (as cli/, plan.py
and executors/local.py were); a function past it becomes steps (as LocalExecutor._run was).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "orchardist"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, lines)`` of every function longer than ``limit``.

    Expressions are not entered: no ``def`` can stand in one (a lambda is no FunctionDef), and
    they hold most of a module's nodes (walking them took ~0.2 s of CPU over the package)."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                continue
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}."
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found.append((name.rstrip("."), child.lineno, lines))
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


# -- the checker itself -------------------------------------------------------------------------


def test_the_checker_counts_methods_and_nested_functions_from_def_to_last_line() -> None:
    # Given a method of 3 lines holding a nested function of 2, and a function of exactly 4
    source = (
        "class A:\n"
        "    def method(self):\n"
        "        def inner():\n"
        "            return 1\n"
        "def four():\n"
        '    """Doc."""\n'
        "    x = 1\n"
        "    return x\n"
    )

    # Then over a limit of 2 only the method and the 4-line function are long; at 4, nothing
    assert long_functions(source, limit=2) == [("A.method", 2, 3), ("four", 5, 4)]
    assert long_functions(source, limit=1) == [
        ("A.method", 2, 3),
        ("A.method.inner", 3, 2),
        ("four", 5, 4),
    ]
    assert long_functions(source, limit=4) == []


def test_the_checker_sees_every_module_of_the_package() -> None:
    names = {p.relative_to(SRC).as_posix() for p in modules()}
    assert {"engine/scheduler.py", "cli/__init__.py", "executors/local.py"} <= names


# -- the package ---------------------------------------------------------------------------------


def test_no_module_is_over_500_lines() -> None:
    sizes = {p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in modules()}
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert over == {}, f"split these modules along a seam (at most {MAX_MODULE_LINES} lines)"


def test_no_function_is_over_60_lines() -> None:
    over = [
        f"{path.relative_to(SRC).as_posix()}:{line} {name} ({n} lines)"
        for path in modules()
        for name, line, n in long_functions(path.read_text())
    ]
    assert over == [], f"make these steps of at most {MAX_FUNCTION_LINES} lines"


def test_the_version_is_written_once() -> None:
    # Given the project file and the package
    import tomllib
    from importlib.metadata import version

    import orchardist

    project = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())
    # Then pyproject takes the version from the package, which installs under it
    assert "version" not in project["project"], "pyproject writes a version of its own"
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "orchardist.__version__"}
    assert version("orchardist") == orchardist.__version__


MAX_TOP_MODULES = 12


def test_the_top_of_the_package_holds_at_most_12_modules() -> None:
    # Given the modules at the package's top, beside its subpackages (issue 29)
    top = sorted(p.name for p in SRC.glob("*.py"))

    # Then at most 12 stand there: the rest live in the subpackage of their layer
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of the package: {top}"
