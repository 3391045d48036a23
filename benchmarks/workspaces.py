"""What an attempt folder costs to set up and remove, against the old ``git worktree``.

Usage: ``python benchmarks/workspaces.py [--files 500] [--rounds 30]``

A throwaway repository with ``--files`` files of a few KiB in nested folders. Each round makes
one attempt folder the way the executor does (``Layout.create``: a private git directory with
alternates, a tree filled by ``git read-tree -u``) and removes it, then does the same with
``git worktree add --detach`` under the git directory and ``git worktree remove`` (what
orchardist did before). Printed: the median milliseconds of each and the ratio new ÷ old
(below 1.0: the new layout is cheaper).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from orchardist.confine.layout import Layout
from orchardist.git.repo import Repo


def make_repo(root: Path, files: int) -> Repo:
    """A repository with ``files`` files spread over folders of 20, committed."""
    root.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    for i in range(files):
        path = root / f"pkg{i // 20}" / f"mod{i}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# module {i}\n" + "x = 1\n" * 200)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "-C", str(root), *ident, "commit", "-qm", "base"], check=True, env=env)
    return Repo(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchardist-bench-") as tmp:
        repo = make_repo(Path(tmp) / "repo", args.files)
        head = repo.rev_parse("HEAD")
        layout = Layout(repo, Path(tmp) / "workdirs", Path(tmp) / "state")
        new, old = [], []
        for i in range(args.rounds):
            paths = layout.attempt("bench", f"t.{i}")
            start = time.perf_counter()
            layout.create(paths, head, "bench")
            layout.remove(paths)
            new.append(time.perf_counter() - start)

            worktree = repo.common_dir / "orchardist" / "worktrees" / "bench" / f"t.{i}"
            start = time.perf_counter()
            worktree.parent.mkdir(parents=True, exist_ok=True)
            repo.git("worktree", "add", "--detach", "--quiet", str(worktree), head)
            repo.remove_worktree(worktree)
            old.append(time.perf_counter() - start)
        new_ms, old_ms = statistics.median(new) * 1e3, statistics.median(old) * 1e3
        print(f"files: {args.files}, rounds: {args.rounds}")
        print(f"attempt folder (private git dir + read-tree), create+remove: {new_ms:.1f} ms")
        print(f"git worktree add + remove (the old way):                    {old_ms:.1f} ms")
        print(f"ratio new / old: {new_ms / old_ms:.2f}")


if __name__ == "__main__":
    main()
