"""The task graph, pure: exact priorities and the ready set (its cycles: :mod:`.cycles`).

Edges point from a task to the tasks it depends on. "Dependents" of a task are the tasks that
(transitively) depend on it. Nothing here touches git, the store or the clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from .cycles import find_cycles

T = TypeVar("T", bound=Hashable)  # what a ReadySet holds (orderable too: ties break on it)


@dataclass(frozen=True)
class Rank:
    """Why a ready task goes before another: compared in this field order."""

    critical_path: float  # longest estimate-weighted path from the task to a sink, itself included
    dependents: int  # number of tasks that transitively depend on it
    priority: int  # the plan's tie-breaker, higher first
    index: int  # plan order, earlier first

    def key(self) -> tuple[float, int, int, int]:
        """Sort key: smaller is scheduled first."""
        return (-self.critical_path, -self.dependents, -self.priority, self.index)


class Graph:
    """An acyclic task graph with exact ranks; built once per run, O(V·E/64) for the ranks."""

    def __init__(
        self,
        ids: Sequence[str],
        deps: Mapping[str, Sequence[str]],
        estimate: Mapping[str, float] | None = None,
        priority: Mapping[str, int] | None = None,
    ) -> None:
        self.ids = list(ids)
        self.deps = {t: tuple(deps.get(t, ())) for t in self.ids}
        children: dict[str, list[str]] = {t: [] for t in self.ids}
        for task, task_deps in self.deps.items():
            for dep in task_deps:
                children[dep].append(task)
        self.children = {t: tuple(c) for t, c in children.items()}
        self.order = self._topological()
        self.ranks = self._ranks(estimate or {}, priority or {})

    def _topological(self) -> list[str]:
        remaining = {t: len(d) for t, d in self.deps.items()}
        order = [t for t in self.ids if remaining[t] == 0]
        for task in order:  # the list grows while we walk it
            for child in self.children[task]:
                remaining[child] -= 1
                if remaining[child] == 0:
                    order.append(child)
        if len(order) != len(self.ids):
            cycle = find_cycles(self.ids, self.deps)[0]
            raise ValueError("dependency cycle: " + " -> ".join([*cycle, cycle[0]]))
        return order

    def _ranks(self, estimate: Mapping[str, float], priority: Mapping[str, int]) -> dict[str, Rank]:
        bit = {t: 1 << i for i, t in enumerate(self.ids)}
        below: dict[str, int] = {}
        path: dict[str, float] = {}
        for task in reversed(self.order):
            mask = 0
            longest = 0.0
            for child in self.children[task]:
                mask |= bit[child] | below[child]
                longest = max(longest, path[child])
            below[task] = mask
            path[task] = estimate.get(task, 1.0) + longest
        return {
            t: Rank(path[t], below[t].bit_count(), priority.get(t, 0), i)
            for i, t in enumerate(self.ids)
        }

    def ancestors(self, task: str) -> list[str]:
        """Every task that ``task`` transitively depends on, in topological order."""
        return self._reach(task, self.deps)

    def descendants(self, task: str) -> list[str]:
        """Every task that transitively depends on ``task``, in topological order."""
        return self._reach(task, self.children)

    def left_out(self, only: Sequence[str] = (), skip: Sequence[str] = ()) -> dict[str, str]:
        """Tasks ``--only``/``--skip`` leave out, each with why: everything outside ``only``
        and what it depends on, and every task of ``skip`` with what depends on it."""
        keep = set(self.ids)
        if only:
            keep = set(only)
            for task in only:
                keep.update(self.ancestors(task))
        why = {t: "not asked for by --only" for t in self.ids if t not in keep}
        for task in skip:
            why.setdefault(task, "--skip")
            for child in self.descendants(task):
                why.setdefault(child, f"depends on skipped {task}")
        return why

    def _reach(self, task: str, edges: Mapping[str, Sequence[str]]) -> list[str]:
        seen: set[str] = set()
        stack = list(edges[task])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(edges[node])
        return [t for t in self.order if t in seen]


class ReadySet(Generic[T]):
    """Ready tasks, one heap per pool (agent profile), best rank first.

    ``pop`` takes the best task among pools that ``has_room`` allows, so a full pool never
    holds back tasks of another pool.
    """

    def __init__(self, ranks: Mapping[T, Rank], pool_of: Callable[[T], str]) -> None:
        self._ranks = ranks
        self._pool_of = pool_of
        self._heaps: dict[str, list[tuple[tuple[float, int, int, int], T]]] = {}
        self._members: set[T] = set()

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, task: object) -> bool:
        return task in self._members

    def push(self, task: T) -> None:
        """Add a ready task (no-op if present)."""
        if task in self._members:
            return
        self._members.add(task)
        pool = self._pool_of(task)
        heapq.heappush(self._heaps.setdefault(pool, []), (self._ranks[task].key(), task))

    def extend(self, tasks: Iterable[T]) -> None:
        """Add several ready tasks."""
        for task in tasks:
            self.push(task)

    def discard(self, task: T) -> None:
        """Forget a task (lazily: its heap entry is skipped when reached)."""
        self._members.discard(task)

    def pop(self, has_room: Callable[[str], bool]) -> T | None:
        """Remove and return the best ready task whose pool has room, or None."""
        best: tuple[tuple[float, int, int, int], T] | None = None
        best_pool = ""
        for pool, heap in self._heaps.items():
            while heap and heap[0][1] not in self._members:
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best) and has_room(pool):
                best, best_pool = heap[0], pool
        if best is None:
            return None
        heapq.heappop(self._heaps[best_pool])
        self._members.discard(best[1])
        return best[1]

    def pools(self) -> Collection[str]:
        """Pools that currently hold ready tasks."""
        return [p for p, h in self._heaps.items() if any(t in self._members for _, t in h)]
