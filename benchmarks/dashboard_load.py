"""Does watching a run slow it down? A run of N trivial tasks through the real CLI, once alone
and once with C dashboard clients following its event stream (server-sent events); prints both
makespans and their ratio.

    python benchmarks/dashboard_load.py [--tasks 500] [--clients 20] [--parallel 4]

With ``--pages``, the dashboard's fixed costs instead: ``/api/runs`` over 50 runs and the page
of a 500-task run, served over HTTP on 127.0.0.1 by this checkout and by an older one (``git
archive`` of ``--old-ref``, default ``main``) from the same store, requests interleaved A/B;
prints the medians, their ratio and each against its target (10 ms and 30 ms).

    python benchmarks/dashboard_load.py --pages [--old-ref main] [--requests 40]

With ``--cpu``, the same requests' work in-process (each tree in a process of its own), as CPU
milliseconds: what the machine's load does not blur.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
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


PAGE_TARGETS_MS = {
    "/api/runs (50 runs)": 10.0,
    "500-task run, store unchanged": 30.0,
    "500-task run, store written": 30.0,  # another run written between views
    "500-task run, its run written": 30.0,  # a live run's page: a task moved between views
}


def fill_store(root: Path, runs: int, big_tasks: int) -> str:
    """A repository whose store holds ``runs`` finished runs of 10 tasks and one run of
    ``big_tasks`` tasks (an attempt and four events each), with its plan on disk; its id."""
    from orchardist.state.eventlog import Event
    from orchardist.state.records import (
        AttemptRecord,
        AttemptState,
        Run,
        RunState,
        TaskRecord,
        TaskState,
    )
    from orchardist.state.store import Store
    from orchardist.state.usage import Usage

    plan = make_repo(root, big_tasks, 4)
    store = Store.for_repo(root / ".git")
    sizes = [10] * (runs - 1) + [big_tasks]
    for r, size in enumerate(sizes):
        run_id = f"run{r:03d}"
        with store.transaction() as tx:
            tx.add_run(
                Run(run_id, str(plan), "d", str(root), "0" * 40, f"b/{r}", RunState.DONE, r, r + 1)
            )
            for i in range(size):
                task = f"t{i:05d}"
                tx.add_task(TaskRecord(run_id, task, TaskState.DONE, i, "1" * 40))
                tx.add_attempt(
                    AttemptRecord(
                        run_id,
                        task,
                        1,
                        0,
                        "edit",
                        AttemptState.MERGED,
                        "0" * 40,
                        r,
                        r + 0.5,
                        0,
                        patch_commit="1" * 40,
                        usage=Usage(cost_usd=0.01),
                        verdict="verified",
                    )
                )
                for state in ("running", "verifying", "merging", "merged"):
                    tx.emit(Event(run_id, "attempt", r, task, 1, {"state": state}))
    store.close()
    return f"run{len(sizes) - 1:03d}"


@contextlib.contextmanager
def server(repo: Path, pythonpath: str | None) -> Iterator[tuple[httpx.Client, int]]:
    """``orchardist serve`` of ``repo`` (from ``pythonpath``'s code when given): a client of
    it, and its pid."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchardist", "serve", "--port", "0", "-C", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    url = next(line.split()[1] for line in proc.stdout if line.startswith("open "))
    base, _, token = url.partition("/?token=")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            yield client, proc.pid
    finally:
        proc.terminate()
        proc.wait()


def cpu_s(pid: int) -> float:
    """The CPU seconds process ``pid`` has used (user and system, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_ms(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    client.get(path).raise_for_status()
    return (time.perf_counter() - started) * 1000


def old_source(ref: str, into: Path) -> str:
    """This repository's ``src`` at ``ref``, unpacked into ``into``; the folder to import."""
    here = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(here), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return str(into / "src")


def pages(old_ref: str, requests: int) -> None:
    """Median request times of both code paths, A/B interleaved on one store."""
    from orchardist.state.eventlog import Event
    from orchardist.state.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        big = fill_store(repo, 50, 500)
        old = old_source(old_ref, Path(tmp) / "old")
        paths = dict(zip(PAGE_TARGETS_MS, ["/api/runs", *[f"/api/runs/{big}"] * 3], strict=True))
        times: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], float] = {}  # the server's CPU seconds, all requests
        writes = 0
        writer = Store.for_repo(repo / ".git")
        with server(repo, old) as before, server(repo, None) as after:
            for _ in range(requests + 3):  # the first three of each warm up, not counted
                for name, path in paths.items():
                    for label, (client, pid) in (("before", before), ("after", after)):
                        if name.endswith("store written"):  # as another live run does
                            with writer.transaction() as tx:
                                tx.emit(Event("run000", "note", 0.0, None, None, {}))
                        if name.endswith("its run written"):  # as the run itself does
                            writes += 1
                            with writer.transaction() as tx:
                                tx.set_task(big, f"t{writes % 500:05d}", reason=f"{writes}")
                                tx.emit(Event(big, "note", 0.0, None, None, {}))
                        if name.endswith("unchanged"):  # (the round before wrote)
                            client.get(path).raise_for_status()
                        used = cpu_s(pid)
                        times.setdefault((name, label), []).append(timed_ms(client, path))
                        cpu[(name, label)] = cpu.get((name, label), 0.0) + cpu_s(pid) - used
        writer.close()
    print(f"dashboard requests over HTTP on 127.0.0.1, median of {requests}, A/B interleaved")
    print("(server CPU: the server process's, per request, averaged over all of them)")
    print(f"{'':32} {old_ref + ' (before)':>14} {'this tree':>10} {'ratio':>6}  target  server CPU")
    for name, target in PAGE_TARGETS_MS.items():
        a = statistics.median(times[(name, "before")][3:])
        b = statistics.median(times[(name, "after")][3:])
        ca, cb = (cpu[(name, label)] * 1000 / (requests + 3) for label in ("before", "after"))
        print(
            f"{name:32} {a:11.1f} ms {b:7.1f} ms {a / b:5.1f}x  "
            f"{target:2.0f} ms ({b / target:.2f} of it)  {ca:.1f} → {cb:.1f} ms"
        )


def cpu_child(repo: Path, big: str, requests: int) -> None:
    """In this process (whichever orchardist PYTHONPATH names): the CPU milliseconds of each
    request's work, JSON encoding included, medians printed as JSON."""
    import json

    from orchardist.state.eventlog import Event
    from orchardist.state.store import Store
    from orchardist.web.reads import Reads, Settings

    reads = Reads(Settings(repo, repo / ".git" / "orchardist" / "state.db", "t", frozenset()))
    writer = Store.for_repo(repo / ".git")

    def page() -> bytes:
        run = reads.run(big)
        assert run is not None
        if hasattr(reads, "run_page"):
            return bytes(reads.run_page(run))
        return json.dumps(reads.run_doc(run), separators=(",", ":")).encode()

    times: dict[str, list[float]] = {}
    for k in range(requests + 3):
        for name in PAGE_TARGETS_MS:
            if name.endswith("store written"):
                with writer.transaction() as tx:
                    tx.emit(Event("run000", "note", 0.0, None, None, {}))
            if name.endswith("its run written"):
                with writer.transaction() as tx:
                    tx.set_task(big, f"t{k % 500:05d}", reason=f"cpu {k}")
                    tx.emit(Event(big, "note", 0.0, None, None, {}))
            started = time.process_time()
            if name.startswith("/api/runs"):
                json.dumps(reads.runs(), separators=(",", ":"))
            else:
                page()
            times.setdefault(name, []).append((time.process_time() - started) * 1000)
    print(json.dumps({name: statistics.median(t[3:]) for name, t in times.items()}))


def cpu(old_ref: str, requests: int) -> None:
    """In-process CPU time of both code paths on one store, each in its own process."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        big = fill_store(repo, 50, 500)
        old = old_source(old_ref, Path(tmp) / "old")
        found = {}
        for label, path in (("before", old), ("after", None)):
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path
            argv = [sys.executable, __file__, "--cpu-child", str(repo), big, str(requests)]
            out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
            found[label] = json.loads(out.stdout)
    print(f"dashboard requests in-process, CPU ms, median of {requests}")
    print(f"{'':32} {old_ref + ' (before)':>14} {'this tree':>10} {'ratio':>6}")
    for name in PAGE_TARGETS_MS:
        a, b = found["before"][name], found["after"][name]
        print(f"{name:32} {a:11.2f} ms {b:7.2f} ms {a / b:5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--pages", action="store_true", help="the pages' fixed costs")
    parser.add_argument("--old-ref", default="main", help="the code to compare --pages with")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--cpu", action="store_true", help="--pages' work in-process, CPU time")
    parser.add_argument("--cpu-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_child:
        cpu_child(Path(args.cpu_child[0]), args.cpu_child[1], int(args.cpu_child[2]))
        return
    if args.cpu:
        cpu(args.old_ref, args.requests)
        return
    if args.pages:
        pages(args.old_ref, args.requests)
        return
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
