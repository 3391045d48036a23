"""No import cycles between the modules of src/orchardist.

Every import counts: module level, function-local, under ``if TYPE_CHECKING:``, relative and
absolute. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg`` itself (so a submodule that imports the package for its re-exports depends on the
package's ``__init__``). Importing ``pkg.sub`` does not add an edge to ``pkg``: a package's
``__init__`` importing its own submodules is not, by itself, a cycle.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "orchardist"


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Map each dotted module name under ``package`` to its file."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # A package's own name is its base for "from . import"; a plain module's is its parent.
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop]
    return ".".join([*base, *([node.module] if node.module else [])])


def statements(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of ``tree`` but expressions, which hold no import and most of the nodes
    (``ast.walk`` over them all took ~0.15 s of CPU more over the package)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of the package that ``module`` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_from(module, is_package, node)
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in modules else target)
    return {name for name in found if name in modules and name != module}


def import_graph(src: Path = SRC, package: str = PACKAGE) -> dict[str, set[str]]:
    """The package's module graph: each module to the package modules it imports."""
    modules = module_files(src, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def _shortest_path(
    graph: dict[str, set[str]], start: str, goal: str, within: set[str]
) -> list[str]:
    came_from: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [goal]
            while path[-1] != start:
                path.append(came_from[path[-1]])
            return path[::-1]
        for nxt in sorted(graph[node] & within):
            if nxt not in seen:
                seen.add(nxt)
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{goal} is not reachable from {start}")


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles that together use every edge inside every cycle, each as [a, b, ..., a].

    For each import a -> b inside a strongly connected component, the shortest way back from
    b to a closes one cycle; rotations of the same cycle are listed once.
    """
    cycles: dict[tuple[str, ...], list[str]] = {}
    for component in _components(graph):
        for a in sorted(component):
            for b in sorted(graph[a] & component):
                cycle = [a, *_shortest_path(graph, b, a, component)]
                ring = cycle[:-1]
                first = ring.index(min(ring))
                key = tuple(ring[first:] + ring[:first])
                cycles.setdefault(key, [*key, key[0]])
    return sorted(cycles.values())


def _graph(edges: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges.split():
        a, b = edge.split(">")
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    return graph


def test_the_checker_finds_every_cycle_through_every_import() -> None:
    graph = _graph("a>b b>a b>c c>d d>b e>a f>f")
    assert import_cycles(graph) == [["a", "b", "a"], ["b", "c", "d", "b"]]


def test_the_checker_finds_no_cycle_in_a_tree() -> None:
    assert import_cycles(_graph("a>b a>c b>c c>d")) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_function_local_relative_and_package_imports_are_all_edges(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\nfrom . import sub\n",
            "pkg/a.py": "def f():\n    from . import b\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
            "pkg/c.py": "from pkg import A\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/d.py": "from .. import c\nfrom ..sub import e\n",
            "pkg/sub/e.py": "from ..sub.d import x\n",
        },
    )
    assert import_graph(tmp_path, "pkg") == {
        "pkg": {"pkg.a", "pkg.sub"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.a"},
        "pkg.c": {"pkg"},
        "pkg.sub": set(),
        "pkg.sub.d": {"pkg.c", "pkg.sub.e"},
        "pkg.sub.e": {"pkg.sub.d"},
    }


def test_orchardist_has_no_import_cycle() -> None:
    cycles = import_cycles(import_graph())
    if cycles:
        pytest.fail(
            f"{len(cycles)} import cycle(s) in src/{PACKAGE}:\n"
            + "\n".join(" -> ".join(cycle) for cycle in cycles)
        )
