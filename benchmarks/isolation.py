"""What namespaces cost per attempt: ``orchardist run`` with isolation off against namespaces.

Usage: ``python benchmarks/isolation.py [--tasks 20] [--rounds 3]``

A throwaway repository and a plan of ``--tasks`` independent tasks, run one at a time
(``max_parallel = 1``) through the real command line: each attempt's shell agent writes a file
and one verify command runs, so every attempt starts two processes (and a merge check may run
more), confined or not. Each round runs the plan once with ``isolation = "off"`` and once with
``isolation = "required"`` (bubblewrap namespaces), alternating so that load on the machine
falls on both. Printed: attempts per second of each (median round), the milliseconds added per
attempt (target: at most 50), and what one bare ``bwrap ... /bin/true`` costs over ``/bin/true``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchardist.confine import isolation
from orchardist.confine.spec import Spec, wrap

PLAN = """\
[run]
isolation = "{policy}"
max_parallel = 1

[agents.sh]
kind = "shell"
command = "echo $ORCHARDIST_TASK > $ORCHARDIST_TASK.txt"

{tasks}
"""


def make_repo(root: Path, env: dict[str, str]) -> None:
    """A repository with a README, committed."""
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    (root / "README.md").write_text("bench\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "base"], check=True, env=env)


def run_once(tmp: Path, name: str, policy: str, tasks: int, env: dict[str, str]) -> float:
    """Seconds ``orchardist run`` takes for the plan under ``policy``, in a fresh repository."""
    repo = tmp / name
    make_repo(repo, env)
    body = "\n".join(f'[[task]]\nid = "t{i}"\nverify = "test -s t{i}.txt"\n' for i in range(tasks))
    (repo / "plan.toml").write_text(PLAN.format(policy=policy, tasks=body))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "orchardist", "run", "plan.toml", "--quiet"],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"orchardist run ({policy}) failed:\n{done.stdout}{done.stderr}")
    return took


def bare_cost_ms(tmp: Path, rounds: int = 30) -> tuple[float, float]:
    """Median milliseconds of ``/bin/true`` and of it wrapped in the namespaces we use."""
    spec = Spec(writable=(tmp,), network=False)
    wrapped = wrap(["/bin/true"], spec, cwd=tmp)
    plain, confined = [], []
    for _ in range(rounds):
        for argv, into in ((["/bin/true"], plain), (wrapped, confined)):
            start = time.perf_counter()
            subprocess.run(argv, check=True)
            into.append(time.perf_counter() - start)
    return statistics.median(plain) * 1e3, statistics.median(confined) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found = isolation.probe()
    if not found.usable:
        sys.exit(f"namespaces unavailable here: {found.reason}")
    with tempfile.TemporaryDirectory(prefix="orchardist-bench-") as name:
        tmp = Path(name)
        home = tmp / "home"
        home.mkdir()
        env = {
            **os.environ,
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "bench",
            "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "bench@example.com",
            "ORCHARDIST_WORKDIR_ROOT": str(tmp / "workdirs"),
        }
        off, ns = [], []
        for i in range(args.rounds):
            off.append(run_once(tmp, f"off{i}", "off", args.tasks, env))
            ns.append(run_once(tmp, f"ns{i}", "required", args.tasks, env))
        plain_ms, confined_ms = bare_cost_ms(tmp)
    off_s, ns_s = statistics.median(off), statistics.median(ns)
    added_ms = (ns_s - off_s) / args.tasks * 1e3
    print(f"{found.version}; tasks: {args.tasks} (one at a time), rounds: {args.rounds}")
    print(f"isolation off:        {args.tasks / off_s:6.2f} attempts/s ({off_s:.2f} s per run)")
    print(f"namespaces (bwrap):   {args.tasks / ns_s:6.2f} attempts/s ({ns_s:.2f} s per run)")
    print(f"added per attempt:    {added_ms:6.1f} ms (target <= 50 ms)")
    print(f"ratio namespaces / off: {ns_s / off_s:.2f}")
    print(f"one bare process:     /bin/true {plain_ms:.1f} ms, in bwrap {confined_ms:.1f} ms")


if __name__ == "__main__":
    main()
