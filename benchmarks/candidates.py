"""How many verify runs best-of-N candidates cost, and how well baselines are reused.

Usage: ``python benchmarks/candidates.py [--tasks 4] [--candidates 3] [--max-parallel 4]``

A throwaway repository has a pytest suite in which one test already fails on the base, so every
candidate's suite exits non-zero and can only be judged against the base's own run of the same
command. A graph of tasks (task i depends on task i-2: two chains), each with N candidates of
the in-package scripted agent, runs through the real scheduler, local executor, store and git:
candidate 1 of every three breaks a test that passes on the base (rejected), the others only
carry the base's failure (accepted; the smallest diff wins).

Printed: candidate verify runs, merge re-verify runs (a winner landing on a moved tip), how many
times a failing command was judged against its base (lookups), how many baseline runs really
happened (one ``$ command`` line each in the baseline logs), and the ratio
baseline runs ÷ distinct (base commit, command) pairs looked up. The target is 1.0: one baseline
per base commit and command, shared by every candidate and task on that base, not one per
candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from orchardist.confine.procs import CancelToken
from orchardist.executors.local import LocalExecutor
from orchardist.plan.loading import load_plan
from orchardist.runs.start import Workspace, create_run, execute
from orchardist.specs import Plan
from orchardist.state.agentrecords import Failure
from orchardist.verify.oracle import CommandOutcome
from orchardist.verify.verifier import Baselines

SUITE = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"
SHOP = """\
def price(amount):
    return round(amount, 2)


def discount(amount, percent):
    return amount * percent / 100
"""
TEST_SHOP = """\
from shop import discount, price


def test_price():
    assert price(1.234) == 1.23


def test_discount():  # fails on the base
    assert discount(200, 10) == 180
"""


class CountingBaselines:
    """The executor's baselines, counting every lookup by (base commit, command)."""

    def __init__(self, inner: Baselines) -> None:
        self.inner = inner
        self.lookups: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def outcome(
        self,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str = "",
        cancel: CancelToken | None = None,
        network: bool = False,
    ) -> CommandOutcome:
        """Record the lookup, then answer as the real cache does."""
        with self._lock:
            self.lookups.append((commit, f"[{workdir}] {command}"))
        return self.inner.outcome(
            commit, command, workdir, timeout_s, run_id, cancel, network=network
        )


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


def make_repo(path: Path) -> None:
    """A repository with an identity of its own and a suite failing one test on the base."""
    (path / "tests").mkdir(parents=True)
    (path / "shop.py").write_text(SHOP)
    (path / "tests" / "test_shop.py").write_text(TEST_SHOP)
    (path / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    git(path, "init", "-q")
    git(path, "config", "user.name", "bench")
    git(path, "config", "user.email", "bench@localhost")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "base")


def toml_files(paths: dict[str, str]) -> str:
    """Path → text as a TOML inline table."""
    return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in paths.items()) + " }"


def candidate_step(task: int, k: int) -> str:
    """What candidate ``k`` of task ``task`` writes: its module and test, maybe a broken price."""
    module = f"def value_{task}():\n    return {task}\n" + "".join(
        f"# note {n}\n" for n in range(k)
    )
    test = f"from mod_{task} import value_{task}\n\n\ndef test_value():\n"
    test += f"    assert value_{task}() == {task}\n"
    files = {f"mod_{task}.py": module, f"tests/test_mod_{task}.py": test}
    if k % 3 == 1:  # breaks test_price, which passes on the base
        files["shop.py"] = SHOP.replace("round(amount, 2)", "round(amount, 1)")
    return f"{{ write = {toml_files(files)} }}"


def write_plan(repo: Path, tasks: int, candidates: int, max_parallel: int) -> Plan:
    lines = [
        "[run]",
        f"max_parallel = {max_parallel}",
        f"verify = {json.dumps(SUITE)}",
        "",
        "[agents.fake]",
        'kind = "scripted"',
        "[agents.fake.script]",
    ]
    lines += [
        f'"t{i}/{k}" = {candidate_step(i, k)}' for i in range(tasks) for k in range(candidates)
    ]
    for i in range(tasks):
        deps = f'["t{i - 2}"]' if i >= 2 else "[]"
        lines += ["", "[[task]]", f'id = "t{i}"', f"candidates = {candidates}"]
        lines.append(f"depends_on = {deps}")
    path = repo / "plan.toml"
    path.write_text("\n".join(lines) + "\n")
    return load_plan(path)


def commands_run(log: Path) -> int:
    """How many commands a job's log shows (``run_one`` writes ``$ command`` before each)."""
    text = log.read_text(encoding="utf-8", errors="replace")
    return sum(line.startswith("$ ") for line in text.splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--max-parallel", type=int, default=4)
    args = parser.parse_args(argv)
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    print(
        f"orchardist candidates benchmark: {args.tasks} tasks x {args.candidates} candidates, "
        f"max_parallel {args.max_parallel}; python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {git_version.strip()}"
    )
    with tempfile.TemporaryDirectory(prefix="orchardist-bench-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo)
        plan = write_plan(repo, args.tasks, args.candidates, args.max_parallel)
        ws = Workspace.open(repo)
        try:
            run = create_run(ws, plan)
            executor = LocalExecutor(ws.repo, ws.state_dir, store=ws.store)
            assert executor.verifier.baselines is not None
            counting = CountingBaselines(executor.verifier.baselines)
            executor.verifier.baselines = counting
            start = time.perf_counter()
            state = execute(ws, plan, run, executor=executor)
            executor.close()
            wall = time.perf_counter() - start
            tasks = ws.store.tasks(run.id)
            attempts = ws.store.attempts(run.id)
        finally:
            ws.store.close()
        logs = ws.state_dir / "logs"
        candidate_runs = sum(commands_run(Path(a.log_path)) for a in attempts if a.log_path)
        merge_runs = sum(commands_run(p) for p in (logs / run.id).glob("*.merge.log"))
        baseline_runs = sum(commands_run(p) for p in (logs / "baselines").glob("*.log"))
        pairs = set(counting.lookups)
        bases = {commit for commit, _ in pairs}
        commands = {command for _, command in pairs}
        infra = sum(a.failure is Failure.INFRA_ERROR for a in attempts)
        done = sum(t.state.value == "done" for t in tasks)
        verified = [a for a in attempts if a.verdict == "verified"]

    ratio = baseline_runs / len(pairs) if pairs else float("nan")
    print(f"run {state.value} in {wall:.1f} s: {done}/{len(tasks)} tasks done")
    print(f"  attempts                      {len(attempts):5d}  ({len(verified)} verified)")
    print(f"  candidate verify runs         {candidate_runs:5d}")
    print(f"  merge re-verify runs          {merge_runs:5d}  (winners landing on a moved tip)")
    print(
        f"  baseline lookups              {len(counting.lookups):5d}  "
        "(a failing command judged against its base)"
    )
    print(
        f"  distinct (base, command)      {len(pairs):5d}  "
        f"(on {len(bases)} base commit(s), {len(commands)} command(s))"
    )
    print(f"  baseline runs                 {baseline_runs:5d}")
    target = "PASS" if ratio == 1.0 else "MISS"
    print(
        f"  baseline runs ÷ distinct      {ratio:5.2f}  "
        f"(target 1.00, one per base commit and command: {target})"
    )
    if baseline_runs:
        saved = len(counting.lookups) / baseline_runs
        print(
            f"  without the cache             {len(counting.lookups):5d}  "
            f"baseline runs, one per lookup ({saved:.1f} times as many)"
        )
    total = candidate_runs + merge_runs + baseline_runs
    print(f"  verify runs in all            {total:5d}")
    print(
        f"  infra errors                  {infra:5d}  (git, disk or executor failures, re-queued)"
    )
    return 0 if ratio == 1.0 and state.value == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
