"""The merge queue's throughput: ``orchardist run`` beside a parallel floor, in the same repository.

Usage::

    python benchmarks/merge_train.py [--tasks 16,64] [--verify-s 3] [--slots 4]
                                     [--failing] [--old-src /work/main/src] [--rounds 1]

For each number of tasks: a throwaway repository and a plan of that many independent shell agents,
each adding a file of its own (``t/<task>.txt``); every task's verify command sleeps
``--verify-s`` seconds (a test suite that waits, not one that needs the CPU: 2 cores must not be
what is measured) and then checks the tree. ``--slots``: ``--max-parallel``.

``--failing``: two of the tasks (``pa``, ``pb``) write a file whose first version breaks the other
(each alone passes; together they fail verify): the one merged second fails its merge
verification, is attributed, run again on the new tip (where its agent writes the second
version), and lands; a task depending on each (``da``, ``db``) lands after it.

The floor: ``--slots`` workers, each task done once, as the run does it minus orchestration:
``git worktree add`` at the floor branch's tip, write the file, commit, run the verify command
there once, ``merge-tree`` onto the (moved) tip + ``commit-tree`` + ``update-ref``
(compare-and-swap, redone when another worker moved the tip; not verified again). With
``--failing`` it does the least a queue that never lands a failing tree must: a task starts
once its dependencies landed, and the pair's second is done again from the new tip (worktree,
agent, verify, merge) when its mate landed since its base: a floor that verifies nothing twice
would never see the pair fail, and land it (before 2026-12-05 it did, and ignored the
dependencies: 1.96x "the floor" was partly the floor's shortcut).

``--reverify overlap``: the plan opts in to landing disjoint patches unverified (an orchardist
without the setting rejects the plan).

``--old-src DIR``: the same run with another orchardist (``PYTHONPATH=DIR``), A/B interleaved
(floor, new, old, per round). Printed per run: wall seconds, its ratio to the floor of the same
round, verify runs per task (attempts' verifies, an attempt verified again on its base after
failing on the run's head counted twice, + merge verifications, from the run's logs),
fresh baseline runs, and whether every task landed.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
AGENT = 'mkdir -p t && echo {task} > "t/{task}.txt"'
# pa and pb: version 1 while the other's file is absent, version 2 once it landed
PAIR = 'mkdir -p t; if [ -e t/{other}.txt ]; then echo v2; else echo v1; fi > "t/{task}.txt"'
# fails only when both files of the pair hold version 1
CHECK = "! (grep -qs v1 t/pa.txt && grep -qs v1 t/pb.txt)"


def git(*args: str, cwd: Path, tries: int = 1) -> str:
    """Run git; its stdout (``tries``: worktree add/remove race with other workers')."""
    for attempt in range(tries):
        out = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
        if attempt + 1 == tries:
            raise SystemExit(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return ""


def make_repo(root: Path) -> Path:
    """A small committed repository."""
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(root), cwd=root)
    for i in range(20):
        (root / f"mod{i}.py").write_text(f"# module {i}\n")
    (root / ".gitignore").write_text("/plan.toml\n/plan.log\n")
    git("add", "-A", cwd=root)
    git("commit", "-qm", "base", cwd=root)
    return root


def tasks(n: int, failing: bool) -> list[tuple[str, str, list[str]]]:
    """(id, agent command, dependencies) of each task: ``n`` in all."""
    if not failing:
        return [(f"t{i:03d}", AGENT.format(task=f"t{i:03d}"), []) for i in range(n)]
    special = [
        ("pa", PAIR.format(task="pa", other="pb"), []),
        ("pb", PAIR.format(task="pb", other="pa"), []),
        ("da", AGENT.format(task="da"), ["pa"]),
        ("db", AGENT.format(task="db"), ["pb"]),
    ]
    plain = [(f"t{i:03d}", AGENT.format(task=f"t{i:03d}"), []) for i in range(n - 4)]
    return special[:2] + plain + special[2:]


def write_plan(
    repo: Path, todo: list[tuple[str, str, list[str]]], verify_s: float, reverify: str | None
) -> Path:
    """The plan: shell agents, one verify command for all."""
    verify = f"sleep {verify_s}; {CHECK}"
    lines = ["[run]", f"verify = {json.dumps(verify)}"]
    lines += [f"reverify = {json.dumps(reverify)}"] if reverify else []
    for task, command, _ in todo:
        lines += ["", f"[agents.{task}]", 'kind = "shell"', f"command = {json.dumps(command)}"]
    for task, _, deps in todo:
        lines += ["", "[[task]]", f'id = "{task}"', f'agent = "{task}"', 'prompt = "add a file"']
        if deps:
            lines.append(f"depends_on = {json.dumps(deps)}")
    plan = repo / "plan.toml"
    plan.write_text("\n".join(lines) + "\n")
    return plan


def run_orchardist(plan: Path, slots: int, workroot: Path, src: str | None) -> tuple[float, str]:
    """Wall seconds of ``orchardist run`` and its output (``src``: another orchardist's code)."""
    env = {**GIT_ENV, "ORCHARDIST_WORKDIR_ROOT": str(workroot)}
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "orchardist", "-q", "run", str(plan)]
    cmd += ["--max-parallel", str(slots), "--fresh"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=plan.parent, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"orchardist exited {done.returncode}:\n{text[-3000:]}")
    return wall, text


def counts(repo: Path, n: int) -> tuple[int, int, int, int]:
    """Attempts, merge verifications, baseline runs (of all runs so far), tasks done: from the
    latest run's logs and store."""
    state = repo / ".git" / "orchardist"
    (db,) = state.glob("*.db")
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs order by created_at desc").fetchone()
        (done,) = conn.execute(
            "select count(*) from tasks where run_id = ? and state = 'done'", (run_id,)
        ).fetchone()
    logs = state / "logs" / run_id
    merges = len(list(logs.glob("*.merge*.log")))
    attempt_logs = [p for p in logs.glob("*.log") if ".merge" not in p.name]
    # an attempt that failed on the head is verified again (its base, or the head), same log
    again = sum(p.read_text().count(": verified again on") for p in attempt_logs)
    attempts = len(attempt_logs) + again
    baselines = len(list((state / "logs" / "baselines").glob("*.log")))
    return attempts, merges, baselines, done


def floor(
    repo: Path, todo: list[tuple[str, str, list[str]]], slots: int, verify_s: float, scratch: Path
) -> float:
    """Wall seconds of the tasks done once each, ``slots`` at a time, on a branch of its own; a
    task starts once its dependencies landed, and the pair's second (see the module docstring)
    is done again from the new tip, as a queue that finds its merged tree failing must."""
    ref = "refs/heads/floor"
    git("update-ref", ref, git("rev-parse", "HEAD", cwd=repo), cwd=repo)
    scratch.mkdir(parents=True, exist_ok=True)
    verify = f"sleep {verify_s}; {CHECK}"
    landed = {task: threading.Event() for task, _, _ in todo}
    mate = {"pa": "pb", "pb": "pa"}
    pair = threading.Lock()

    def attempt(task: str, command: str, tree: Path) -> tuple[str, str]:
        """The task's patch on the tip (its base) and that base, verified once."""
        tip = git("rev-parse", ref, cwd=repo)
        git("worktree", "add", "-q", "--detach", str(tree), tip, cwd=repo, tries=10)
        subprocess.run(["sh", "-c", command], cwd=tree, check=True)
        git("add", "-A", cwd=tree)
        patch = git("commit-tree", git("write-tree", cwd=tree), "-p", tip, "-m", task, cwd=tree)
        subprocess.run(["sh", "-c", verify], cwd=tree, check=True)
        git("worktree", "remove", "--force", str(tree), cwd=repo, tries=10)
        return tip, patch

    def one(item: tuple[str, str, list[str]]) -> None:
        task, command, deps = item
        for dep in deps:
            landed[dep].wait()
        tree = scratch / task
        tip, patch = attempt(task, command, tree)
        while True:  # merge onto the tip as it is now; redo if another worker moved it
            if task in mate:  # the pair's landing and its check, one at a time
                pair.acquire()
            now = git("rev-parse", ref, cwd=repo)
            other = mate.get(task)
            listed = "" if other is None else git("ls-tree", "--name-only", tip, "t/", cwd=repo)
            if other is not None and landed[other].is_set() and f"t/{other}.txt" not in listed:
                # its mate landed since its base: the merged tree fails; done again
                pair.release()
                tip, patch = attempt(task, command, tree)
                continue
            merged = git("merge-tree", "--write-tree", now, patch, cwd=repo).split()[0]
            commit = git("commit-tree", merged, "-p", now, "-m", task, cwd=repo)
            moved = subprocess.run(
                ["git", "update-ref", ref, commit, now], cwd=repo, env=GIT_ENV, capture_output=True
            )
            if moved.returncode == 0:
                break
            if task in mate:
                pair.release()
        landed[task].set()
        if task in mate:
            pair.release()

    start = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        list(pool.map(one, todo))
    return time.perf_counter() - start


def bench(args: argparse.Namespace, n: int, round_: int, tmp: Path) -> None:
    """One round for ``n`` tasks: the floor, then each orchardist, in one repository."""
    folder = tmp / f"{n}-{round_}"
    repo = make_repo(folder / "repo")
    todo = tasks(n, args.failing)
    plan = write_plan(repo, todo, args.verify_s, args.reverify)
    floor_s = floor(repo, todo, args.slots, args.verify_s, folder / "f")
    bound = n * args.verify_s / args.slots
    print(f"{n:>4} tasks  floor {floor_s:6.1f} s  (bound {bound:.1f} s)", flush=True)
    sides = [("new", None)] + ([("old", args.old_src)] if args.old_src else [])
    baselines_before = 0
    for label, src in sides:
        wall, text = run_orchardist(plan, args.slots, folder / f"work-{label}", src)
        attempts, merges, baselines_after, done = counts(repo, n)
        baselines, baselines_before = baselines_after - baselines_before, baselines_after
        print(
            f"{'':>4}        {label:<5} {wall:6.1f} s  {wall / floor_s:5.2f}x floor"
            f"  {(attempts + merges) / n:4.2f} verify runs/task ({attempts} attempts,"
            f" {merges} merge verifications)  {baselines} baselines run  {done}/{n} done",
            flush=True,
        )
        if done != n:
            print(text[-2000:], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="16", help="comma-separated task counts")
    parser.add_argument("--verify-s", type=float, default=3.0)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--failing", action="store_true", help="a pair whose merge fails")
    parser.add_argument("--old-src", help="another orchardist's src folder, run A/B")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--reverify", choices=("always", "overlap"), help="[run] reverify")
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-mergetrain-") as tmp:
        for round_ in range(args.rounds):
            for n in (int(x) for x in args.tasks.split(",")):
                bench(args, n, round_, args.keep or Path(tmp))


if __name__ == "__main__":
    main()
