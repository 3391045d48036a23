"""Per-task cost of ``orchardist run`` end to end, beside the raw git floor in the same repository.

Usage::

    python benchmarks/e2e.py [--tasks 100] [--shapes layered,independent] [--workers 4]
                             [--profile FILE] [--large [--large-files 30000]] [--no-floor]

For each (shape, tasks, workers): a throwaway repository (``--files`` committed files), a plan of
``tasks`` shell agents that each add a one-line file (``g<k>/<task>.txt``, 100 files per folder),
``verify = "none"``, default sandbox and checkout guard, run through the real CLI
(``python -m orchardist run``: real attempt folders, snapshots and merges). ``layered``: tasks in
layers of 20, each depending on two tasks of the layer before; ``independent``: no dependencies.

Then the raw git floor in the same repository, on a branch of its own: the same number of tasks,
as many at once as the run's workers, each doing what one task needs and no more — ``git worktree
add`` at the floor branch's tip, write the file, ``add`` + ``write-tree`` + ``commit-tree``,
``merge-tree`` onto the (moved) tip + ``commit-tree``, ``update-ref`` (compare-and-swap, redone
when another worker moved the tip), ``git worktree remove``.

Printed: wall ms per task of each, their ratio, the orchestrator's peak RSS (``wait4``: the
largest of the process and the children it waited for; git and shell children are a few MB),
and its user and system CPU. ``--profile FILE`` runs the orchestrator under cProfile and writes
the stats (not for timing: cProfile slows Python down); ``--py-spy FILE`` samples every thread
with py-spy (``pip install py-spy``) into a raw flame-graph file.

``--large``: attempt setup on a generated repository of ``--large-files`` files against one of
100 files (``Layout.create`` as the executor calls it, then a one-line edit, then removal):
median setup ms, ratio large ÷ small, and the disk used by one attempt folder after its edit
(``du``-style: allocated blocks of files not hard links seen before). Done with the current
setup and with a full ``read-tree -u`` checkout (``ORCHARDIST_FULL_CHECKOUT``-style: the
``full_checkout`` flag of ``Layout``) when the layout offers the choice.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchardist.gitrepo import Repo
from orchardist.worktree import Layout

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
LAYER = 20
PER_FOLDER = 100
AGENT = 'f={task}; d=${{f%%-*}}; mkdir -p "$d" && echo "$f" > "$d/$f.txt"'


def git(*args: str, cwd: Path | None = None, tries: int = 1) -> str:
    """Run git; its stdout. ``tries``: for worktree add/remove, which fail now and then when
    other workers add or remove theirs at the same moment (git's own locking)."""
    for attempt in range(tries):
        out = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
        if attempt + 1 == tries:
            raise SystemExit(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return ""


def make_repo(root: Path, files: int) -> Path:
    """A repository with ``files`` files of a few hundred bytes, 20 per folder, committed."""
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(root))
    for i in range(files):
        path = root / f"pkg{i // 20}" / f"mod{i}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# module {i}\n" + "x = 1\n" * 40)
    (root / ".gitignore").write_text("/plan.toml\n")
    git("add", "-A", cwd=root)
    git("commit", "-qm", "base", cwd=root)
    return root


def task_ids(n: int) -> list[str]:
    """Task ids whose prefix names their folder: ``g3-t00342`` writes ``g3/g3-t00342.txt``."""
    return [f"g{i // PER_FOLDER}-t{i:05d}" for i in range(n)]


def write_plan(repo: Path, n: int, shape: str) -> Path:
    """The plan: ``n`` shell agents adding a one-line file each, ``verify = "none"``."""
    ids = task_ids(n)
    lines = ['[run]\nverify = "none"\n', "[agents.edit]", 'kind = "shell"', f"command = '{AGENT}'"]
    for i, task in enumerate(ids):
        lines += ["", "[[task]]", f'id = "{task}"', 'agent = "edit"', 'prompt = "add a line"']
        if shape == "layered" and i >= LAYER:
            layer_start = (i // LAYER - 1) * LAYER
            deps = {ids[layer_start + i % LAYER], ids[layer_start + (i + 1) % LAYER]}
            lines.append(f"depends_on = {sorted(deps)!r}".replace("'", '"'))
    plan = repo / "plan.toml"
    plan.write_text("\n".join(lines) + "\n")
    return plan


def run_orchardist(
    plan: Path, workers: int, workroot: Path, profile: Path | None, spy: Path | None = None
) -> tuple[float, int, float, float, str]:
    """Wall seconds, peak RSS (KiB), user and system CPU seconds, and the output's tail."""
    cmd = [sys.executable]
    if spy is not None:  # py-spy samples every thread (cProfile sees the main one only)
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "-r", "50", "-t", "-f"]
        cmd += ["raw", "-o", str(spy), "--", sys.executable]
    if profile is not None:
        cmd += ["-m", "cProfile", "-o", str(profile)]
        cmd += [str(Path(__file__).resolve().parents[1] / "src/orchardist/__main__.py")]
    else:
        cmd += ["-m", "orchardist"]
    cmd += ["-q", "run", str(plan), "--max-parallel", str(workers), "--fresh"]
    env = {**GIT_ENV, "ORCHARDIST_WORKDIR_ROOT": str(workroot)}
    log = plan.with_suffix(".log")
    start = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=plan.parent, env=env, stdout=out, stderr=out)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"orchardist exited {proc.returncode}:\n{text[-3000:]}")
    return wall, usage.ru_maxrss, usage.ru_utime, usage.ru_stime, text


def floor(repo: Path, ids: list[str], workers: int, scratch: Path) -> float:
    """Wall seconds of the raw git work of ``ids`` tasks, ``workers`` at a time."""
    base = git("rev-parse", "HEAD", cwd=repo)
    ref = "refs/heads/floor"
    git("update-ref", ref, base, cwd=repo)
    scratch.mkdir(parents=True, exist_ok=True)

    def one(task: str) -> None:
        tree = scratch / task
        tip = git("rev-parse", ref, cwd=repo)
        git("worktree", "add", "-q", "--detach", str(tree), tip, cwd=repo, tries=3)
        folder = tree / task.split("-")[0]
        folder.mkdir(exist_ok=True)
        (folder / f"{task}.txt").write_text(f"{task}\n")
        git("add", "-A", cwd=tree)
        patch = git("commit-tree", git("write-tree", cwd=tree), "-p", tip, "-m", task, cwd=tree)
        while True:  # merge onto the tip as it is now; redo if another worker moved it
            now = git("rev-parse", ref, cwd=repo)
            merged = git("merge-tree", "--write-tree", now, patch, cwd=repo).split()[0]
            commit = git("commit-tree", merged, "-p", now, "-p", patch, "-m", task, cwd=repo)
            moved = subprocess.run(
                ["git", "update-ref", ref, commit, now], cwd=repo, env=GIT_ENV, capture_output=True
            )
            if moved.returncode == 0:
                break
        git("worktree", "remove", "--force", str(tree), cwd=repo, tries=3)

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, ids))
    return time.perf_counter() - start


def bench_run(args: argparse.Namespace, shape: str, n: int, workers: int, tmp: Path) -> None:
    """One row: orchardist and the floor, same repository, same run of the script."""
    folder = tmp / f"{shape}-{n}-{workers}"
    repo = make_repo(folder / "repo", args.files)
    plan = write_plan(repo, n, shape)
    profile = args.profile and Path(f"{args.profile}.{shape}-{n}-{workers}")
    spy = args.py_spy and Path(f"{args.py_spy}.{shape}-{n}-{workers}")
    wall, rss_kib, user, system, text = run_orchardist(plan, workers, folder / "work", profile, spy)
    done = text.count("\n")
    orch_ms = wall / n * 1e3
    row = f"{shape:<12} {n:>6} {workers:>3}   {orch_ms:8.1f}"
    print(f"  (orchardist: {orch_ms:.1f} ms/task, {rss_kib / 1024:.0f} MB)", flush=True)
    if args.no_floor:
        floor_ms = float("nan")
    else:
        floor_ms = floor(repo, task_ids(n), workers, folder / "floor") / n * 1e3
    print(
        f"{row} {floor_ms:9.1f} {orch_ms / floor_ms:6.2f}x {rss_kib / 1024:8.0f} MB"
        f" {user:8.1f} {system:7.1f}   ({done} output lines)",
        flush=True,
    )
    with contextlib.suppress(OSError):
        subprocess.run(["rm", "-rf", str(folder)], check=False)


# -- attempt setup on a large repository ----------------------------------------------------------


def disk_kib(root: Path) -> int:
    """Allocated KiB under ``root``, each inode counted once (``du`` semantics)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total // 1024


@contextlib.contextmanager
def layout_for(repo: Path, tmp: Path, full: bool) -> Iterator[Layout]:
    """A Layout of ``repo``; ``full`` asks for a full checkout where the layout can choose."""
    kwargs = {}
    if "full_checkout" in inspect.signature(Layout).parameters:
        kwargs["full_checkout"] = full
    elif not full:
        raise LookupError("this Layout has one setup only")
    yield Layout(Repo(repo), tmp / "workdirs", tmp / "state", **kwargs)


def setup_cost(repo: Path, tmp: Path, rounds: int, full: bool) -> tuple[float, int]:
    """Median ms of ``Layout.create`` and the largest KiB one attempt folder held after an edit."""
    head = git("rev-parse", "HEAD", cwd=repo)
    times, disk = [], 0
    with layout_for(repo, tmp, full) as layout:
        for i in range(rounds):
            paths = layout.attempt("bench", f"t.{i}")
            start = time.perf_counter()
            layout.create(paths, head, "bench")
            times.append(time.perf_counter() - start)
            (paths.tree / "pkg0" / "mod0.py").write_text("# edited\n")
            disk = max(disk, disk_kib(paths.root))
            layout.remove(paths)
    return statistics.median(times) * 1e3, disk


def bench_large(args: argparse.Namespace, tmp: Path) -> None:
    """Attempt setup on ``--large-files`` against 100 files, each way the layout offers."""
    small = make_repo(tmp / "small", 100)
    large = make_repo(tmp / "large", args.large_files)
    print(f"\nattempt setup ({args.rounds} rounds; median ms; KiB of one attempt after an edit)")
    print(f"{'setup':<26} {'100 files':>12} {args.large_files:>7} files {'ratio':>7} {'disk':>10}")
    for label, full in (("current", False), ("full checkout", True)):
        try:
            small_ms, _ = setup_cost(small, tmp / "s", args.rounds, full)
            large_ms, disk = setup_cost(large, tmp / "l", args.rounds, full)
        except LookupError:
            continue
        print(
            f"{label:<26} {small_ms:9.1f} ms {large_ms:10.1f} ms {large_ms / small_ms:6.2f}x"
            f" {disk:7d} KiB",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="100", help="comma-separated task counts")
    parser.add_argument("--shapes", default="layered,independent")
    parser.add_argument("--workers", default="4", help="comma-separated, e.g. 2,4,8")
    parser.add_argument("--files", type=int, default=100, help="files in the base repository")
    parser.add_argument("--profile", help="cProfile the orchestrator; stats to FILE.<row>")
    parser.add_argument("--py-spy", help="sample the orchestrator with py-spy; raw to FILE.<row>")
    parser.add_argument("--no-floor", action="store_true", help="skip the raw git floor")
    parser.add_argument("--large", action="store_true", help="also the large-repository case")
    parser.add_argument("--large-only", action="store_true", help="only the large case")
    parser.add_argument("--large-files", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=10, help="attempts per setup measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-e2e-") as name:
        tmp = Path(name)
        if not args.large_only:
            print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; base: {args.files} files")
            print(
                f"{'shape':<12} {'tasks':>6} {'wk':>3}   {'orch ms':>8} {'git ms':>9} {'ratio':>7}"
                f" {'peak RSS':>11} {'user s':>8} {'sys s':>7}"
            )
            for shape in args.shapes.split(","):
                for n in (int(x) for x in args.tasks.split(",")):
                    for workers in (int(x) for x in args.workers.split(",")):
                        bench_run(args, shape, n, workers, tmp)
        if args.large or args.large_only:
            bench_large(args, tmp)


if __name__ == "__main__":
    main()
