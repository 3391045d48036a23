"""The task graph: cycles with their paths, ranks checked against brute force, the ready set."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence

import pytest

from orchardist.plan.cycles import find_cycles
from orchardist.plan.graph import Graph, Rank, ReadySet

Deps = dict[str, list[str]]


# -- brute force, written as plainly as possible -----------------------------------------


def random_dag(rng: random.Random, size: int, density: float) -> tuple[list[str], Deps]:
    """Tasks in a shuffled plan order; each depends only on tasks earlier in a hidden order."""
    hidden = [f"t{i}" for i in range(size)]
    deps: Deps = {
        task: [earlier for earlier in hidden[:i] if rng.random() < density]
        for i, task in enumerate(hidden)
    }
    ids = hidden[:]
    rng.shuffle(ids)
    return ids, deps


def random_digraph(rng: random.Random, size: int, density: float) -> tuple[list[str], Deps]:
    """Any directed graph, self loops included."""
    ids = [f"n{i}" for i in range(size)]
    return ids, {a: [b for b in ids if rng.random() < density] for a in ids}


def dependents_of(task: str, deps: Mapping[str, Sequence[str]]) -> set[str]:
    """Every task that transitively depends on ``task``, by depth-first search."""
    found: set[str] = set()

    def visit(node: str) -> None:
        for other, other_deps in deps.items():
            if node in other_deps and other not in found:
                found.add(other)
                visit(other)

    visit(task)
    return found


def all_paths_to_sinks(task: str, deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every path from ``task`` along "is depended on by" edges to a task nobody depends on."""
    children = [other for other, other_deps in deps.items() if task in other_deps]
    if not children:
        return [[task]]
    return [[task, *rest] for child in children for rest in all_paths_to_sinks(child, deps)]


def brute_critical_path(task: str, deps: Deps, estimate: Mapping[str, float]) -> float:
    return max(sum(estimate[t] for t in path) for path in all_paths_to_sinks(task, deps))


def relaxed_critical_paths(
    ids: list[str], deps: Deps, estimate: Mapping[str, float]
) -> dict[str, float]:
    """Longest paths by relaxing every edge until nothing changes (no topological order)."""
    path = {t: estimate[t] for t in ids}
    changed = True
    while changed:
        changed = False
        for child, child_deps in deps.items():
            for dep in child_deps:
                if estimate[dep] + path[child] > path[dep]:
                    path[dep] = estimate[dep] + path[child]
                    changed = True
    return path


def brute_order(
    ids: list[str],
    crit: Mapping[str, float],
    dependents: Mapping[str, int],
    priority: Mapping[str, int],
) -> list[str]:
    """The scheduling order, spelled out as a comparison."""
    position = {t: i for i, t in enumerate(ids)}

    def compare(a: str, b: str) -> int:
        for better_a, better_b in (
            (crit[a] > crit[b], crit[a] < crit[b]),
            (dependents[a] > dependents[b], dependents[a] < dependents[b]),
            (priority[a] > priority[b], priority[a] < priority[b]),
            (position[a] < position[b], position[a] > position[b]),
        ):
            if better_a:
                return -1
            if better_b:
                return 1
        return 0

    return sorted(ids, key=functools.cmp_to_key(compare))


def reaches(start: str, deps: Mapping[str, Sequence[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(deps.get(start, ()))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(deps.get(node, ()))
    return seen


def shortest_cycle_length(start: str, deps: Mapping[str, Sequence[str]]) -> int:
    frontier, seen, length = [start], {start}, 0
    while frontier:
        length += 1
        nxt = []
        for node in frontier:
            for child in deps.get(node, ()):
                if child == start:
                    return length
                if child not in seen:
                    seen.add(child)
                    nxt.append(child)
        frontier = nxt
    raise AssertionError("no cycle")


# -- find_cycles -------------------------------------------------------------------------


def test_a_task_depending_on_itself_is_a_cycle_of_one() -> None:
    assert find_cycles(["a", "b"], {"a": ["a"], "b": ["a"]}) == [["a"]]


def test_a_cycle_path_follows_dependencies_from_its_first_task_in_plan_order() -> None:
    deps = {"c": ["a"], "a": ["b"], "b": ["c"]}
    assert find_cycles(["b", "c", "a"], deps) == [["b", "c", "a"]]


def test_two_disjoint_cycles_are_both_reported_in_plan_order() -> None:
    # Given x <-> y and p -> q -> r -> p, with a free task between them
    ids = ["p", "free", "x", "q", "y", "r"]
    deps = {"x": ["y"], "y": ["x"], "p": ["q"], "q": ["r"], "r": ["p"], "free": ["x", "p"]}

    # Then each cycle is reported once, from its first member in the plan
    assert find_cycles(ids, deps) == [["p", "q", "r"], ["x", "y"]]


def test_the_shortest_cycle_through_the_first_task_is_the_one_reported() -> None:
    # a -> b -> c -> d -> a, with a shortcut c -> a
    deps = {"a": ["b"], "b": ["c"], "c": ["d", "a"], "d": ["a"]}
    assert find_cycles(["a", "b", "c", "d"], deps) == [["a", "b", "c"]]


def test_a_long_chain_without_a_cycle_has_none() -> None:
    ids = [f"t{i}" for i in range(200)]
    deps = {ids[i]: [ids[i - 1]] for i in range(1, len(ids))}
    assert find_cycles(ids, deps) == []


def test_an_empty_graph_has_no_cycles() -> None:
    assert find_cycles([], {}) == []


def test_a_5000_task_chain_does_not_hit_the_recursion_limit() -> None:
    ids = [f"t{i}" for i in range(5000)]
    chain = {ids[i]: [ids[i + 1]] for i in range(len(ids) - 1)}
    assert find_cycles(ids, chain) == []
    # Closing the chain makes one cycle through all 5000 tasks, in order
    ring = {**chain, ids[-1]: [ids[0]]}
    assert find_cycles(ids, ring) == [ids]


@pytest.mark.parametrize("seed", range(60))
def test_find_cycles_agrees_with_brute_force_on_random_graphs(seed: int) -> None:
    # Given any directed graph
    rng = random.Random(seed)
    ids, deps = random_digraph(rng, rng.randint(1, 14), rng.choice([0.05, 0.1, 0.2, 0.35]))

    # When its cycles are found
    cycles = find_cycles(ids, deps)

    # Then there is one per strongly connected component that holds a cycle
    reach = {t: reaches(t, deps) for t in ids}
    components = {frozenset({t} | {o for o in reach[t] if t in reach[o]}) for t in ids}
    cyclic = [c for c in components if len(c) > 1 or next(iter(c)) in deps[next(iter(c))]]
    position = {t: i for i, t in enumerate(ids)}
    cyclic.sort(key=lambda c: min(position[t] for t in c))
    assert len(cycles) == len(cyclic)
    for cycle, component in zip(cycles, cyclic, strict=True):
        # each path starts at the component's first task, stays inside it, and closes
        assert cycle[0] == min(component, key=position.__getitem__)
        assert set(cycle) <= component
        assert len(set(cycle)) == len(cycle)
        for here, there in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
            assert there in deps[here]
        assert len(cycle) == shortest_cycle_length(cycle[0], deps)


# -- Graph ranks -------------------------------------------------------------------------


def test_a_graph_with_a_cycle_refuses_to_be_built_and_names_the_path() -> None:
    with pytest.raises(ValueError, match=r"dependency cycle: a -> b -> a"):
        Graph(["a", "b", "c"], {"a": ["b"], "b": ["a"], "c": []})


def test_ranks_of_a_small_graph_by_hand() -> None:
    # Given build <- test <- ship, and build <- docs; build takes 3, the rest 1 by default
    graph = Graph(
        ["docs", "build", "test", "ship"],
        {"test": ["build"], "ship": ["test"], "docs": ["build"]},
        estimate={"build": 3.0},
        priority={"docs": 7},
    )

    # Then build's critical path runs through test and ship, and all three others wait on it
    assert graph.ranks["build"] == Rank(critical_path=5.0, dependents=3, priority=0, index=1)
    assert graph.ranks["test"] == Rank(critical_path=2.0, dependents=1, priority=0, index=2)
    assert graph.ranks["docs"] == Rank(critical_path=1.0, dependents=0, priority=7, index=0)
    assert graph.ranks["ship"] == Rank(critical_path=1.0, dependents=0, priority=0, index=3)
    assert graph.descendants("build") == ["docs", "test", "ship"]


def test_descendants_come_in_topological_order() -> None:
    graph = Graph(["d", "c", "b", "a"], {"b": ["a"], "c": ["b"], "d": ["c", "a"]})
    assert graph.descendants("a") == ["b", "c", "d"]
    assert graph.descendants("d") == []


def test_the_order_is_topological_and_keeps_plan_order_among_roots() -> None:
    graph = Graph(["z", "y", "x"], {"z": ["x"]})
    assert graph.order == ["y", "x", "z"]


@pytest.mark.parametrize("seed", range(200))
def test_ranks_match_brute_force_on_random_dags(seed: int) -> None:
    # Given a random DAG with estimates in halves (exact in floating point) and priorities
    rng = random.Random(seed)
    ids, deps = random_dag(rng, rng.randint(1, 11), rng.choice([0.1, 0.25, 0.5, 0.8]))
    estimate = {t: rng.randint(1, 8) / 2 for t in ids}
    priority = {t: rng.randint(-1, 1) for t in ids}

    # When the graph ranks its tasks
    graph = Graph(ids, deps, estimate, priority)

    # Then each rank is what enumerating every path and every dependent gives
    dependents = {t: len(dependents_of(t, deps)) for t in ids}
    for task in ids:
        rank = graph.ranks[task]
        assert rank.critical_path == brute_critical_path(task, deps, estimate)
        assert rank.dependents == dependents[task]
        assert set(graph.descendants(task)) == dependents_of(task, deps)
        assert rank.priority == priority[task]
        assert rank.index == ids.index(task)
    # and sorting by the rank key is the spelled-out comparison
    crit = {t: graph.ranks[t].critical_path for t in ids}
    by_key = sorted(ids, key=lambda t: graph.ranks[t].key())
    assert by_key == brute_order(ids, crit, dependents, priority)


def test_ranks_match_brute_force_on_a_1000_task_graph() -> None:
    # Given a sparse 1,000-task DAG
    rng = random.Random(1000)
    hidden = [f"t{i}" for i in range(1000)]
    deps: Deps = {
        task: sorted({hidden[rng.randrange(i)] for _ in range(rng.randint(0, 3))}) if i else []
        for i, task in enumerate(hidden)
    }
    ids = hidden[:]
    rng.shuffle(ids)
    estimate = {t: rng.randint(1, 20) / 4 for t in ids}
    priority = {t: rng.randint(0, 3) for t in ids}

    # When it is ranked
    graph = Graph(ids, deps, estimate, priority)

    # Then critical paths match edge relaxation and dependents match a search from each task
    assert {t: graph.ranks[t].critical_path for t in ids} == relaxed_critical_paths(
        ids, deps, estimate
    )
    children: dict[str, list[str]] = {t: [] for t in ids}
    for task, task_deps in deps.items():
        for dep in task_deps:
            children[dep].append(task)
    dependents = {t: len(reaches(t, children)) for t in ids}
    assert {t: graph.ranks[t].dependents for t in ids} == dependents
    crit = {t: graph.ranks[t].critical_path for t in ids}
    assert sorted(ids, key=lambda t: graph.ranks[t].key()) == brute_order(
        ids, crit, dependents, priority
    )


def test_a_missing_estimate_counts_as_one() -> None:
    graph = Graph(["a", "b"], {"b": ["a"]}, estimate={"b": 2.5})
    assert graph.ranks["a"].critical_path == 3.5


# -- ReadySet ----------------------------------------------------------------------------


def ranks_in_order(*tasks: str) -> dict[str, Rank]:
    """Ranks that put ``tasks`` in the given order, best first."""
    return {
        t: Rank(critical_path=float(len(tasks) - i), dependents=0, priority=0, index=i)
        for i, t in enumerate(tasks)
    }


def always(pool: str) -> bool:
    return True


def drain(ready: ReadySet, has_room: Callable[[str], bool] = always) -> list[str]:
    popped: list[str] = []
    while (task := ready.pop(has_room)) is not None:
        popped.append(task)
    return popped


def test_pop_takes_tasks_best_rank_first_whatever_the_push_order() -> None:
    # Given tasks pushed in scrambled order into one pool
    ready = ReadySet(ranks_in_order("a", "b", "c", "d", "e"), pool_of=lambda t: "bot")
    ready.extend(["d", "b", "e", "a", "c"])

    # Then they come out best first
    assert drain(ready) == ["a", "b", "c", "d", "e"]
    assert len(ready) == 0


@pytest.mark.parametrize("seed", range(20))
def test_pop_follows_graph_ranks_across_pools(seed: int) -> None:
    # Given a random graph's tasks spread over three pools with room
    rng = random.Random(seed)
    ids, deps = random_dag(rng, 30, 0.1)
    graph = Graph(
        ids, deps, {t: rng.randint(1, 4) for t in ids}, {t: rng.randint(0, 2) for t in ids}
    )
    pool = {t: rng.choice(["x", "y", "z"]) for t in ids}
    ready = ReadySet(graph.ranks, pool_of=pool.__getitem__)
    ready.extend(ids)

    # Then popping gives the global rank order
    assert drain(ready) == sorted(ids, key=lambda t: graph.ranks[t].key())


def test_a_full_pool_never_blocks_another_pool() -> None:
    # Given the best tasks in the "claude" pool, which is full, and worse ones in "shell"
    ranks = ranks_in_order("c1", "c2", "s1", "s2")
    pool = {"c1": "claude", "c2": "claude", "s1": "shell", "s2": "shell"}
    ready = ReadySet(ranks, pool_of=pool.__getitem__)
    ready.extend(pool)

    # When only "shell" has room
    popped = drain(ready, has_room=lambda p: p == "shell")

    # Then shell's tasks start, and claude's wait, still ready
    assert popped == ["s1", "s2"]
    assert "c1" in ready and "c2" in ready
    assert list(ready.pools()) == ["claude"]
    assert ready.pop(lambda p: False) is None
    assert drain(ready) == ["c1", "c2"]


def test_pop_from_an_empty_ready_set_is_none() -> None:
    assert ReadySet({}, pool_of=lambda t: "p").pop(always) is None


def test_pushing_a_task_twice_keeps_one_copy() -> None:
    ready = ReadySet(ranks_in_order("a", "b"), pool_of=lambda t: "p")
    ready.extend(["a", "a", "b", "a"])
    assert len(ready) == 2
    assert drain(ready) == ["a", "b"]


def test_a_discarded_task_is_never_popped() -> None:
    # Given three ready tasks, the best of which is discarded
    ready = ReadySet(ranks_in_order("a", "b", "c"), pool_of=lambda t: "p")
    ready.extend(["a", "b", "c"])
    ready.discard("a")
    ready.discard("not-there")

    # Then it is gone, and the others come out in order
    assert "a" not in ready
    assert len(ready) == 2
    assert drain(ready) == ["b", "c"]


def test_a_discarded_task_pushed_again_comes_out_once() -> None:
    ready = ReadySet(ranks_in_order("a", "b"), pool_of=lambda t: "p")
    ready.extend(["a", "b"])
    ready.discard("a")
    ready.push("a")
    assert drain(ready) == ["a", "b"]
    assert len(ready) == 0


def test_a_pool_whose_tasks_were_all_discarded_holds_nothing() -> None:
    ready = ReadySet(ranks_in_order("a", "b"), pool_of={"a": "x", "b": "y"}.__getitem__)
    ready.extend(["a", "b"])
    ready.discard("a")
    assert list(ready.pools()) == ["y"]
