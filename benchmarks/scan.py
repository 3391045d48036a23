"""What orchardist's scan costs over running a scanner directly, cold and warm.

Usage: ``python benchmarks/scan.py [--files 1000] [--max-parallel N] [--repeat 3]``

A throwaway repository holds ``--files`` small Python modules (about 30 lines each, a few lint
findings in each). The scanner is ruff (``python -m ruff``), file-scoped, through SARIF.

Printed, each the median of ``--repeat`` tries:

- ``direct``: ruff run once over all the files, SARIF to stdout (the baseline);
- ``cold``: ``orchardist scan --no-cache`` (export, batches in parallel, parse, merge, SARIF);
- ``warm``: ``orchardist scan`` after a one-file change, with the cache filled before: only
  the changed file is scanned;
- the ratios cold ÷ direct and warm ÷ direct, and that every scan found what ruff found.
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-scan-bench-") as tmp:
        root = Path(tmp)
        repo = make_repo(root, args.files, args.max_parallel)
        env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
        scan = [sys.executable, "-m", "orchardist", "scan", "scan.toml", "--json"]
        direct_argv = [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--exit-zero",
            "--output-format",
            "sarif",
            ".",
        ]
        direct, cold, warm = [], [], []
        cpu: dict[str, list[float]] = {"direct": [], "cold": [], "warm": []}
        expected = found_cold = found_warm = 0
        for attempt in range(args.repeat):
            seconds, used, out = timed(direct_argv, repo, env)
            direct.append(seconds)
            cpu["direct"].append(used)
            expected = len(json.loads(out)["runs"][0]["results"])
            seconds, used, out = timed([*scan, "--no-cache"], repo, env)
            cold.append(seconds)
            cpu["cold"].append(used)
            found_cold = json.loads(out)["findings"]
            timed(scan, repo, env)  # fill the cache
            changed = repo / "pkg" / "sub0" / "mod0.py"
            changed.write_text(changed.read_text() + f"\n\nVALUE_{attempt} = {attempt}\n")
            git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qam", "edit")
            seconds, used, out = timed(scan, repo, env)
            warm.append(seconds)
            cpu["warm"].append(used)
            summary = json.loads(out)
            found_warm = summary["findings"]
            assert summary["scanners"][0]["misses"] == 1, summary["scanners"]
        d, c, w = (statistics.median(x) for x in (direct, cold, warm))
        dc, cc, wc = (statistics.median(cpu[k]) for k in ("direct", "cold", "warm"))
        load = os.getloadavg()[0]
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cpus, load {load:.1f}; "
            f"python {platform.python_version()}"
        )
        print(f"files: {args.files}, max_parallel: {args.max_parallel}, repeat: {args.repeat}")
        print("                                     wall s   cpu s")
        print(f"direct ruff, once over all files:   {d:7.3f} {dc:7.3f}  ({expected} findings)")
        print(f"orchardist scan, cold (--no-cache): {c:7.3f} {cc:7.3f}  ({found_cold} findings)")
        print(f"orchardist scan, warm, 1 changed:   {w:7.3f} {wc:7.3f}  ({found_warm} findings)")
        print(f"ratio cold / direct: wall {c / d:.2f}, cpu {cc / dc:.2f}")
        print(f"ratio warm / direct: wall {w / d:.2f}, cpu {wc / dc:.2f}")
        print(f"same findings as ruff: {found_cold == expected == found_warm}")


if __name__ == "__main__":
    main()
