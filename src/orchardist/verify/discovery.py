"""Test discovery for ``verify = "auto"``: which tests cover the files a candidate changed.

Python: for ``pkg/mod.py`` we look for ``test_mod.py`` and ``mod_test.py`` beside it, and in
every ``tests/`` or ``test/`` directory at the root or at any ancestor of the module, both
directly inside and at the path that mirrors the module's place (``tests/pkg/test_mod.py``
for ``src/pkg/mod.py``). ``pkg/__init__.py`` is tested as ``pkg``. A changed test file is its
own test; a changed ``conftest.py`` or helper inside a test directory stands for that
directory.

JS/TS: for ``src/name.ts`` we look for ``name.test.*`` and ``name.spec.*`` in the same places,
and for ``__tests__/name.*`` beside it. A changed ``*.test.*``/``*.spec.*`` file or a file
under ``__tests__/`` is its own test.

Only paths that exist in the candidate's tree are returned, so deleted tests are not run.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

__all__ = [
    "DEFAULT_JS_RUNNER",
    "DEFAULT_PYTHON_RUNNER",
    "auto_commands",
    "discover_tests",
]

DEFAULT_PYTHON_RUNNER = "python -m pytest -q"
# vitest accepts file paths as filters and exits non-zero on failure; --no-install keeps npx
# from fetching a runner the project does not have. Projects on jest pass
# js_runner="npx --no-install jest".
DEFAULT_JS_RUNNER = "npx --no-install vitest run"

JS_EXTENSIONS = (".js", ".ts", ".jsx", ".tsx", ".mjs", ".cjs")
PY_TEST_DIRS = ("tests", "test")
JS_TEST_DIRS = ("__tests__", "tests", "test")
MAX_FILES_IN_NOTE = 10


def discover_tests(changed: Sequence[str], tree: Path) -> list[str]:
    """The tests for the changed files: repo-relative paths that exist in ``tree``, sorted."""
    found: set[str] = set()
    for raw in changed:
        path = _relative(raw)
        if path is None:
            continue
        for candidate in _candidates(path):
            if candidate.parts and (tree / candidate).exists():
                found.add(candidate.as_posix())
    return sorted(found)


def auto_commands(
    tests: Sequence[str],
    default: Sequence[str],
    *,
    python_runner: str = DEFAULT_PYTHON_RUNNER,
    js_runner: str = DEFAULT_JS_RUNNER,
) -> tuple[tuple[str, ...], str]:
    """The commands that run ``tests``, and a note for the log; ``default`` when there are none.

    Python tests (and test directories) go to one ``python_runner`` command, JS/TS tests to
    one ``js_runner`` command; paths are shell-quoted.
    """
    js = [t for t in tests if _is_js(PurePosixPath(t))]
    python = [t for t in tests if t not in js]
    commands = tuple(
        f"{runner} {' '.join(shlex.quote(t) for t in group)}"
        for runner, group in ((python_runner, python), (js_runner, js))
        if group
    )
    if not commands:
        return tuple(
            default
        ), "auto: no tests found for the changed files; running the default suite"
    shown = ", ".join(tests[:MAX_FILES_IN_NOTE])
    more = len(tests) - MAX_FILES_IN_NOTE
    if more > 0:
        shown += f" and {more} more"
    return commands, f"auto: {len(tests)} test path(s) chosen for the changed files: {shown}"


def _relative(raw: str) -> PurePosixPath | None:
    """A clean repo-relative path, or None for one that could escape the tree."""
    path = PurePosixPath(raw.strip())
    if not path.parts or path.is_absolute() or ".." in path.parts:
        return None
    return PurePosixPath(*(p for p in path.parts if p != "."))


def _candidates(path: PurePosixPath) -> Iterator[PurePosixPath]:
    """Every place a test for ``path`` may live (existence is checked by the caller)."""
    if path.suffix == ".py":
        yield from _python_candidates(path)
    elif _is_js(path):
        yield from _js_candidates(path)


def _python_candidates(path: PurePosixPath) -> Iterator[PurePosixPath]:
    name = path.name
    if name.startswith("test_") or name.endswith("_test.py"):
        yield path
        return
    test_root = _innermost_test_dir(path.parent)
    if test_root is not None:
        # conftest.py: the tests below it use its fixtures. Another helper (fixtures, data
        # builders) may be used anywhere in its test directory; its own folder may hold no
        # tests at all, and pytest fails a run that collects nothing.
        yield path.parent if name == "conftest.py" else test_root
        return
    if name == "conftest.py":
        # Outside a test directory a conftest covers everything below it; the root one
        # covers the whole suite, which the fallback runs when nothing else is found.
        if path.parent.parts:
            yield path.parent
        return
    stem = path.parent.name if name == "__init__.py" else path.stem
    if not stem:
        return
    names = (f"test_{stem}.py", f"{stem}_test.py")
    module_dir = path.parent if name != "__init__.py" else path.parent.parent
    yield from _places(module_dir, names, PY_TEST_DIRS)


def _js_candidates(path: PurePosixPath) -> Iterator[PurePosixPath]:
    stem, kind = _js_stem(path)
    if kind is not None or "__tests__" in path.parent.parts:
        yield path
        return
    names = tuple(f"{stem}.{infix}{ext}" for infix in ("test", "spec") for ext in JS_EXTENSIONS)
    yield from _places(path.parent, names, JS_TEST_DIRS)
    # jest's convention: __tests__/name.ts tests name.ts, without a .test infix
    for ext in JS_EXTENSIONS:
        yield path.parent / "__tests__" / f"{stem}{ext}"


def _places(
    module_dir: PurePosixPath, names: tuple[str, ...], test_dirs: tuple[str, ...]
) -> Iterator[PurePosixPath]:
    """``names`` beside the module, and in each test dir at every ancestor, flat or mirrored."""
    for name in names:
        yield module_dir / name
    levels = [module_dir, *module_dir.parents]
    for level in levels:
        below = module_dir.parts[len(level.parts) :]
        for test_dir in test_dirs:
            # every suffix of the path below this level: tests/, tests/sub/, tests/pkg/sub/
            for start in range(len(below), -1, -1):
                for name in names:
                    yield level / test_dir / PurePosixPath(*below[start:], name)


def _innermost_test_dir(folder: PurePosixPath) -> PurePosixPath | None:
    """The nearest of ``folder`` and its ancestors named like a test directory."""
    for level in (folder, *folder.parents):
        if level.name in PY_TEST_DIRS:
            return level
    return None


def _is_js(path: PurePosixPath) -> bool:
    return path.suffix in JS_EXTENSIONS


def _js_stem(path: PurePosixPath) -> tuple[str, str | None]:
    """``("name", "test")`` for ``name.test.ts``; ``("name", None)`` for ``name.ts``."""
    stem = path.stem
    for kind in ("test", "spec"):
        if stem.endswith(f".{kind}"):
            return stem[: -len(kind) - 1], kind
    return stem, None
