"""The user's ground, read before and after a hostile run: it must come out as it went in.

Read from the repository and the home folder themselves (git, file bytes), never from what
orchardist reports. What orchardist itself writes is left out: run branches, ``refs/orchardist``,
its state folder ``.git/orchardist`` and the objects it adds (``git fsck`` vouches for those).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from support import git

OURS = ("refs/heads/orchardist/", "refs/orchardist/")


def user_ground(repo: Path) -> dict[str, str]:
    """The user's refs, HEAD, checkout, worktrees, git config, hooks and info files, and home
    files, by part; plus whether ``git fsck`` finds the object store sound."""
    git_dir = repo / ".git"
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    parts = {
        "refs": "\n".join(r for r in refs if not r.startswith(OURS)),
        "HEAD": (git_dir / "HEAD").read_text(),
        "checkout": git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
    }
    for name in ("config", "hooks", "info"):  # packed refs are among the refs
        parts[f".git/{name}"] = _digest(git_dir / name)
    parts["home"] = _digest(Path(os.environ["HOME"]))
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict", "--no-dangling"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    parts["fsck"] = f"exit {fsck.returncode}\n{fsck.stdout}{fsck.stderr}"
    return parts


def assert_untouched(repo: Path, before: dict[str, str]) -> None:
    """The user's ground is as ``before`` found it, and its object store is sound."""
    after = user_ground(repo)
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert changed == {}, f"the user's ground changed: {changed}"
    assert after["fsck"].startswith("exit 0"), after["fsck"]


def _digest(path: Path) -> str:
    """Every file below ``path`` (or ``path`` itself): its name and a hash of its bytes."""
    if not path.exists():
        return "absent"
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return "\n".join(
        f"{f.relative_to(path) if f != path else f.name} "
        f"{hashlib.sha256(f.read_bytes()).hexdigest()[:16]}"
        for f in files
    )
