"""What a first scan spends after its scanner's process ends, step by step.

Usage: ``python benchmarks/scan_after.py [--files 64] [--repeat 21] [--old PATH]``

The repository and plan of ``benchmarks/scan.py`` (ruff over small modules, SARIF). Each try is
``orchardist scan --no-cache --json -o out.sarif`` in a fresh Python process, run as the command
runs it (the collector off while the modules load), with marks at the end of the scanner's
process and after each later step: its output parsed into findings (with their source), the
findings merged, the scan returned (its events written), the SARIF written, the summary
printed, the command's end. Printed, the median of ``--repeat`` tries: milliseconds since the
scanner's process ended, wall and CPU of the Python process (its threads, the scan folder's
removal's among them; not its children: the export's check is a git process). ``--old PATH``: a
checkout whose ``src`` is timed too, the tries interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan import make_repo

# One try, in its own process: the steps marked by wrapping the functions that end them.
TRY = r"""
import gc; gc.disable()
import contextlib, io, json, os, sys, time
# the steps' functions wrapped where they live, before what imports them is imported (a module
# that imports one at its top, or one that imports it where it calls it, calls the wrapper)
import orchardist.scan.findings as F, orchardist.scan.sarif as S

marks = []

def mark(label):
    marks.append((label, time.perf_counter(), time.process_time()))

def after(owner, name, label):
    inner = getattr(owner, name)
    def marked(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        finally:
            mark(label)
    setattr(owner, name, marked)

after(F, "parse_sarif", "parsed")
after(S, "merge", "merged")
after(S, "write_whole", "SARIF written")
import orchardist.scan.cli as C, orchardist.scan.engine as E, orchardist.scan.runner as R
after(R, "run_process", "scanner ended")
after(E.Scanner, "scan", "scan returned")
after(C, "_report", "summary printed")
with contextlib.redirect_stdout(io.StringIO()):
    C.plain_scan(["scan.toml", "--no-cache", "--json", "-o", "out.sarif"])
mark("command ended")
first = next(m for m in marks if m[0] == "scanner ended")
print(json.dumps({m[0]: [(m[1] - first[1]) * 1000, (m[2] - first[2]) * 1000] for m in marks}))
"""

STEPS = ("parsed", "merged", "scan returned", "SARIF written", "summary printed", "command ended")


def one_try(repo: Path, env: dict[str, str]) -> dict[str, list[float]]:
    """The marks of one scan, in ms since its scanner ended: label -> [wall, cpu]."""
    out = subprocess.run(
        [sys.executable, "-c", TRY], cwd=repo, env=env, capture_output=True, text=True
    )
    if out.returncode not in (0, 1):
        raise SystemExit(f"the scan failed ({out.returncode}): {out.stderr[-2000:]}")
    marks: dict[str, list[float]] = json.loads(out.stdout.splitlines()[-1])
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--old", type=Path, help="also time the code of this checkout's src/")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-scan-after-") as tmp:
        root = Path(tmp)
        repo = make_repo(root, args.files, 2)
        env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        sides: dict[str, str | None] = {"this tree": None}
        if args.old:
            sides = {str(args.old): str(args.old / "src"), **sides}
        times: dict[str, dict[str, list[list[float]]]] = {side: {} for side in sides}
        for _ in range(args.repeat):
            for side, path in sides.items():
                side_env = {**env, **({"PYTHONPATH": path} if path else {})}
                for label, value in one_try(repo, side_env).items():
                    times[side].setdefault(label, []).append(value)
        report(args, times)


def report(args: argparse.Namespace, times: dict[str, dict[str, list[list[float]]]]) -> None:
    print(
        f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus; files: {args.files}, "
        f"repeat: {args.repeat}"
    )
    print("ms since the scanner's process ended, median wall / CPU (the Python process)")
    print(f"{'':18}" + "".join(f"{side[-22:]:>24}" for side in times))
    for step in STEPS:
        cells = []
        for row in times.values():
            wall, cpu = (statistics.median(v[i] for v in row[step]) for i in (0, 1))
            cells.append(f"{wall:7.1f} / {cpu:5.1f}")
        print(f"{step:18}" + "".join(f"{c:>24}" for c in cells))


if __name__ == "__main__":
    main()
