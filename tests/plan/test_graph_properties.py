"""Properties of the task graph on random graphs (hypothesis), checked against brute force:
critical-path ranks, dependents counts, cycles, and the ready set's order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchardist.plan.cycles import find_cycles
from orchardist.plan.graph import Graph, Rank, ReadySet

# hypothesis's default 100 examples a property (it was 150, ~0.7 s more CPU in every quick loop):
# the graphs have at most 9 tasks, where a handful of shapes (a chain, a fan-in, a diamond, a
# lone task) is what tells a rank or a cycle apart, and hypothesis draws them (it starts from
# the smallest) in far fewer examples; each run draws new ones, the brute-force answers are exact.
FAST = settings(max_examples=100, deadline=None)

# The strategies the examples draw from, each built once here rather than at every draw: a
# strategy made inside a draw (a fresh ``sampled_from`` per task) is validated and looked up
# again each time, which took more of an example's CPU than drawing from it.
MAX_TASKS = 9
CREATED = [f"t{i}" for i in range(MAX_TASKS)]
DEPS_AMONG_FIRST = {
    i: st.sets(st.sampled_from(CREATED[:i]), max_size=i) for i in range(1, MAX_TASKS)
}
ORDERS_OF_FIRST = {n: st.permutations(CREATED[:n]) for n in range(1, MAX_TASKS + 1)}
ESTIMATES = st.integers(1, 50)
POOLS = st.sampled_from(["a", "b", "c"])
PRIORITIES = st.integers(-3, 3)


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]], dict[str, float], list[str]]:
    """A random DAG: task i may depend on tasks created before it; ids listed in a random
    order (so file order is not topological), with integer estimates (exact sums)."""
    n = draw(st.integers(1, MAX_TASKS))
    created = CREATED[:n]
    deps = {task: sorted(draw(DEPS_AMONG_FIRST[i])) if i else [] for i, task in enumerate(created)}
    estimates = {t: float(draw(ESTIMATES)) for t in created}
    ids = draw(ORDERS_OF_FIRST[n])
    pools = [draw(POOLS) for _ in created]
    return list(ids), deps, estimates, pools


def children_of(ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {t: [] for t in ids}
    for task, task_deps in deps.items():
        for dep in task_deps:
            children[dep].append(task)
    return children


def longest_path_brute(
    task: str, children: Mapping[str, list[str]], est: Mapping[str, float]
) -> float:
    """Every path from ``task`` down its dependents, enumerated; the heaviest one's weight."""
    best = 0.0
    stack = [(task, est[task])]
    while stack:
        node, weight = stack.pop()
        best = max(best, weight)
        stack.extend((child, weight + est[child]) for child in children[node])
    return best


def reachable_brute(task: str, children: Mapping[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(children[task])
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(children[node])
    return seen


@FAST
@given(dags(), st.data())
def test_ranks_are_the_brute_force_critical_paths_and_dependents(
    dag: tuple[list[str], dict[str, list[str]], dict[str, float], list[str]], data: st.DataObject
) -> None:
    ids, deps, estimates, _ = dag
    priority = {t: data.draw(PRIORITIES) for t in ids}
    graph = Graph(ids, deps, estimates, priority)
    children = children_of(ids, deps)
    for i, task in enumerate(ids):
        rank = graph.ranks[task]
        assert rank.critical_path == longest_path_brute(task, children, estimates)
        assert rank.dependents == len(reachable_brute(task, children))
        assert (rank.priority, rank.index) == (priority[task], i)
    # and the topological order puts every task after what it depends on
    position = {t: i for i, t in enumerate(graph.order)}
    assert sorted(graph.order) == sorted(ids)
    assert all(position[d] < position[t] for t in ids for d in deps[t])


@FAST
@given(dags())
def test_ancestors_and_descendants_are_the_transitive_closures(
    dag: tuple[list[str], dict[str, list[str]], dict[str, float], list[str]],
) -> None:
    ids, deps, _, _ = dag
    graph = Graph(ids, deps)
    children = children_of(ids, deps)
    for task in ids:
        assert set(graph.descendants(task)) == reachable_brute(task, children)
        assert set(graph.ancestors(task)) == reachable_brute(task, deps)


NODES = [f"n{i}" for i in range(7)]
EDGES_AMONG_FIRST = {n: st.sets(st.sampled_from(NODES[:n]), max_size=3) for n in range(1, 8)}


@st.composite
def digraphs(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]]]:
    """Any directed graph (cycles and self-loops allowed) on up to 7 tasks."""
    n = draw(st.integers(1, len(NODES)))
    ids = NODES[:n]
    deps = {t: sorted(draw(EDGES_AMONG_FIRST[n])) for t in ids}
    return ids, deps


def acyclic_brute(ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> bool:
    """Kahn's algorithm, the textbook way."""
    left = {t: set(deps[t]) for t in ids}
    while left:
        free = [t for t, d in left.items() if not d & set(left)]
        if not free:
            return False
        for t in free:
            del left[t]
    return True


@FAST
@given(digraphs())
def test_cycles_are_found_exactly_when_there_are_some_and_each_is_a_real_cycle(
    graph: tuple[list[str], dict[str, list[str]]],
) -> None:
    ids, deps = graph
    cycles = find_cycles(ids, deps)
    assert (cycles == []) == acyclic_brute(ids, deps)
    for cycle in cycles:
        assert len(set(cycle)) == len(cycle)
        for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
            assert b in deps[a], (cycle, a, b)
    if cycles:
        with pytest.raises(ValueError, match="dependency cycle"):
            Graph(ids, deps)


# -- the ready set ------------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 8)),
        st.tuples(st.just("discard"), st.integers(0, 8)),
        st.tuples(st.just("pop"), st.sets(st.sampled_from(["a", "b", "c"]))),
    ),
    max_size=40,
)


@FAST
@given(dags(), ops)
def test_the_ready_set_pops_the_best_ranked_task_whose_pool_has_room(
    dag: tuple[list[str], dict[str, list[str]], dict[str, float], list[str]],
    operations: list[tuple[str, object]],
) -> None:
    # Given: a graph's ranks, a pool per task, and a model: a plain set of ready tasks
    ids, deps, estimates, pools = dag
    ranks: dict[str, Rank] = Graph(ids, deps, estimates).ranks
    pool_of = dict(zip(sorted(ids), pools, strict=True))
    ready = ReadySet(ranks, pool_of.__getitem__)
    model: set[str] = set()
    # When: tasks are pushed, discarded and popped in any order
    for op, arg in operations:
        if op in ("push", "discard"):
            assert isinstance(arg, int)
            task = sorted(ids)[arg % len(ids)]
            if op == "push":
                ready.push(task)
                model.add(task)
            else:
                ready.discard(task)
                model.discard(task)
        else:
            assert isinstance(arg, set)
            room = arg
            got = ready.pop(room.__contains__)
            eligible = [t for t in model if pool_of[t] in room]
            # Then: it is the best-ranked eligible task (ties by id), or None when none is
            want = min(eligible, key=lambda t: (ranks[t].key(), t)) if eligible else None
            assert got == want
            model.discard(got or "")
        assert len(ready) == len(model)
        assert all(t in ready for t in model)
        assert set(ready.pools()) == {pool_of[t] for t in model}
