"""Per-task cost of ``orchardist run`` end to end, beside the raw git floor in the same repository.

Usage::

    python benchmarks/e2e.py [--tasks 100] [--shapes layered,independent] [--workers 4]
                             [--profile FILE] [--large [--large-files 30000]] [--no-floor]
                             [--verify CMD]

For each (shape, tasks, workers): a throwaway repository (``--files`` committed files), a plan of
``tasks`` shell agents that each add a one-line file (``g<k>/<task>.txt``, 100 files per folder),
``verify = "none"`` (``--verify CMD``: that command, run on each patch's verify view), default
sandbox and checkout guard, run through the real CLI
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
100 files, each way there is: orchardist's attempt folder (``Layout.create``) as an overlay of
the run's pristine checkout (where it can mount, see worktree.py; the pristine's own cost on a
line of its own) and as a checkout of its own, ``git worktree add``, ``--no-checkout`` + a
sparse checkout of the one folder the task touches (the agent does not see the other files),
``cp --reflink=auto`` of a pristine checkout, and a bare overlay mount of a pristine checkout in
a user namespace (``unshare -Urm``; timed beyond starting the namespace).
Median ms to make and to remove one, and the disk one attempt uses after a one-line edit; for
orchardist's two, the verify view of a one-line patch (executors/views.py) beside it. Then
the snapshot of a one-line edit, reading what changed against reading every file.
``--setups`` picks some of them (overlay, layout, worktree, sparse, reflink, unshare).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchardist.confine import mounts
from orchardist.confine.layout import Layout
from orchardist.git.repo import Repo

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


def write_plan(repo: Path, n: int, shape: str, verify: str = "none") -> Path:
    """The plan: ``n`` shell agents adding a one-line file each, ``verify = "none"`` (or
    ``--verify``'s command, run on each patch's verify view)."""
    ids = task_ids(n)
    lines = [f"[run]\nverify = {json.dumps(verify)}\n", "[agents.edit]", 'kind = "shell"']
    lines.append(f"command = '{AGENT}'")
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


def floor(
    repo: Path, ids: list[str], workers: int, scratch: Path, ref: str, start: str = "HEAD"
) -> float:
    """Wall seconds of the raw git work of ``ids`` tasks, ``workers`` at a time, on ``ref``
    (made at ``start``)."""
    base = git("rev-parse", start, cwd=repo)
    git("update-ref", ref, base, cwd=repo)
    scratch.mkdir(parents=True, exist_ok=True)

    def one(task: str) -> None:
        tree = scratch / task
        tip = git("rev-parse", ref, cwd=repo)
        git("worktree", "add", "-q", "--detach", str(tree), tip, cwd=repo, tries=10)
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
        git("worktree", "remove", "--force", str(tree), cwd=repo, tries=10)

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, ids))
    return time.perf_counter() - start


def bench_run(args: argparse.Namespace, shape: str, n: int, workers: int, tmp: Path) -> None:
    """One row: orchardist and the floor, same repository, same run of the script."""
    folder = tmp / f"{shape}-{n}-{workers}"
    repo = make_repo(folder / "repo", args.files)
    plan = write_plan(repo, n, shape, args.verify)
    sample = min(n, args.floor_sample or n)
    floor_s = 0.0
    if sample < n and not args.no_floor:  # the floor sampled at the start and at the end
        floor_s += floor(repo, task_ids(sample), workers, folder / "f0", "refs/heads/floor0")
    profile = args.profile and Path(f"{args.profile}.{shape}-{n}-{workers}")
    spy = args.py_spy and Path(f"{args.py_spy}.{shape}-{n}-{workers}")
    wall, rss_kib, user, system, text = run_orchardist(plan, workers, folder / "work", profile, spy)
    done = text.count("\n")
    ended = next((line for line in text.splitlines() if line.startswith("run ")), "no run line")
    print(f"  ({ended.split('  branch')[0]})", flush=True)
    if ": done" not in ended:
        print(text[-3000:], flush=True)
    orch_ms = wall / n * 1e3
    row = f"{shape:<12} {n:>6} {workers:>3}   {orch_ms:8.1f}"
    print(f"  (orchardist: {orch_ms:.1f} ms/task, {rss_kib / 1024:.0f} MB)", flush=True)
    for label, ms in stretches(repo, min(1000, max(1, n // 10))):
        print(f"  (orchardist, {label}: {ms:.1f} ms/task)", flush=True)
    if args.no_floor:
        floor_ms = float("nan")
    else:
        # the whole floor grows the repository as the run did; a sample at the end starts
        # from the run branch, grown by the run's files
        start, ids = "HEAD", task_ids(sample)
        if sample < n:
            tip = git("for-each-ref", "--format=%(refname)", "refs/heads/orchardist/", cwd=repo)
            start, ids = tip.split()[0], [f"end-{task}" for task in ids]
        floor_s += floor(repo, ids, workers, folder / "f1", "refs/heads/floor1", start)
        floor_ms = floor_s / (sample * (2 if sample < n else 1)) * 1e3
    note = f"; floor sampled: {sample} tasks at the start and the end" if sample < n else ""
    print(
        f"{row} {floor_ms:9.1f} {orch_ms / floor_ms:6.2f}x {rss_kib / 1024:8.0f} MB"
        f" {user:8.1f} {system:7.1f}   ({done} output lines{note})",
        flush=True,
    )
    with contextlib.suppress(OSError):
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def stretches(repo: Path, size: int) -> list[tuple[str, float]]:
    """ms per task over the run's first and last ``size`` attempts to end (from the run's
    store), when the run had at least twice as many."""
    (db,) = (repo / ".git" / "orchardist").glob("*.db")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (start,) = conn.execute("select min(created_at) from runs").fetchone()
        ends = [row[0] for row in conn.execute("select ended_at from attempts order by ended_at")]
    if len(ends) < 2 * size:
        return []
    first = (ends[size - 1] - start) / size * 1e3
    last = (ends[-1] - ends[-size - 1]) / size * 1e3
    return [(f"first {size}", first), (f"last {size}", last)]


# -- attempt setup on a large repository ----------------------------------------------------------


def disk_kib(root: Path) -> int:
    """Allocated KiB that ``root`` alone holds: each inode counted once (``du`` semantics),
    a file only when all its links are under ``root`` (one linked from the run's pristine
    checkout, as its index copy, is there once for all the attempts on that commit); mounted
    folders (an overlaid tree: its changes are in the attempt's upper folder) not entered."""
    inodes: dict[tuple[int, int], list[int]] = {}  # inode: [links seen, its links, blocks]
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(folder, d))]
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(folder, name))
            links = 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink
            inodes.setdefault((st.st_dev, st.st_ino), [0, links, st.st_blocks])[0] += 1
    return sum(blocks for seen, links, blocks in inodes.values() if seen >= links) * 512 // 1024


class Setup:
    """One way to give an attempt the repository's files at ``head``: ``make`` returns the
    folder the agent would edit; ``remove`` undoes it. ``whole`` says if every file is there."""

    whole = True

    def __init__(self, repo: Path, tmp: Path) -> None:
        self.repo, self.tmp = repo, tmp
        self.head = git("rev-parse", "HEAD", cwd=repo)

    def make(self, i: int) -> Path:
        raise NotImplementedError

    def remove(self, i: int) -> None:
        subprocess.run(["rm", "-rf", str(self.tmp / f"a{i}")], check=True)


class LayoutSetup(Setup):
    """orchardist's attempt folder: a private git directory, ``read-tree -u`` (all files)."""

    def __init__(self, repo: Path, tmp: Path) -> None:
        super().__init__(repo, tmp)
        self.layout = Layout(Repo(repo), tmp / "workdirs", tmp / "state")

    def make(self, i: int) -> Path:
        paths = self.layout.attempt("bench", f"t.{i}")
        self.layout.create(paths, self.head, "bench")
        return paths.tree

    def remove(self, i: int) -> None:
        self.layout.remove(self.layout.attempt("bench", f"t.{i}"))


class OverlaySetup(LayoutSetup):
    """orchardist's attempt folder as an overlay of the run's pristine checkout of the base
    commit. The pristine is made before the timing (once per base; its cost is printed on its
    own line, with the cost of moving an unused one to the next commit)."""

    def __init__(self, repo: Path, tmp: Path) -> None:
        Setup.__init__(self, repo, tmp)
        self.layout = Layout(Repo(repo), tmp / "workdirs", tmp / "state", overlays=True)
        first = self.layout.attempt("bench", "first")
        start = time.perf_counter()
        self.layout.create(first, self.head, "bench")
        self.first_ms = (time.perf_counter() - start) * 1e3
        self.layout.remove(first)


class WorktreeSetup(Setup):
    """``git worktree add`` (what the raw git floor does)."""

    def make(self, i: int) -> Path:
        git("worktree", "add", "-q", "--detach", str(self.tmp / f"a{i}"), self.head, cwd=self.repo)
        return self.tmp / f"a{i}"

    def remove(self, i: int) -> None:
        git("worktree", "remove", "--force", str(self.tmp / f"a{i}"), cwd=self.repo)


class SparseSetup(Setup):
    """``worktree add --no-checkout`` + sparse checkout of the one folder the task touches."""

    whole = False

    def make(self, i: int) -> Path:
        tree = self.tmp / f"a{i}"
        git(
            "worktree",
            "add",
            "-q",
            "--no-checkout",
            "--detach",
            str(tree),
            self.head,
            cwd=self.repo,
        )
        git("sparse-checkout", "set", "--cone", "pkg0", cwd=tree)
        git("checkout", "-q", "--detach", self.head, cwd=tree)
        return tree

    remove = WorktreeSetup.remove


class ReflinkSetup(Setup):
    """``cp -a --reflink=auto`` of a pristine checkout (a full copy where the filesystem has no
    reflinks, as ext4)."""

    def __init__(self, repo: Path, tmp: Path) -> None:
        super().__init__(repo, tmp)
        self.pristine = tmp / "pristine"
        git("worktree", "add", "-q", "--detach", str(self.pristine), self.head, cwd=repo)

    def make(self, i: int) -> Path:
        subprocess.run(
            ["cp", "-a", "--reflink=auto", str(self.pristine), str(self.tmp / f"a{i}")], check=True
        )
        return self.tmp / f"a{i}"


SETUPS: dict[str, type[Setup]] = {
    "overlay": OverlaySetup,
    "layout": LayoutSetup,
    "worktree": WorktreeSetup,
    "sparse": SparseSetup,
    "reflink": ReflinkSetup,
}


def setup_cost(setup: Setup, rounds: int) -> tuple[float, float, int]:
    """Median ms to make and to remove an attempt, and the most KiB one held after an edit."""
    made, removed, disk = [], [], 0
    for i in range(rounds):
        start = time.perf_counter()
        tree = setup.make(i)
        made.append(time.perf_counter() - start)
        (tree / "pkg0" / "mod0.py").write_text("# edited\n")
        disk = max(disk, disk_kib(tree.parent if isinstance(setup, LayoutSetup) else tree))
        start = time.perf_counter()
        setup.remove(i)
        removed.append(time.perf_counter() - start)
    return statistics.median(made) * 1e3, statistics.median(removed) * 1e3, disk


def view_ms(setup: LayoutSetup, rounds: int) -> float:
    """Median ms to make the verify view of an attempt's one-line patch (executors/views.py)
    while the attempt stands on its base, as verify does."""
    from orchardist.executors.views import make_view, view_paths

    layout, repo = setup.layout, Repo(setup.repo)
    attempt = layout.attempt("bench", "viewed")
    layout.create(attempt, setup.head, "bench")
    (attempt.tree / "pkg0" / "mod0.py").write_text("# edited\n")
    patch = repo.snapshot(attempt.tree, setup.head, "edit", layout.checkout(attempt, "bench"))
    made = []
    for i in range(rounds):
        view = view_paths(layout, "bench", f"v.{i}")
        start = time.perf_counter()
        make_view(layout, view, setup.head, patch, "bench")
        made.append(time.perf_counter() - start)
        layout.remove(view)
    layout.remove(attempt)
    return statistics.median(made) * 1e3


def next_base_ms(setup: OverlaySetup) -> float:
    """ms of the first attempt on a new commit (one file changed) when the pristine of the
    last one is unused: it is moved to the new commit, only the changed file rewritten."""
    tree = setup.tmp / "next"
    git("worktree", "add", "-q", "--detach", str(tree), setup.head, cwd=setup.repo)
    (tree / "pkg0" / "mod0.py").write_text("# next base\n")
    git("commit", "-qam", "next", cwd=tree)
    head = git("rev-parse", "HEAD", cwd=tree)
    git("worktree", "remove", "--force", str(tree), cwd=setup.repo)
    paths = setup.layout.attempt("bench", "next")
    start = time.perf_counter()
    setup.layout.create(paths, head, "bench")
    took = (time.perf_counter() - start) * 1e3
    setup.layout.remove(paths)
    setup.layout.tidy()
    return took


OVERLAY = """
set -e
cd "$1"; i=0
while [ $i -lt "$2" ]; do
  mkdir -p u$i w$i m$i
  mount -t overlay overlay -o lowerdir=pristine,upperdir=u$i,workdir=w$i m$i
  echo '# edited' > m$i/pkg0/mod0.py
  i=$((i+1))
done
"""


def overlay_cost(repo: Path, tmp: Path, rounds: int) -> tuple[float, int] | None:
    """ms per overlay mount of a pristine checkout in a user namespace (beyond starting the
    namespace), and KiB of one upper folder after the edit; None where it cannot be made."""
    pristine = tmp / "pristine"
    git("worktree", "add", "-q", "--detach", str(pristine), "HEAD", cwd=repo)
    cmd = ["unshare", "-Urm", "sh", "-c", OVERLAY, "sh", str(tmp)]
    start = time.perf_counter()
    empty = subprocess.run([*cmd, "0"], capture_output=True)
    empty_s = time.perf_counter() - start
    start = time.perf_counter()
    done = subprocess.run([*cmd, str(rounds)], capture_output=True, text=True)
    took_s = time.perf_counter() - start
    if empty.returncode != 0 or done.returncode != 0:
        return None
    return (took_s - empty_s) / rounds * 1e3, disk_kib(tmp / "u0") + disk_kib(tmp / "w0")


def bench_large(args: argparse.Namespace, tmp: Path) -> None:
    """Attempt setup on ``--large-files`` against 100 files, each way there is."""
    repos = {n: make_repo(tmp / f"repo{n}", n) for n in (100, args.large_files)}
    large = args.large_files
    print(f"\nattempt setup, {args.rounds} rounds: median ms to make | to remove; disk of one")
    print("attempt after a one-line edit (KiB); whole = the agent sees every file")
    print(f"{'setup':<34} {'100 files':>17} {large:>9} files {'ratio':>6} {'disk':>9} whole")
    chosen = set(args.setups.split(","))
    kinds: list[type[Setup]] = [k for name, k in SETUPS.items() if name in chosen]
    if OverlaySetup in kinds and not mounts.enter():
        kinds.remove(OverlaySetup)
        print("(orchardist's overlays: cannot mount here; the copy is what attempts get)")
    pristine, views = {}, {}
    for kind in kinds:
        rows = {}
        for n, repo in repos.items():
            folder = tmp / f"{kind.__name__}-{n}"
            folder.mkdir()
            setup = kind(repo, folder)
            rows[n] = setup_cost(setup, args.rounds)
            if isinstance(setup, LayoutSetup):
                views[kind.__name__, n] = view_ms(setup, args.rounds)
            if isinstance(setup, OverlaySetup):
                pristine[n] = (setup.first_ms, next_base_ms(setup))
        (small_ms, small_rm, _), (large_ms, large_rm, disk) = rows[100], rows[large]
        print(
            f"{kind.__name__:<34} {small_ms:7.1f} | {small_rm:6.1f} "
            f"{large_ms:9.1f} | {large_rm:6.1f} {large_ms / small_ms:5.1f}x {disk:9d} "
            f"{'yes' if kind.whole else 'NO'}",
            flush=True,
        )
    for name in dict.fromkeys(name for name, _ in views):
        small_ms, large_ms = views[name, 100], views[name, large]
        print(
            f"  {name}: verify view of a one-line patch {small_ms:.1f} ms at 100 files, "
            f"{large_ms:.1f} ms at {large} ({large_ms / small_ms:.1f}x)"
        )
    for n, (first_ms, next_ms) in pristine.items():
        print(
            f"  overlay, {n} files: first attempt on a base (pristine checkout made) "
            f"{first_ms:.1f} ms; first on the next base (one file differs) {next_ms:.1f} ms"
        )
    costs = {
        n: overlay_cost(repo, tmp / f"overlay-{n}", args.rounds) if "unshare" in chosen else None
        for n, repo in repos.items()
    }
    small, big = costs[100], costs[large]
    if "unshare" not in chosen:
        pass
    elif small is None or big is None:
        print("overlay over a pristine checkout: cannot mount here (no user namespaces?)")
    else:
        print(
            f"{'overlay (user namespace) mount':<34} {small[0]:7.1f} | {'-':>6} {big[0]:9.1f} | "
            f"{'-':>6} {big[0] / small[0]:5.1f}x {big[1]:9d} yes (+ one pristine checkout/base)"
        )
    for n, repo in repos.items():
        snap = snapshot_cost(repo, tmp / f"snap-{n}", args.rounds)
        print(
            f"snapshot of a one-line edit, {n} files: reading what changed {snap[0]:.1f} ms, "
            f"reading every file {snap[1]:.1f} ms",
            flush=True,
        )


def snapshot_cost(repo: Path, tmp: Path, rounds: int) -> tuple[float, float]:
    """Median ms of the snapshot of a one-line edit, reading what changed and reading all."""
    layout = Layout(Repo(repo), tmp / "workdirs", tmp / "state", overlays=mounts.usable())
    head = git("rev-parse", "HEAD", cwd=repo)
    fast, full = [], []
    for i in range(rounds):
        paths = layout.attempt("bench", f"t.{i}")
        layout.create(paths, head, "bench")
        (paths.tree / "pkg0" / "mod0.py").write_text(f"# edited {i}\n")
        start = time.perf_counter()
        layout.repo.snapshot(paths.tree, head, "m", layout.checkout(paths, "bench"))
        fast.append(time.perf_counter() - start)
        start = time.perf_counter()
        layout.repo.snapshot(paths.tree, head, "m")
        full.append(time.perf_counter() - start)
        layout.remove(paths)
    layout.tidy()
    return statistics.median(fast) * 1e3, statistics.median(full) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="100", help="comma-separated task counts")
    parser.add_argument("--shapes", default="layered,independent")
    parser.add_argument("--workers", default="4", help="comma-separated, e.g. 2,4,8")
    parser.add_argument("--files", type=int, default=100, help="files in the base repository")
    parser.add_argument("--profile", help="cProfile the orchestrator; stats to FILE.<row>")
    parser.add_argument("--py-spy", help="sample the orchestrator with py-spy; raw to FILE.<row>")
    parser.add_argument(
        "--floor-sample",
        type=int,
        help="time the floor on this many tasks before and after the run (for 10,000 tasks)",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the raw git floor")
    parser.add_argument("--verify", default="none", help='the plan\'s verify (e.g. "true")')
    parser.add_argument("--large", action="store_true", help="also the large-repository case")
    parser.add_argument("--large-only", action="store_true", help="only the large case")
    parser.add_argument("--large-files", type=int, default=30_000)
    parser.add_argument(
        "--setups", default="overlay,layout,worktree,sparse,reflink,unshare", help="--large's"
    )
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
