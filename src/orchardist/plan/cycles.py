"""A plan's dependency cycles, each with its path: what loading a plan checks of its graph.

Apart from the ranks and the ready set (:mod:`.graph`), which only a run uses: reading a plan
(``validate``) does not make their records. Edges point from a task to the tasks it depends on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def find_cycles(ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """One cycle path per strongly connected component that has a cycle, e.g. ``[a, b, c]``.

    ``a`` depends on ``b``, ``b`` on ``c`` and ``c`` on ``a``. Components come in the order of
    their first member in ``ids``; each path starts at that member.
    """
    position = {node: i for i, node in enumerate(ids)}
    components = _strongly_connected(ids, deps)
    cycles: list[list[str]] = []
    for comp in sorted(components, key=lambda c: min(position[n] for n in c)):
        members = set(comp)
        start = min(comp, key=position.__getitem__)
        if len(comp) == 1 and start not in deps.get(start, ()):
            continue
        cycles.append(_shortest_cycle(start, members, deps))
    return cycles


def _strongly_connected(ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative so that deep graphs do not hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in ids:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child_i = work.pop()
            if child_i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = deps.get(node, ())
            recursed = False
            for i in range(child_i, len(children)):
                child = children[i]
                if child not in index:
                    work.append((node, i + 1))
                    work.append((child, 0))
                    recursed = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if recursed:
                continue
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                result.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return result


def _shortest_cycle(start: str, members: set[str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for child in deps.get(node, ()):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if child in members and child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")  # pragma: no cover
