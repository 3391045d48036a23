"""kill -9 soak: crash the orchestrator at random instants, resume, and check nothing was lost.

Usage: ``python benchmarks/kill9_soak.py [TRIALS] [--seed 7] [--keep]``

A throwaway repository gets a plan of six deterministic tasks in a DAG (scripted agents that
write fixed files and sleep a little, verify commands that take a little time, independent
tasks whose patches are merged three ways and verified again). One uninterrupted run gives the
reference tree. Then each trial:

1. starts ``orchardist run plan.toml --fresh`` in its own session and ``SIGKILL``\\ s only the
   orchestrator's pid after a delay drawn from a seeded RNG (its agents and verify commands are
   left orphaned, as a real crash leaves them). Half the kills land anywhere in the run's
   duration; the other half land 0 to 50 ms after the store shows one of the tasks (picked at
   random) merging: queued, verifying its three-way merged tree, or moving the branch;
2. resumes with ``orchardist resume RUN``, itself killed at random up to ``MAX_KILLS`` times in
   all, until a resume runs to its end;
3. checks the invariant: the run is done; its branch's tree is the reference tree; the branch
   has exactly one commit per task (``Orchardist-Task`` trailers) and the store names those
   commits; no process carries ``ORCHARDIST_RUN=<run>``; ``git worktree list`` shows only the
   main worktree and no worktree folder is left; the user's checkout (dirty on purpose) is
   exactly as it was.

Printed: ``trials run``, ``invariant violations`` (target 0), how many kills landed and how many
of them while a task was merging, and each violation. Exit code 1 if any violation.

The test suite imports this module (``tests/runs/test_resume.py``) and runs three seeded trials;
this script is the longer soak.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchardist.runs.folders import recorded_run_folder
from orchardist.runs.start import Workspace
from orchardist.state.records import RunState, TaskState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import processes_with_env  # the leak check the tests use

ORCHARDIST = [sys.executable, "-m", "orchardist"]
MAX_KILLS = 3  # per trial: the first run plus resumes
RESUME_ROUNDS = MAX_KILLS + 3  # a trial that needs more resumes than this is a violation
TASKS = ("a", "b", "e", "c", "d", "f")

PLAN = """\
[run]
max_parallel = 3
verify = "sleep 0.1"

[agents.fake]
kind = "scripted"

[agents.fake.script]
a = { write = { "a.txt" = "a\\n" }, sleep = 0.2 }
b = { write = { "b.txt" = "b\\n" }, sleep = 0.3 }
e = { write = { "lines.txt" = "one\\ntwo\\nthree\\nfour\\n" }, sleep = 0.1 }
c = { write = { "a.txt" = "a\\nc\\n", "c/c.txt" = "c\\n" }, sleep = 0.2 }
d = { write = { "d.txt" = "d\\n" }, sleep = 0.25 }
f = { write = { "f.txt" = "f\\n" }, delete = ["README.md"], sleep = 0.1 }

[[task]]
id = "a"
verify = "sleep 0.15 && test -f a.txt"

[[task]]
id = "b"

[[task]]
id = "e"

[[task]]
id = "c"
depends_on = ["a"]
verify = "sleep 0.1 && grep -q c a.txt"

[[task]]
id = "d"
depends_on = ["a", "b"]
candidates = 2

[[task]]
id = "f"
depends_on = ["c", "d", "e"]
verify = "test -f c/c.txt && test -f d.txt && test ! -f README.md"
"""


def git(root: Path, *args: str) -> str:
    """Run git in ``root``; its stripped stdout."""
    out = subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@dataclass(frozen=True)
class Project:
    """The repository the trials run in, and its plan."""

    root: Path
    plan: Path
    logs: Path  # the orchestrators' output, one file per process, for post-mortems
    state_db: Path  # orchardist's store, polled to kill an orchestrator while it merges


def make_project(root: Path) -> Project:
    """A repository with the plan committed, and a dirty checkout that must stay as it is."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    (repo / "lines.txt").write_text("one\ntwo\nthree\n")
    (repo / "plan.toml").write_text(PLAN)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    (repo / "README.md").write_text("hello, edited by the user and not committed\n")
    (repo / "scratch.txt").write_text("an untracked file of the user's\n")
    logs = root / "logs"
    logs.mkdir()
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    return Project(repo, repo / "plan.toml", logs, common / "orchardist" / "state.db")


def checkout_state(root: Path) -> str:
    """The user's checkout as a string: HEAD, branches, status and the dirty files' contents."""
    parts = [
        git(root, "symbolic-ref", "HEAD"),
        git(root, "rev-parse", "HEAD"),
        git(root, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"),
        git(root, "status", "--porcelain=v1", "--untracked-files=all"),
        (root / "README.md").read_text(),
        (root / "scratch.txt").read_text(),
    ]
    return "\n".join(parts)


@dataclass(frozen=True)
class When:
    """When to kill: ``delay_s`` after the start or, with ``merge``, that long after the store
    shows the ``merge``-th task (counting from 0) of the run merging."""

    delay_s: float
    merge: int | None = None


class Orchestrator:
    """One ``orchardist`` process, in its own session, output to a log file."""

    counter = 0

    def __init__(self, project: Project, args: Sequence[str]) -> None:
        Orchestrator.counter += 1
        self.project = project
        self.log = project.logs / f"{Orchestrator.counter:04d}-{args[0]}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*ORCHARDIST, *args],
                cwd=project.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self) -> int:
        """Wait for it to end by itself; its exit code."""
        return self.proc.wait()

    def kill(self, when: When, is_ours: Callable[[str], bool]) -> bool:
        """SIGKILL the orchestrator alone at ``when``, unless it ended first; whether it did.

        Its children are left orphaned, as after a crash. ``is_ours`` tells this orchestrator's
        run among the run ids in the store.
        """
        if when.merge is not None:
            seen: set[str] = set()
            while self.proc.poll() is None and len(seen) <= when.merge:
                seen |= {t for r, t in merging_tasks(self.project.state_db) if is_ours(r)}
                time.sleep(0.005)
        try:
            self.proc.wait(timeout=when.delay_s)
            return False
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return True


def runs_in_store(root: Path) -> dict[str, RunState]:
    """Every run's id and state, read from the store."""
    ws = Workspace.open(root)
    try:
        return {r.id: r.state for r in ws.store.runs()}
    finally:
        ws.store.close()


def merging_tasks(db: Path) -> set[tuple[str, str]]:
    """``(run, task)`` of tasks merging (queued, verifying the merged tree, moving the branch).

    A bare read-only SQLite connection: cheap enough to poll every few milliseconds while an
    orchestrator writes.
    """
    if not db.exists():
        return set()
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return set()
    try:
        rows = conn.execute("select run_id, task_id from tasks where state = 'merging'")
        return {(r[0], r[1]) for r in rows}
    except sqlite3.Error:
        return set()
    finally:
        conn.close()


@dataclass(frozen=True)
class Reference:
    """What an uninterrupted run produced, and how long it took."""

    tree: str
    duration_s: float


def reference_run(project: Project) -> Reference:
    """Run the plan once without interruption; its tree and duration."""
    before = set(runs_in_store(project.root))
    began = time.monotonic()
    orchestrator = Orchestrator(project, ["run", str(project.plan), "--fresh"])
    if orchestrator.wait() != 0:
        raise RuntimeError(f"the reference run failed; see {orchestrator.log}")
    duration = time.monotonic() - began
    (run_id,) = set(runs_in_store(project.root)) - before
    branch = f"orchardist/{run_id}"
    return Reference(git(project.root, "rev-parse", f"{branch}^{{tree}}"), duration)


@dataclass
class TrialResult:
    """One trial: the run it made, what happened to it, and what was wrong at the end."""

    run_id: str = ""
    kills: int = 0
    kills_while_merging: int = 0
    orchestrators: int = 0
    violations: list[str] = field(default_factory=list)


def draw(rng: random.Random, reference: Reference) -> When:
    """Anywhere in the whole run (half the time), or just after one of its merges begins."""
    if rng.random() < 0.5:
        return When(rng.uniform(0.0, reference.duration_s))
    return When(rng.uniform(0.0, 0.05), merge=rng.randrange(len(TASKS)))


def trial(project: Project, reference: Reference, rng: random.Random) -> TrialResult:
    """Crash a fresh run at random moments, resume it to its end, and check the invariant."""
    result = TrialResult()
    root = project.root
    checkout_before = checkout_state(root)
    known = set(runs_in_store(root))

    def killed(orchestrator: Orchestrator, when: When, is_ours: Callable[[str], bool]) -> bool:
        if not orchestrator.kill(when, is_ours):
            return False
        result.kills += 1
        result.kills_while_merging += any(is_ours(r) for r, _ in merging_tasks(project.state_db))
        return True

    # A fresh run, killed at a random instant; if it died before recording its run, again.
    while not result.run_id:
        orchestrator = Orchestrator(project, ["run", str(project.plan), "--fresh"])
        result.orchestrators += 1
        was_killed = killed(orchestrator, draw(rng, reference), lambda r: r not in known)
        new = set(runs_in_store(root)) - known
        if len(new) > 1:
            result.violations.append(f"one `run` made several runs: {sorted(new)}")
            return result
        result.run_id = next(iter(new), "")
        if not was_killed and (orchestrator.proc.returncode != 0 or not result.run_id):
            result.violations.append(
                f"the run exited {orchestrator.proc.returncode}; see {orchestrator.log}"
            )
            return result

    # Resume (and maybe kill the resume) until the run ends.
    for _ in range(RESUME_ROUNDS):
        if runs_in_store(root)[result.run_id] is not RunState.RUNNING:
            break
        orchestrator = Orchestrator(project, ["resume", result.run_id])
        result.orchestrators += 1
        if result.kills < MAX_KILLS and rng.random() < 0.5:
            when = draw(rng, reference)
            # a resume first starts Python and reconciles: give it that time too
            if when.merge is None:
                when = replace(when, delay_s=when.delay_s + 0.3)
            if killed(orchestrator, when, lambda r: r == result.run_id):
                continue
        if orchestrator.wait() != 0:
            result.violations.append(
                f"resume exited {orchestrator.proc.returncode}; see {orchestrator.log}"
            )
            return result
    result.violations += invariant_violations(project, reference, result.run_id, checkout_before)
    return result


def invariant_violations(
    project: Project, reference: Reference, run_id: str, checkout_before: str
) -> list[str]:
    """Everything that is not as an uninterrupted run would have left it."""
    root = project.root
    problems: list[str] = []
    ws = Workspace.open(root)
    try:
        run = ws.store.run(run_id)
        assert run is not None
        tasks = {t.task_id: t for t in ws.store.tasks(run_id)}
        state_dir = ws.state_dir
    finally:
        ws.store.close()
    if run.state is not RunState.DONE:
        problems.append(f"run ended {run.state.value}: {run.reason}")
    tree = git(root, "rev-parse", f"{run.branch}^{{tree}}")
    if tree != reference.tree:
        diff = git(root, "diff", "--stat", reference.tree, tree)
        problems.append(
            f"tree {tree[:12]} differs from the reference {reference.tree[:12]}: {diff}"
        )
    log = git(
        root,
        "log",
        "--format=%H %(trailers:key=Orchardist-Task,valueonly,separator=%x2C)",
        f"{run.base_commit}..{run.branch}",
    )
    by_task: dict[str, str] = {}
    per_task: Counter[str] = Counter()
    for line in log.splitlines():
        commit, _, names = line.partition(" ")
        if not names.strip():
            problems.append(f"commit {commit[:12]} has no Orchardist-Task trailer")
        for name in filter(None, (n.strip() for n in names.split(","))):
            per_task[name] += 1
            by_task[name] = commit
    if per_task != Counter(TASKS):
        problems.append(f"commits per task: {dict(per_task)} (want one each of {TASKS})")
    for task_id, record in tasks.items():
        if record.state is TaskState.DONE and record.commit != by_task.get(task_id):
            problems.append(
                f"the store says {task_id} is {record.commit}, the branch {by_task.get(task_id)}"
            )
    left = processes_with_env("ORCHARDIST_RUN", run_id)
    if left:
        problems.append(f"processes of the run still alive: {sorted(left)}")
    worktrees = [
        line
        for line in git(root, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    if worktrees != [f"worktree {root}"]:
        problems.append(f"worktrees left: {worktrees[1:]}")
    folder = recorded_run_folder(state_dir, run_id)
    if folder is not None and folder.exists() and any(folder.iterdir()):
        problems.append(f"attempt folders left in {folder}: {sorted(os.listdir(folder))}")
    if checkout_state(root) != checkout_before:
        problems.append("the user's checkout changed")
    return problems


def stray_branches(root: Path) -> list[str]:
    """Run branches with no run in the store (a run killed inside ``create_run``)."""
    names = git(root, "for-each-ref", "--format=%(refname:short)", "refs/heads/orchardist/")
    known = {f"orchardist/{run_id}" for run_id in runs_in_store(root)}
    return sorted(set(names.split()) - known)


@dataclass
class Soak:
    """Totals over trials."""

    trials: int = 0
    kills: int = 0
    kills_while_merging: int = 0
    orchestrators: int = 0
    violations: list[str] = field(default_factory=list)
    stray_branches: list[str] = field(default_factory=list)

    def add(self, result: TrialResult) -> None:
        self.trials += 1
        self.kills += result.kills
        self.kills_while_merging += result.kills_while_merging
        self.orchestrators += result.orchestrators
        self.violations += [
            f"trial {self.trials} (run {result.run_id}): {v}" for v in result.violations
        ]

    def report(self) -> str:
        lines = [
            f"trials run: {self.trials}",
            f"invariant violations: {len(self.violations)}",
            f"kills: {self.kills} ({self.kills_while_merging} while a task was merging)",
            f"orchestrator processes started: {self.orchestrators}",
            f"stray run branches (killed before the run was recorded): {len(self.stray_branches)}",
        ]
        return "\n".join(lines + [f"  {v}" for v in self.violations])


def soak(
    workdir: Path,
    seed: int,
    trials: int | None = None,
    budget_s: float | None = None,
    on_trial: Callable[[int, TrialResult], None] | None = None,
    min_trials: int = 0,
) -> Soak:
    """Run trials in a new project under ``workdir`` until ``trials`` or ``budget_s`` is used
    (but at least ``min_trials``, however slow the machine is)."""
    project = make_project(workdir)
    reference = reference_run(project)
    rng = random.Random(seed)
    totals = Soak()
    started = time.monotonic()
    longest = 0.0
    while trials is None or totals.trials < trials:
        over = budget_s is not None and time.monotonic() - started + longest > budget_s
        if over and totals.trials >= min_trials:
            break
        began = time.monotonic()
        result = trial(project, reference, rng)
        longest = max(longest, time.monotonic() - began)
        totals.add(result)
        if on_trial is not None:
            on_trial(totals.trials, result)
    totals.stray_branches = stray_branches(project.root)
    return totals


def isolated_git_env(home: Path) -> None:
    """No user or system git configuration; a fixed identity."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Soak\n\temail = soak@example.com\n[init]\n\tdefaultBranch = main\n"
    )
    os.environ.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    for var in ("GIT_CONFIG_GLOBAL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        os.environ.pop(var, None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n\n")[0])
    parser.add_argument("trials", nargs="?", type=int, default=30, help="trials (default 30)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the kill delays")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kill9-soak-"))
    isolated_git_env(workdir / "home")

    def progress(n: int, result: TrialResult) -> None:
        mark = "ok" if not result.violations else "VIOLATION"
        print(
            f"trial {n}: {mark}  kills={result.kills} "
            f"(merging {result.kills_while_merging})  run {result.run_id}",
            flush=True,
        )

    began = time.monotonic()
    totals = soak(workdir, args.seed, trials=args.trials, on_trial=progress)
    print(totals.report())
    print(f"seconds: {time.monotonic() - began:.1f}  seed: {args.seed}  folder: {workdir}")
    if not args.keep and not totals.violations:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return 1 if totals.violations else 0


if __name__ == "__main__":
    sys.exit(main())
