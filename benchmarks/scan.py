"""What orchardist's scan costs over running a scanner directly, cold and warm.

Usage: ``python benchmarks/scan.py [--files 1000] [--max-parallel N] [--repeat 3]
[--old PATH | --old-ref REF]``

A throwaway repository holds ``--files`` small Python modules (about 30 lines each, a few lint
findings in each). The scanner is ruff (``python -m ruff``), file-scoped, through SARIF.

Printed, each the median of ``--repeat`` tries:

- ``direct``: ruff run once over all the files, SARIF to stdout (the baseline);
- ``floor``: the least a first scan can do (``benchmarks/scan_floor.py``: export the committed
  files, run ruff there, read its SARIF, write one), in the same interpreter;
- ``cold``: ``orchardist scan --no-cache`` (export, batches in parallel, parse, merge, SARIF);
- ``warm``: ``orchardist scan`` after a one-file change, with the cache filled before: only
  the changed file is scanned;
- ``cached``: ``orchardist scan`` of a tree it has scanned, nothing changed (all from the cache);
- ``start``: how long a cold scan takes to start its scanner (wall) and the CPU its own process
  (not its git processes) used by then, its scanner first noting both (``date``,
  ``/proc/PPID/task/*/schedstat``; unsandboxed, so that it may write them outside its tree);
- each against ``direct`` (the ratio), and that every scan found what ruff found.

Scans write SARIF to a file (``-o``). With ``--old PATH`` (a checkout; its ``src`` is imported)
or ``--old-ref REF`` (``git archive``), the older code is timed too, round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODULE = '''"""Module {n}."""

import os
import sys
from typing import List


def total_{n}(values: List[int]) -> int:
    result = 0
    for i in range(len(values)):
        result = result + values[i]
    return result


def describe_{n}(item):
    if item == None:
        return "nothing"
    name = item.get("name")
    return "item %s" % name


class Box{n}:
    def __init__(self, size=[]):
        self.size = size

    def area(self):
        try:
            return self.size[0] * self.size[1]
        except:
            return 0
'''

PLAN = """
[run]
max_parallel = {max_parallel}

[scanners.ruff]
command = "{python} -m ruff check --no-cache --exit-zero --output-format sarif {{files}}"
include = ["**/*.py"]
config = ["pyproject.toml"]
version = "{python} -m ruff --version"
"""

# the same scan, its scanner first noting when it started, and the CPU time its orchardist
# (its parent) has used by then, each thread's (/proc/PID/task/*/schedstat, in nanoseconds):
# outside its tree, so unsandboxed
STARTED_PLAN = PLAN.replace("[run]\n", "[run]\nsandbox = false\n").replace(
    'command = "',
    'command = "date +%s.%N > {started}; cat /proc/$PPID/task/*/schedstat > {started}.cpu; ',
)

RUFF_CONFIG = '[tool.ruff.lint]\nselect = ["E", "F", "W", "B", "UP"]\n'


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repo(root: Path, files: int, max_parallel: int) -> Path:
    repo = root / "repo"
    for n in range(files):
        path = repo / "pkg" / f"sub{n % 20}" / f"mod{n}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE.format(n=n))
    (repo / "pyproject.toml").write_text(RUFF_CONFIG)
    (repo / "scan.toml").write_text(
        PLAN.format(python=shlex.quote(sys.executable), max_parallel=max_parallel)
    )
    (repo / "start.toml").write_text(
        STARTED_PLAN.format(
            python=shlex.quote(sys.executable),
            max_parallel=max_parallel,
            started=shlex.quote(str(root / "started")),
        )
    )
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "modules")
    return repo


def cpu_s() -> float:
    """CPU seconds (user + system) used by finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the command and all it started) and stdout of a command."""
    start, cpu = time.perf_counter(), cpu_s()
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    elapsed, used = time.perf_counter() - start, cpu_s() - cpu
    if out.returncode not in (0, 1):
        raise SystemExit(f"{argv} failed ({out.returncode}): {out.stderr[-2000:]}")
    return elapsed, used, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--max-parallel", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old", type=Path, help="also time the code of this checkout's src/")
    parser.add_argument("--old-ref", help="also time the code of this ref (git archive)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-scan-bench-") as tmp:
        root = Path(tmp)
        repo = make_repo(root, args.files, args.max_parallel)
        env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode caches, as after an install
        sides = {"this tree": None}
        if args.old or args.old_ref:
            from dashboard_load import old_source

            old = str(args.old / "src") if args.old else old_source(args.old_ref, root / "old")
            sides = {str(args.old or args.old_ref): old, **sides}
        times: dict[str, dict[str, list[tuple[float, float]]]] = {}
        checks: list[bool] = []
        for attempt in range(args.repeat):
            for n, (side, path) in enumerate(sides.items()):
                side_env = {**env, **({"PYTHONPATH": path} if path else {})}
                row = times.setdefault(side, {})
                checks.append(one_round(repo, side_env, row, 2 * attempt + n))
        report(args, times, all(checks))


def one_round(
    repo: Path, env: dict[str, str], row: dict[str, list[tuple[float, float]]], n: int
) -> bool:
    """ruff alone, a scan without the cache, one fully cached, one after a one-file change;
    each appended to ``row`` as (wall s, cpu s). Whether every scan found what ruff found."""
    direct_argv = [sys.executable, "-m", "ruff", "check", "--no-cache", "--exit-zero"]
    direct_argv += ["--output-format", "sarif", "."]
    scan = [sys.executable, "-m", "orchardist", "scan", "scan.toml", "--json", "-o", "out.sarif"]
    seconds, used, out = timed(direct_argv, repo, env)
    row.setdefault("direct", []).append((seconds, used))
    expected = len(json.loads(out)["runs"][0]["results"])
    floor = [sys.executable, str(Path(__file__).with_name("scan_floor.py")), "floor.sarif"]
    floor += ["*.py", "pyproject.toml", *direct_argv[:-1]]
    seconds, used, _ = timed(floor, repo, env)
    row.setdefault("floor", []).append((seconds, used))
    found = [len(json.loads((repo / "floor.sarif").read_text())["runs"][0]["results"])]
    for name, argv in (("cold", [*scan, "--no-cache"]), ("fill", scan), ("cached", scan)):
        seconds, used, out = timed(argv, repo, env)
        row.setdefault(name, []).append((seconds, used))
        found.append(json.loads(out)["findings"])
    row.setdefault("start", []).append(until_started(repo, env))
    changed = repo / "pkg" / f"sub{n % 20}" / f"mod{n % 20}.py"
    changed.write_text(changed.read_text() + f"\n\nVALUE_{n} = {n}\n")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qam", "edit")
    seconds, used, out = timed(scan, repo, env)
    row.setdefault("warm", []).append((seconds, used))
    summary = json.loads(out)
    assert summary["scanners"][0]["misses"] == 1, summary["scanners"]
    found.append(summary["findings"])
    return all(f == expected for f in found)


def until_started(repo: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds from a cold scan's start to its scanner's, and the CPU seconds its
    orchardist process used by then (its threads alive then; its git processes not counted),
    as the scanner notes them."""
    argv = [sys.executable, "-m", "orchardist", "scan", "start.toml", "--json", "--no-cache"]
    started, cpu = repo.parent / "started", repo.parent / "started.cpu"
    started.unlink(missing_ok=True)
    begun = time.time()
    timed([*argv, "-o", "out.sarif"], repo, env)
    used_ns = sum(int(line.split()[0]) for line in cpu.read_text().splitlines())
    return float(started.read_text()) - begun, used_ns / 1e9


LABELS = {
    "direct": "direct ruff, once over all files",
    "floor": "floor: export, ruff, SARIF in and out",
    "cold": "orchardist scan, cold (--no-cache)",
    "cached": "orchardist scan, cached, no change",
    "warm": "orchardist scan, warm, 1 changed",
    "start": "cold, until the scanner starts (*)",
}


def report(
    args: argparse.Namespace, times: dict[str, dict[str, list[tuple[float, float]]]], same: bool
) -> None:
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; "
        f"python {platform.python_version()}"
    )
    print(f"files: {args.files}, max_parallel: {args.max_parallel}, repeat: {args.repeat}")
    print("median wall s / cpu s (the command and all it started); sides A/B interleaved")
    print(f"{'':36}" + "".join(f"{side[-18:]:>20}" for side in times))
    for key, label in LABELS.items():
        cells = []
        for row in times.values():
            wall, cpu = (statistics.median(x[i] for x in row[key]) for i in (0, 1))
            direct = statistics.median(x[0] for x in row["direct"])
            ratio = "" if key in ("direct", "start") else f" {wall / direct:4.1f}x"
            cells.append(f"{wall:6.3f} {cpu:5.3f}{ratio:>6}")
        print(f"{label:36}" + "".join(f"{c:>20}" for c in cells))
    floors = []
    for side, row in times.items():
        cold, floor = (statistics.median(x[0] for x in row[key]) for key in ("cold", "floor"))
        floors.append(f"{side}: {cold / floor:.1f}x")
    print("cold scan against the floor (wall): " + ", ".join(floors))
    print(f"same findings as ruff: {same}")
    print("(*) its cpu: orchardist's own (threads then alive), not its git processes'")


if __name__ == "__main__":
    main()
