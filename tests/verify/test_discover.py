"""Test discovery for verify = "auto", over real trees in temporary folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.verify import discovery as discover
from orchardist.verify.discovery import (
    DEFAULT_JS_RUNNER,
    DEFAULT_PYTHON_RUNNER,
    auto_commands,
    discover_tests,
)


def make_tree(root: Path, files: list[str]) -> Path:
    """A tree holding ``files`` (empty), as a candidate's worktree would."""
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


@pytest.mark.parametrize(
    ("files", "changed", "expected"),
    [
        # Python: beside the module
        pytest.param(
            ["pkg/mod.py", "pkg/test_mod.py"],
            ["pkg/mod.py"],
            ["pkg/test_mod.py"],
            id="test_mod.py beside",
        ),
        pytest.param(
            ["pkg/mod.py", "pkg/mod_test.py"],
            ["pkg/mod.py"],
            ["pkg/mod_test.py"],
            id="mod_test.py beside",
        ),
        pytest.param(["mod.py", "test_mod.py"], ["mod.py"], ["test_mod.py"], id="at the root"),
        # Python: tests/ and test/ at the root
        pytest.param(
            ["src/pkg/mod.py", "tests/test_mod.py"],
            ["src/pkg/mod.py"],
            ["tests/test_mod.py"],
            id="root tests/",
        ),
        pytest.param(
            ["src/pkg/mod.py", "test/test_mod.py"],
            ["src/pkg/mod.py"],
            ["test/test_mod.py"],
            id="root test/",
        ),
        pytest.param(
            ["src/pkg/sub/mod.py", "tests/sub/test_mod.py", "tests/pkg/sub/mod_test.py"],
            ["src/pkg/sub/mod.py"],
            ["tests/pkg/sub/mod_test.py", "tests/sub/test_mod.py"],
            id="root tests/ mirroring the source tree",
        ),
        # Python: tests/ at an ancestor level, including the package's own
        pytest.param(
            ["pkg/sub/mod.py", "pkg/tests/test_mod.py"],
            ["pkg/sub/mod.py"],
            ["pkg/tests/test_mod.py"],
            id="the package's tests/",
        ),
        pytest.param(
            ["pkg/sub/mod.py", "pkg/sub/tests/test_mod.py"],
            ["pkg/sub/mod.py"],
            ["pkg/sub/tests/test_mod.py"],
            id="tests/ beside the module",
        ),
        pytest.param(
            ["pkg/sub/mod.py", "pkg/tests/sub/test_mod.py"],
            ["pkg/sub/mod.py"],
            ["pkg/tests/sub/test_mod.py"],
            id="the package's tests/ mirroring",
        ),
        pytest.param(
            ["pkg/__init__.py", "tests/test_pkg.py"],
            ["pkg/__init__.py"],
            ["tests/test_pkg.py"],
            id="a package's __init__ is tested under the package's name",
        ),
        # Python: test files and test support
        pytest.param(
            ["tests/test_x.py"],
            ["tests/test_x.py"],
            ["tests/test_x.py"],
            id="a changed test file is its own test",
        ),
        pytest.param(
            ["pkg/x_test.py"],
            ["pkg/x_test.py"],
            ["pkg/x_test.py"],
            id="a changed _test.py file is its own test",
        ),
        pytest.param(
            ["tests/unit/conftest.py", "tests/unit/test_a.py"],
            ["tests/unit/conftest.py"],
            ["tests/unit"],
            id="a conftest in a test dir stands for its dir",
        ),
        pytest.param(
            ["tests/unit/helpers.py", "tests/unit/test_a.py"],
            ["tests/unit/helpers.py"],
            ["tests"],
            id="a helper in a test dir stands for the whole test dir",
        ),
        pytest.param(
            ["pkg/conftest.py", "pkg/test_a.py"],
            ["pkg/conftest.py"],
            ["pkg"],
            id="a conftest outside test dirs stands for its dir",
        ),
        pytest.param(
            ["conftest.py", "tests/test_a.py"],
            ["conftest.py"],
            [],
            id="the root conftest is left to the default suite",
        ),
        # JS/TS
        pytest.param(
            ["src/a.ts", "src/a.test.ts"],
            ["src/a.ts"],
            ["src/a.test.ts"],
            id="name.test.ts",
        ),
        pytest.param(
            ["src/b.js", "src/b.spec.jsx"],
            ["src/b.js"],
            ["src/b.spec.jsx"],
            id="name.spec.jsx",
        ),
        pytest.param(
            ["src/c.tsx", "src/__tests__/c.tsx", "src/__tests__/c.test.mjs"],
            ["src/c.tsx"],
            ["src/__tests__/c.test.mjs", "src/__tests__/c.tsx"],
            id="__tests__/name.*",
        ),
        pytest.param(
            ["lib/e.cjs", "test/lib/e.test.cjs"],
            ["lib/e.cjs"],
            ["test/lib/e.test.cjs"],
            id="root test/ mirroring, JS",
        ),
        pytest.param(
            ["src/d.test.js"],
            ["src/d.test.js"],
            ["src/d.test.js"],
            id="a changed JS test is its own test",
        ),
        pytest.param(
            ["src/__tests__/util.ts"],
            ["src/__tests__/util.ts"],
            ["src/__tests__/util.ts"],
            id="a changed file in __tests__ is its own test",
        ),
        # What is not found
        pytest.param(
            ["pkg/mod.py", "tests/test_module.py", "tests/test_mod.txt"],
            ["pkg/mod.py"],
            [],
            id="near names do not match",
        ),
        pytest.param(
            ["pkg/mod.py"],
            ["pkg/mod.py", "tests/test_gone.py"],
            [],
            id="a deleted test is not run",
        ),
        pytest.param(
            ["README.md", "tests/test_README.py"],
            ["README.md"],
            [],
            id="other files",
        ),
        pytest.param(
            ["tests/test_x.py"],
            ["../tests/test_x.py", "/tests/test_x.py", "", "."],
            [],
            id="paths that could escape the tree are ignored",
        ),
    ],
)
def test_discover_tests(
    tmp_path: Path, files: list[str], changed: list[str], expected: list[str]
) -> None:
    tree = make_tree(tmp_path / "tree", files)

    assert discover_tests(changed, tree) == expected


def test_a_deleted_module_still_has_its_tests_run(tmp_path: Path) -> None:
    """The module is gone from the tree, but its tests remain and should show the breakage."""
    tree = make_tree(tmp_path, ["tests/test_mod.py"])

    assert discover_tests(["pkg/mod.py"], tree) == ["tests/test_mod.py"]


def test_discovery_is_sorted_and_deduplicated_whatever_the_order(tmp_path: Path) -> None:
    tree = make_tree(
        tmp_path,
        ["pkg/a.py", "pkg/b.py", "tests/test_a.py", "tests/test_b.py", "web/x.ts", "web/x.test.ts"],
    )
    changed = ["web/x.ts", "pkg/b.py", "tests/test_a.py", "pkg/a.py", "./pkg/b.py"]

    found = discover_tests(changed, tree)

    assert found == ["tests/test_a.py", "tests/test_b.py", "web/x.test.ts"]
    assert discover_tests(list(reversed(changed)), tree) == found


# --- auto_commands -----------------------------------------------------------------------------

DEFAULT = ("python -m pytest -q", "ruff check .")


def test_python_tests_run_in_one_pytest_command() -> None:
    commands, note = auto_commands(["tests/test_a.py", "tests/unit"], DEFAULT)

    assert commands == (f"{DEFAULT_PYTHON_RUNNER} tests/test_a.py tests/unit",)
    assert note == "auto: 2 test path(s) chosen for the changed files: tests/test_a.py, tests/unit"


def test_python_and_js_tests_get_one_command_each() -> None:
    commands, _ = auto_commands(["src/a.test.ts", "tests/test_a.py"], DEFAULT)

    assert commands == (
        f"{DEFAULT_PYTHON_RUNNER} tests/test_a.py",
        f"{DEFAULT_JS_RUNNER} src/a.test.ts",
    )


def test_paths_are_shell_quoted_and_runners_can_be_chosen() -> None:
    commands, _ = auto_commands(
        ["web/my file.test.js"], DEFAULT, python_runner="uv run pytest", js_runner="npx jest"
    )

    assert commands == ("npx jest 'web/my file.test.js'",)


def test_nothing_found_falls_back_to_the_default_suite() -> None:
    commands, note = auto_commands([], DEFAULT)

    assert commands == DEFAULT
    assert "default suite" in note


def test_a_long_choice_is_shortened_in_the_note() -> None:
    tests = [f"tests/test_{i:02}.py" for i in range(13)]

    commands, note = auto_commands(tests, DEFAULT)

    assert commands[0].endswith("tests/test_12.py")
    assert note.endswith("tests/test_09.py and 3 more")


def test_all_names_are_exported() -> None:
    assert all(hasattr(discover, name) for name in discover.__all__)
