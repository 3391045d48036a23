"""Time orchardist's self-hashing snapshot against git's own `add --all` + `write-tree` on a
worktree of N files (default 2000 files of 2 KiB, 20 changed). Prints milliseconds and ratio.

    python benchmarks/snapshot_hashing.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchardist.git.repo import Repo


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        git(root, "init", "-q")
        for i in range(n):
            path = root / f"d{i % 50}" / f"f{i}.txt"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(os.urandom(1024).hex().encode())
        git(root, "add", "-A")
        git(root, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base")
        repo = Repo(root)
        base = repo.rev_parse("HEAD")
        wt = Path(tmp) / "wt"
        repo.git("worktree", "add", "--detach", "--quiet", str(wt), base)
        for i in range(20):
            (wt / f"d{i}" / f"f{i}.txt").write_text(f"changed {i}\n")
        ours, theirs = [], []
        for _ in range(5):
            t = time.perf_counter()
            repo.snapshot(wt, base, "bench\n")
            ours.append(time.perf_counter() - t)
            index = Path(tmp) / "index"
            env = {**os.environ, "GIT_INDEX_FILE": str(index)}
            t = time.perf_counter()
            git(wt, "read-tree", base, env=env)
            git(wt, "add", "--all", env=env)
            git(wt, "write-tree", env=env)
            theirs.append(time.perf_counter() - t)
            index.unlink()
        a, b = min(ours) * 1000, min(theirs) * 1000
        print(
            f"{n} files: self-hashing snapshot {a:.0f} ms, "
            f"git add --all {b:.0f} ms, ratio {a / b:.2f}"
        )


if __name__ == "__main__":
    main()
