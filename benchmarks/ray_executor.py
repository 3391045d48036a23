"""Per-task cost of ``orchardist run`` on a local Ray cluster, beside the local executor.

Usage::

    python benchmarks/ray_executor.py [--tasks 100,1000] [--workers 2] [--cpus 2] [--files 100]

Starts a real local cluster (``tests/ray_support.py``: a head with no CPUs and ``--workers``
worker nodes on 127.0.0.1, ``--cpus`` attempts at once each), then for each task count: the
same plan as ``benchmarks/e2e.py`` (``independent`` shape: shell agents each adding a one-line
file, real attempt folders, snapshots and merges, ``verify = "none"``) run twice through the
real CLI, each in a fresh repository: once with the local executor and once with
``--executor ray``, both with ``--max-parallel`` = workers x cpus.

Printed per task count: wall ms per task of each, the Ray overhead ratio (ray / local), the
orchestrator's peak RSS; at the end, how each executor's per-task cost grew from the smallest
count to the largest (flat is 1.0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from e2e import GIT_ENV, make_repo, write_plan  # noqa: E402

from ray_support import RayCluster  # noqa: E402


def run(plan: Path, parallel: int, workroot: Path, extra: list[str]) -> tuple[float, int, str]:
    """Wall seconds and peak RSS (KiB) of one ``orchardist run``, and its output's tail."""
    cmd = [sys.executable, "-m", "orchardist", "-q", "run", str(plan), "--fresh"]
    cmd += ["--max-parallel", str(parallel), *extra]
    env = {**GIT_ENV, "ORCHARDIST_WORKDIR_ROOT": str(workroot)}
    log = plan.with_suffix(f".{len(extra)}.log")
    start = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=plan.parent, env=env, stdout=out, stderr=out)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    text = log.read_text(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:  # reported with the row, not fatal
        print(f"orchardist {' '.join(extra) or 'local'} failed:\n{text[-1500:]}", flush=True)
    return wall, usage.ru_maxrss, text[-500:]


def commits(repo: Path) -> int:
    """Commits on the run branch beyond the base (one per task)."""
    branch = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname)", "refs/heads/orchardist/"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    out = subprocess.run(
        ["git", "rev-list", "--count", f"main..{branch}"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="100,1000", help="comma-separated task counts")
    parser.add_argument("--workers", type=int, default=2, help="worker nodes")
    parser.add_argument("--cpus", type=int, default=2, help="attempts at once per worker node")
    parser.add_argument("--files", type=int, default=100, help="files in the base repository")
    args = parser.parse_args()
    counts = [int(n) for n in args.tasks.split(",")]
    parallel = args.workers * args.cpus
    tmp = Path(tempfile.mkdtemp(prefix="orchardist-bench-ray-"))
    cluster = RayCluster(tmp / "cluster")
    per_task: dict[str, dict[int, float]] = {"local": {}, "ray": {}}
    try:
        cluster.start(workers=args.workers, cpus_per_worker=args.cpus)
        print(f"cluster: head (0 CPUs) + {args.workers} worker nodes x {args.cpus} CPUs")
        print(f"{'tasks':>6} {'executor':<8} {'ms/task':>9} {'peak RSS':>9} {'commits':>8}")
        for n in counts:
            for name, extra in (
                ("local", []),
                ("ray", ["--executor", "ray", "--ray-address", cluster.address]),
            ):
                folder = tmp / f"{name}-{n}"
                repo = make_repo(folder / "repo", args.files)
                plan = write_plan(repo, n, "independent")
                wall, rss_kib, _ = run(plan, parallel, folder / "work", extra)
                made = commits(repo)  # fewer than n: some task failed (said above)
                per_task[name][n] = wall / n * 1e3
                print(
                    f"{n:>6} {name:<8} {per_task[name][n]:9.1f} {rss_kib / 1024:6.0f} MB {made:>8}",
                    flush=True,
                )
                shutil.rmtree(folder, ignore_errors=True)
            ratio = per_task["ray"][n] / per_task["local"][n]
            print(f"{n:>6} ray overhead: {ratio:.2f}x the local executor per task", flush=True)
        low, high = min(counts), max(counts)
        if low != high:
            for name, costs in per_task.items():
                growth = costs[high] / costs[low]
                print(f"{name}: per-task cost at {high} / at {low} tasks: {growth:.2f}x")
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
