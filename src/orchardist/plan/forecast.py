"""What a plan will do before it runs: launch order, critical path, expected makespan, drawings.

Pure: the same ranks the scheduler uses (:class:`~orchardist.plan.graph.Graph`), and a
list-scheduling
simulation with ``estimate`` as each attempt's duration, no failures, every candidate in its own
slot, ``[run] max_parallel`` and each profile's ``max_parallel``. Nothing here touches git, the
store or the clock.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..specs import Plan, TaskSpec
from .graph import Graph


@dataclass(frozen=True)
class Slot:
    """One candidate of a task in the simulated schedule (times in estimate units)."""

    task: str
    candidate: int
    start: float
    end: float


@dataclass(frozen=True)
class Forecast:
    """The plan's shape and its simulated schedule."""

    graph: Graph
    max_parallel: int
    schedule: tuple[Slot, ...]  # in launch order
    critical_path: tuple[str, ...]  # first task to last
    critical_length: float  # sum of the path's estimates
    makespan: float  # when the last simulated task ends
    total_work: float  # sum of every candidate's estimate

    @property
    def launch_order(self) -> list[str]:
        """Task ids in the order their first candidate starts."""
        seen: dict[str, None] = {}
        for slot in self.schedule:
            seen.setdefault(slot.task)
        return list(seen)

    def to_json(self) -> dict[str, object]:
        """The ``graph --json`` document."""
        return {
            "tasks": [{"id": t, "depends_on": list(self.graph.deps[t])} for t in self.graph.ids],
            "launch_order": self.launch_order,
            "schedule": [
                {"task": s.task, "candidate": s.candidate, "start": s.start, "end": s.end}
                for s in self.schedule
            ],
            "critical_path": list(self.critical_path),
            "critical_path_length": self.critical_length,
            "max_parallel": self.max_parallel,
            "makespan": self.makespan,
            "total_work": self.total_work,
        }


def forecast(
    plan: Plan, max_parallel: int | None = None, only: Sequence[str] = (), skip: Sequence[str] = ()
) -> Forecast:
    """Simulate ``plan``, without the tasks ``--only``/``--skip`` would leave out."""
    whole = Graph([t.id for t in plan.tasks], {t.id: t.depends_on for t in plan.tasks})
    out = whole.left_out(only, skip)
    tasks = [t for t in plan.tasks if t.id not in out]
    ids = {t.id for t in tasks}
    graph = Graph(
        [t.id for t in tasks],
        {t.id: [d for d in t.depends_on if d in ids] for t in tasks},
        {t.id: t.estimate for t in tasks},
        {t.id: t.priority for t in tasks},
    )
    slots = max_parallel or plan.run.max_parallel
    specs = {t.id: t for t in tasks}
    caps = {name: p.max_parallel for name, p in plan.agents.items()}
    schedule = _simulate(graph, specs, caps, slots)
    path = _critical_path(graph)
    return Forecast(
        graph=graph,
        max_parallel=slots,
        schedule=tuple(schedule),
        critical_path=tuple(path),
        critical_length=sum(specs[t].estimate for t in path),
        makespan=max((s.end for s in schedule), default=0.0),
        total_work=sum(s.end - s.start for s in schedule),
    )


def _simulate(
    graph: Graph, specs: Mapping[str, TaskSpec], caps: Mapping[str, int | None], slots: int
) -> list[Slot]:
    """Each attempt's slot when every one takes its task's estimate and none fails: the ready
    candidates by rank into ``slots`` (and their pools' caps), dependents released as tasks end."""
    waiting = {t: len(graph.deps[t]) for t in graph.ids}
    ready: list[tuple[tuple[float, int, int, int], str, int]] = []
    for t in graph.order:
        if waiting[t] == 0:
            for k in range(specs[t].candidates):
                heapq.heappush(ready, (graph.ranks[t].key(), t, k))
    running: list[tuple[float, int, str, int]] = []  # (end, tiebreak, task, candidate)
    load: Counter[str] = Counter()
    unfinished = {t: specs[t].candidates for t in graph.ids}
    schedule: list[Slot] = []
    now = 0.0
    counter = 0
    while ready or running:
        held: list[tuple[tuple[float, int, int, int], str, int]] = []
        while ready and len(running) < slots:
            item = heapq.heappop(ready)
            pool = specs[item[1]].agent_for(item[2])
            cap = caps.get(pool)
            if cap is not None and load[pool] >= cap:
                held.append(item)
                continue
            load[pool] += 1
            end = now + specs[item[1]].estimate
            heapq.heappush(running, (end, counter, item[1], item[2]))
            counter += 1
            schedule.append(Slot(item[1], item[2], now, end))
        for item in held:
            heapq.heappush(ready, item)
        if not running:  # pragma: no cover - a pool cap of 0 is rejected by validation
            break
        now, _, task, candidate = heapq.heappop(running)
        load[specs[task].agent_for(candidate)] -= 1
        unfinished[task] -= 1
        if unfinished[task] == 0:
            for child in graph.children[task]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    for k in range(specs[child].candidates):
                        heapq.heappush(ready, (graph.ranks[child].key(), child, k))
    return schedule


def _critical_path(graph: Graph) -> list[str]:
    """The longest estimate-weighted chain, following the ranks the scheduler uses."""
    if not graph.ids:
        return []
    ranks = graph.ranks
    node = min(graph.ids, key=lambda t: (-ranks[t].critical_path, ranks[t].index))
    path = [node]
    while graph.children[node]:
        node = min(graph.children[node], key=lambda t: (-ranks[t].critical_path, ranks[t].index))
        path.append(node)
    return path


def render(fc: Forecast, fmt: str = "text") -> str:
    """The forecast as text, or the graph in Graphviz ``dot`` or ``mermaid`` syntax."""
    if fmt == "dot":
        return _dot(fc)
    if fmt == "mermaid":
        return _mermaid(fc)
    return _text(fc)


def _number(value: float) -> str:
    return f"{value:g}"


def _text(fc: Forecast) -> str:
    graph = fc.graph
    on_path = set(fc.critical_path)
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for slot in fc.schedule:
        starts.setdefault(slot.task, slot.start)
        ends[slot.task] = max(ends.get(slot.task, 0.0), slot.end)
    count = len(graph.ids)
    lines = [f"{count} task{'s' * (count != 1)}; launch order (times in estimate units):"]
    for i, task in enumerate(fc.launch_order, 1):
        deps = graph.deps[task]
        after = f"  after {', '.join(deps)}" if deps else ""
        mark = " *" if task in on_path else ""
        span = f"{_number(starts[task]):>6} → {_number(ends[task]):<6}"
        lines.append(f"  {i:>3}. {task:<20} {span}{mark}{after}")
    lines.append(
        f"critical path (*): {' → '.join(fc.critical_path) or '-'}  "
        f"(length {_number(fc.critical_length)})"
    )
    lines.append(
        f"expected makespan with max_parallel {fc.max_parallel}: {_number(fc.makespan)} "
        f"(total work {_number(fc.total_work)}; lower bound "
        f"{_number(max(fc.critical_length, fc.total_work / fc.max_parallel))})"
    )
    lines.append("graph:")
    lines += _tree(graph)
    return "\n".join(lines)


def _tree(graph: Graph) -> list[str]:
    """Each task under the tasks that depend on it, roots (sinks) first; repeats marked ``^``."""
    lines: list[str] = []
    shown: set[str] = set()

    def walk(task: str, depth: int) -> None:
        again = task in shown and graph.deps[task]
        lines.append(f"  {'  ' * depth}{'└─ ' if depth else ''}{task}{' ^' if again else ''}")
        if again:
            return
        shown.add(task)
        for dep in graph.deps[task]:
            walk(dep, depth + 1)

    for task in graph.order[::-1]:
        if not graph.children[task]:
            walk(task, 0)
    return lines


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot(fc: Forecast) -> str:
    on_path = set(zip(fc.critical_path, fc.critical_path[1:], strict=False))
    lines = ["digraph plan {", "  rankdir=LR;"]
    critical = set(fc.critical_path)
    for task in fc.graph.ids:
        style = " [style=bold]" if task in critical else ""
        lines.append(f"  {_quote(task)}{style};")
    for task in fc.graph.ids:
        for dep in fc.graph.deps[task]:
            style = " [style=bold]" if (dep, task) in on_path else ""
            lines.append(f"  {_quote(dep)} -> {_quote(task)}{style};")
    lines.append("}")
    return "\n".join(lines)


def _mermaid(fc: Forecast) -> str:
    names = {t: f"t{i}" for i, t in enumerate(fc.graph.ids)}
    lines = ["graph LR"]
    for task in fc.graph.ids:
        label = task.replace('"', "#quot;")
        lines.append(f'  {names[task]}["{label}"]')
    for task in fc.graph.ids:
        for dep in fc.graph.deps[task]:
            lines.append(f"  {names[dep]} --> {names[task]}")
    if fc.critical_path:
        lines.append("  classDef critical stroke-width:3px")
        lines.append(f"  class {','.join(names[t] for t in fc.critical_path)} critical")
    return "\n".join(lines)
