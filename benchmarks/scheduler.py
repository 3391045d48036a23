"""How close the scheduler gets to the best possible makespan, and what it costs per task.

Usage: ``python benchmarks/scheduler.py [--sizes 100,2000] [--seed 7]``

For each size, a random layered DAG (seeded) runs through the real :class:`Scheduler`, a real
SQLite :class:`Store` and the real git :class:`Integrator`, in a throwaway repository. Only the
agents are fake: the package's :class:`InlineExecutor` implements the Executor seam and "runs"
each attempt by waiting out the task's duration on one timer thread (a heap and a Condition, no
polling). Such an attempt changes nothing, so its patch is its base commit: the integrator still
does all its work (read the tip, merge when the tip moved, write the commit, move the branch).

Printed per graph:

- ``makespan`` ÷ ``bound``, where bound = max(critical path, total work ÷ workers). Target ≤ 1.10.
  ``ideal`` is the same priority rule simulated with zero overhead: what the policy alone gets.
  Task lengths are chosen so that results arrive at about a quarter of the rate that an
  orchestrator meeting the 5 ms target could absorb (``offered load``): the ratio then measures
  scheduling, not a saturated loop. Sub-second tasks are still far harsher than real agents.
- orchestration overhead per task: wall time of the same graph with zero-duration tasks, divided
  by its number of tasks. Target ≤ 5 ms. It is shown twice: end to end (with git merges), and with
  the git integrator swapped for the package's in-memory one (scheduler + store alone), so that
  the cost of git's subprocesses is visible on its own.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchardist.engine.integrators import GitIntegrator, MemoryIntegrator
from orchardist.engine.scheduler import Scheduler
from orchardist.executors.inline import InlineExecutor
from orchardist.plan.graph import Graph
from orchardist.plan.loading import load_plan
from orchardist.runs.start import Workspace, create_run
from orchardist.specs import Plan

RATIO_TARGET = 1.10
OVERHEAD_TARGET_MS = 5.0


# -- graphs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """A random layered DAG and the machine it runs on."""

    name: str
    tasks: int
    layers: int
    workers: int
    min_s: float
    max_s: float


@dataclass(frozen=True)
class Dag:
    ids: list[str]
    deps: dict[str, list[str]]
    durations_s: dict[str, float]

    @property
    def edges(self) -> int:
        return sum(len(d) for d in self.deps.values())


def layered_dag(spec: Spec, rng: random.Random) -> Dag:
    """Tasks in layers; each depends on 1-3 tasks of the layer before, sometimes one further up."""
    sizes = [spec.tasks // spec.layers + (i < spec.tasks % spec.layers) for i in range(spec.layers)]
    layers: list[list[str]] = []
    deps: dict[str, list[str]] = {}
    counter = itertools.count()
    for size in sizes:
        layer = [f"t{next(counter):04d}" for _ in range(size)]
        for task in layer:
            chosen: set[str] = set()
            if layers:
                previous = layers[-1]
                chosen.update(rng.sample(previous, rng.randint(1, min(3, len(previous)))))
                if len(layers) > 1 and rng.random() < 0.3:
                    chosen.add(rng.choice(rng.choice(layers[:-1])))
            deps[task] = sorted(chosen)
        layers.append(layer)
    ids = [t for layer in layers for t in layer]
    durations = {t: round(rng.uniform(spec.min_s, spec.max_s), 3) for t in ids}
    return Dag(ids, deps, durations)


def critical_path_s(dag: Dag) -> float:
    """The longest duration-weighted path (ids are in topological order)."""
    finish: dict[str, float] = {}
    for task in dag.ids:
        finish[task] = dag.durations_s[task] + max((finish[d] for d in dag.deps[task]), default=0)
    return max(finish.values())


def ideal_makespan_s(dag: Dag, workers: int) -> float:
    """The scheduler's priority rule, simulated with zero overhead (list scheduling)."""
    graph = Graph(dag.ids, dag.deps, dag.durations_s)
    waiting = {t: len(d) for t, d in dag.deps.items()}
    ready = [(graph.ranks[t].key(), t) for t in dag.ids if waiting[t] == 0]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < workers:
            task = heapq.heappop(ready)[1]
            heapq.heappush(running, (now + dag.durations_s[task], task))
        now, task = heapq.heappop(running)
        for child in graph.children[task]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (graph.ranks[child].key(), child))
    return now


# -- running -------------------------------------------------------------------------------------


def make_repo(path: Path) -> None:
    """A repository with one commit and an identity of its own."""
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    for args in (
        ["init", "-q"],
        ["config", "user.name", "bench"],
        ["config", "user.email", "bench@localhost"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True, env=env)
    (path / "README.md").write_text("benchmark\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=path, check=True, env=env)


def write_plan(repo: Path, dag: Dag, workers: int) -> Plan:
    """The DAG as a real plan file (estimates = durations, so ranks see the true lengths)."""
    lines = [
        "[run]",
        f"max_parallel = {workers}",
        "",
        "[agents.sleeper]",
        'kind = "shell"',
        'command = "true"  # never run: the InlineExecutor stands in for the agents',
        "",
    ]
    for task in dag.ids:
        deps = ", ".join(f'"{d}"' for d in dag.deps[task])
        lines += [
            "[[task]]",
            f'id = "{task}"',
            f"depends_on = [{deps}]",
            f"estimate = {dag.durations_s[task]}",
            "",
        ]
    path = repo / "plan.toml"
    path.write_text("\n".join(lines))
    return load_plan(path)


@dataclass(frozen=True)
class Result:
    wall_s: float
    tasks_done: int
    merge_lag_ms: tuple[float, float]  # p50, p95: agent result -> commit on the branch


def run_once(root: Path, name: str, dag: Dag, workers: int, zero: bool, git: bool) -> Result:
    """One run of ``dag`` through the scheduler; durations zeroed when ``zero``."""
    repo = root / name
    make_repo(repo)
    plan = write_plan(repo, dag, workers)
    ws = Workspace.open(repo)
    run = create_run(ws, plan)
    durations = dict.fromkeys(dag.ids, 0.0) if zero else dag.durations_s
    executor = InlineExecutor(durations_s=durations)
    integrator = GitIntegrator(ws.repo, run.branch) if git else MemoryIntegrator(run.base_commit)
    scheduler = Scheduler(plan, run, ws.store, executor, integrator, max_parallel=workers)
    start = time.perf_counter()
    try:
        scheduler.run()
    finally:
        executor.close()
    wall = time.perf_counter() - start
    done = sum(t.state.value == "done" for t in ws.store.tasks(run.id))
    ended = {a.task_id: a.ended_at for a in ws.store.attempts(run.id) if a.ended_at is not None}
    lags = [
        (e.ts - ended[e.task_id]) * 1000
        for e in ws.store.events(run.id)
        if e.kind == "merge" and e.data.get("state") == "merged" and e.task_id in ended
    ]
    ws.store.close()
    p50 = statistics.median(lags) if lags else float("nan")
    p95 = statistics.quantiles(lags, n=20)[-1] if len(lags) >= 2 else p50
    return Result(wall, done, (p50, p95))


def load_note() -> str:
    """The 1-minute load average, with a warning when other work competes for the CPUs."""
    load = os.getloadavg()[0]
    busy = load > (os.cpu_count() or 1) * 0.75
    return f"{load:.2f}" + ("  (busy machine: timings are inflated)" if busy else "")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,2000", help="graph sizes to run (100 and/or 2000)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    specs = {
        100: Spec("layered-100", 100, layers=10, workers=8, min_s=0.05, max_s=0.35),
        2000: Spec("layered-2000", 2000, layers=25, workers=16, min_s=0.1, max_s=0.55),
    }
    chosen = [specs[int(s)] for s in args.sizes.split(",")]
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    print(
        f"orchardist scheduler benchmark: python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {git_version.strip()}, seed {args.seed}"
    )
    print(f"load average before: {load_note()}\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="orchardist-bench-") as tmp:
        root = Path(tmp)
        for spec in chosen:
            dag = layered_dag(spec, random.Random(f"{args.seed}-{spec.tasks}"))
            work = sum(dag.durations_s.values())
            critical = critical_path_s(dag)
            bound = max(critical, work / spec.workers)
            ideal = ideal_makespan_s(dag, spec.workers)
            timed = run_once(root, f"{spec.name}-timed", dag, spec.workers, zero=False, git=True)
            full = run_once(root, f"{spec.name}-zero", dag, spec.workers, zero=True, git=True)
            bare = run_once(root, f"{spec.name}-bare", dag, spec.workers, zero=True, git=False)
            assert timed.tasks_done == full.tasks_done == bare.tasks_done == spec.tasks
            rows.append((spec, dag, work, critical, bound, ideal, timed, full, bare))
            load = spec.workers / (work / spec.tasks)
            print(
                f"{spec.name}: {spec.tasks} tasks, {dag.edges} edges, {spec.layers} layers, "
                f"{spec.workers} workers, tasks of {spec.min_s:g}-{spec.max_s:g}s"
            )
            share = load * OVERHEAD_TARGET_MS / 1000
            print(
                f"  offered load         {load:8.1f} results/s  "
                f"({share:.0%} of what {OVERHEAD_TARGET_MS:g} ms/task absorbs)"
            )
            print(f"  critical path        {critical:8.2f} s")
            print(f"  total work / workers {work / spec.workers:8.2f} s   ({work:.1f} s of work)")
            print(f"  lower bound          {bound:8.2f} s")
            print(f"  ideal (no overhead)  {ideal:8.2f} s   ratio {ideal / bound:.3f}")
            ratio = timed.wall_s / bound
            print(
                f"  makespan             {timed.wall_s:8.2f} s   ratio {ratio:.3f}  "
                f"(target ≤ {RATIO_TARGET:.2f}: {verdict(ratio <= RATIO_TARGET)})"
            )
            print(
                f"  result → on branch   p50 {timed.merge_lag_ms[0]:.1f} ms, "
                f"p95 {timed.merge_lag_ms[1]:.1f} ms"
            )
            for label, res in (("with git merges", full), ("scheduler + store only", bare)):
                per_task = res.wall_s / spec.tasks * 1000
                ok = verdict(per_task <= OVERHEAD_TARGET_MS)
                print(
                    f"  overhead, {label:<23}{per_task:6.2f} ms/task  "
                    f"({res.wall_s:.2f} s for {spec.tasks} zero-length tasks; "
                    f"target ≤ {OVERHEAD_TARGET_MS:g} ms: {ok})"
                )
            print()
    print(f"load average after: {load_note()}\n")
    print("summary")
    print(
        f"  {'graph':<13}{'workers':>8}{'tasks':>7}{'makespan':>10}{'bound':>8}{'ratio':>7}"
        f"{'ideal':>7}{'ms/task':>9}{'(no git)':>9}"
    )
    for spec, _, _, _, bound, ideal, timed, full, bare in rows:
        print(
            f"  {spec.name:<13}{spec.workers:>8}{spec.tasks:>7}{timed.wall_s:>9.2f}s"
            f"{bound:>7.2f}s{timed.wall_s / bound:>7.3f}{ideal / bound:>7.3f}"
            f"{full.wall_s / spec.tasks * 1000:>9.2f}{bare.wall_s / spec.tasks * 1000:>9.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
