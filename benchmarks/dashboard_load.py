"""Does watching a run slow it down? A run of N trivial tasks through the real CLI, once alone
and once with C dashboard clients following its event stream (server-sent events); prints both
makespans and their ratio.

    python benchmarks/dashboard_load.py [--tasks 500] [--clients 20] [--parallel 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

PLAN_HEAD = """\
[run]
verify = "none"
max_parallel = {parallel}

[agents.edit]
kind = "shell"
command = "echo {{task}} > {{task}}.txt"
"""


def make_repo(root: Path, tasks: int, parallel: int) -> Path:
    root.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "README.md").write_text("bench\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "init"], check=True, env=env)
    body = [PLAN_HEAD.format(parallel=parallel)]
    body += [f'[[task]]\nid = "t{i:05d}"\nagent = "edit"\n' for i in range(tasks)]
    (root / "plan.toml").write_text("\n".join(body))
    return root / "plan.toml"


def run_alone(plan: Path) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "orchardist", "run", str(plan), "--fresh", "-q"],
        check=True,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    return time.monotonic() - started


def follow(base: str, token: str, run_id: str, counts: list[int], done: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    seen = 0
    url = f"/api/runs/{run_id}/events"
    with (
        httpx.Client(base_url=base, headers=headers, timeout=None) as client,
        client.stream("GET", url) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen += 1
                if '"kind": "run"' in line and ('"done"' in line or '"failed"' in line):
                    break
            if done.is_set():
                break
    counts.append(seen)


def run_watched(plan: Path, clients: int) -> tuple[float, list[int]]:
    repo = plan.parent
    server = subprocess.Popen(
        [sys.executable, "-m", "orchardist", "serve", "--port", "0", "-C", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    url = next(line.split()[1] for line in server.stdout if line.startswith("open "))
    base, _, token = url.partition("/?token=")
    started = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-m", "orchardist", "run", str(plan), "--fresh", "-q"],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        known = {r["run"] for r in client.get("/api/runs").json()}
        while True:  # the new run's id, as soon as the store has it
            ids = [r["run"] for r in client.get("/api/runs").json() if r["run"] not in known]
            if ids:
                break
            time.sleep(0.05)
    counts: list[int] = []
    done = threading.Event()
    threads = [
        threading.Thread(target=follow, args=(base, token, ids[0], counts, done))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    run.wait()
    elapsed = time.monotonic() - started
    done.set()
    for t in threads:
        t.join(timeout=60)
    server.terminate()
    server.wait()
    return elapsed, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ORCHARDIST_WORKDIR_ROOT", str(Path(tmp) / "work"))
        alone = run_alone(make_repo(Path(tmp) / "a", args.tasks, args.parallel))
        watched, counts = run_watched(
            make_repo(Path(tmp) / "b", args.tasks, args.parallel), args.clients
        )
    print(f"{args.tasks} tasks, max_parallel {args.parallel}")
    print(f"makespan alone:                 {alone:7.1f} s")
    print(f"makespan with {args.clients} SSE clients:    {watched:7.1f} s")
    least, most = (min(counts), max(counts)) if counts else (0, 0)
    print(f"events per client:              {least}..{most}")
    print(f"ratio watched/alone:            {watched / alone:7.2f}")


if __name__ == "__main__":
    main()
