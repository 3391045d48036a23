"""What the commands that only read cost: ``orchardist --help``, ``runs``, ``status`` and
``validate`` as a user starts them (a new ``python -m orchardist`` process each time), this tree
against an older one, A/B interleaved in one run.

    python benchmarks/cli_start.py [--old PATH | --old-ref main] [--repeat 21] [--runs 20]
                                   [--instructions]

The repository is a throwaway one whose store holds ``--runs`` finished runs of 10 tasks (the
newest is what ``status`` shows) and a one-task plan (what ``validate`` checks). ``--old PATH`` is
a checkout whose ``src`` holds the older code (e.g. a worktree of main); without it, ``git archive``
of ``--old-ref`` is unpacked. Printed: the median wall time of each command for both, their ratio,
each against the target (100 ms on an idle 2-core machine), and ``python -c pass`` and
``git status`` as the floor the machine gives at that moment. ``--instructions``: instead, the
instructions each command's Python process runs (valgrind's callgrind, the median of three with
ASLR off and a fixed hash seed; its git children not counted), which the machine's load does
not change.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dashboard_load import fill_store, old_source  # the same store, made alike

TARGET_MS = 100.0
COMMANDS = (("--help",), ("runs",), ("status",), ("validate", "plan.toml"))
Times = dict[str, dict[str, list[tuple[float, float]]]]  # row, side: (wall, cpu) in ms


def timed(argv: list[str], cwd: Path, pythonpath: str | None) -> tuple[float, float]:
    """One process's wall time from fork to exit, and its CPU time (user and system, which
    the machine's load changes less), in ms; it must succeed."""
    # bytecode caches written and read, as after an install
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="a checkout holding the older code in src/")
    parser.add_argument("--old-ref", default="main", help="without --old: the ref to compare")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--instructions", action="store_true", help="count, not time (valgrind)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        repo = Path(tmp) / "repo"
        fill_store(repo, args.runs, 10)
        old = str(args.old / "src") if args.old else old_source(args.old_ref, Path(tmp) / "old")
        label = str(args.old) if args.old else args.old_ref
        for command in COMMANDS:  # once untimed: the bytecode caches get written
            for path in (old, None):
                timed([sys.executable, "-m", "orchardist", *command], repo, path)
        if args.instructions:
            counted(repo, old, label)
        else:
            report(measure(repo, old, args.repeat), label, args.repeat)


def instructions(argv: list[str], cwd: Path, pythonpath: str | None) -> int:
    """The instructions the process ``argv`` runs (its children not counted), by callgrind:
    the median of three, with the addresses not randomized and a fixed string hash seed (with
    either random, dicts and sets of the same objects collide differently: ±5 M run to run)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }
    env["PYTHONHASHSEED"] = "0"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    tool = ["setarch", "-R", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    counts = []
    for _ in range(3):
        done = subprocess.run([*tool, *argv], cwd=cwd, env=env, capture_output=True, text=True)
        found = [line for line in done.stderr.splitlines() if "Collected :" in line]
        if done.returncode != 0 or not found:
            raise SystemExit(f"{' '.join(argv)} under callgrind failed: {done.stderr[-2000:]}")
        counts.append(int(found[-1].split(":")[-1]))
    return int(statistics.median(counts))


def counted(repo: Path, old: str, label: str) -> None:
    """Each command's instructions from both trees, and ``python -c pass``'s, in millions."""
    floor = instructions([sys.executable, "-c", "pass"], repo, None) / 1e6
    print(f"instructions (millions), callgrind; python -c pass {floor:.1f}")
    print(f"{'':30} {label + ' (before)':>20} {'this tree':>10} {'ratio':>6}")
    for command in COMMANDS:
        argv = [sys.executable, "-m", "orchardist", *command]
        before, after = (instructions(argv, repo, path) / 1e6 for path in (old, None))
        name = "orchardist " + " ".join(command)
        print(f"{name:30} {before:20.1f} {after:10.1f} {before / after:5.2f}x")


def measure(repo: Path, old: str, repeat: int) -> Times:
    """Each command ``repeat`` times from each tree, pair by pair, and the floors between."""
    floors = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "git status": ["git", "status", "--short"],
    }
    times: Times = {}
    for _ in range(repeat):
        for name, argv in floors.items():
            times.setdefault(name, {}).setdefault("floor", []).append(timed(argv, repo, None))
        for command in COMMANDS:
            row = times.setdefault("orchardist " + " ".join(command), {})
            for side, path in (("before", old), ("after", None)):
                argv = [sys.executable, "-m", "orchardist", *command]
                row.setdefault(side, []).append(timed(argv, repo, path))
    return times


def report(times: Times, label: str, repeat: int) -> None:
    print(f"one process each, median of {repeat}, A/B interleaved; load {_load()}")
    head = f"{label} (before)"
    print(f"{'':30} {head:>20} {'this tree':>20} {'ratio':>6}  target (wall)")
    print(f"{'':30} {'wall':>9} {'cpu':>10} {'wall':>9} {'cpu':>10}")
    for name, row in times.items():
        if "floor" in row:
            wall, cpu = _medians(row["floor"])
            print(f"{name:30} {wall:6.1f} ms {cpu:7.1f} ms")
            continue
        (wall_b, cpu_b), (wall_a, cpu_a) = _medians(row["before"]), _medians(row["after"])
        print(
            f"{name:30} {wall_b:6.1f} ms {cpu_b:7.1f} ms {wall_a:6.1f} ms {cpu_a:7.1f} ms "
            f"{wall_b / wall_a:5.1f}x  {TARGET_MS:.0f} ms ({wall_a / TARGET_MS:.2f} of it)"
        )


def _medians(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
