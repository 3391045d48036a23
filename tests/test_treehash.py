"""The snapshot's own hashing: what it reads, what it refuses to follow, symlink chains."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchardist.gitrepo import Repo
from orchardist.treehash import escaping_symlinks, refused_path
from support import git, make_repo


def test_a_chain_is_followed_hop_by_hop_not_read_as_text() -> None:
    links = {"sub/f": "..", "x": "sub/f/../etc/hostname", "ok": "sub/f/README.md"}
    assert escaping_symlinks(links) == ["x"]


def test_the_chains_of_the_hostile_review_are_refused() -> None:
    # f leaves on its own; x goes through f, then back up past the root, to /etc/hostname
    links = {"f": "../../..", "x": "f/../../../etc/hostname"}
    assert sorted(escaping_symlinks(links)) == ["f", "x"]
    # x alone, with f a harmless-looking link to the root: still out, by one ".."
    assert escaping_symlinks({"d/f": "..", "x": "d/f/../etc/hostname"}) == ["x"]


def test_absolute_targets_and_endless_chains_count_as_leaving() -> None:
    assert escaping_symlinks({"a": "/etc/passwd"}) == ["a"]
    assert sorted(escaping_symlinks({"l1": "l2", "l2": "l1"})) == ["l1", "l2"]
    assert escaping_symlinks({"d/e": "../d/./e2", "d/e2": "."}) == []


def test_a_snapshot_reads_no_fifo_and_looks_through_no_symlinked_folder(tmp_path: Path) -> None:
    # Given: a worktree where a FIFO waits for a reader and a tracked folder became a symlink
    # to a folder outside holding a file of the same name
    root = make_repo(tmp_path / "repo", {"README.md": "hello\n", "lib/code.py": "x = 1\n"})
    repo = Repo(root)
    base = repo.rev_parse("HEAD")
    worktree = tmp_path / "wt"
    repo.add_worktree(worktree, base)
    os.mkfifo(worktree / "pipe")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "code.py").write_text("secret = 'outside'\n")
    (worktree / "lib" / "code.py").unlink()
    (worktree / "lib").rmdir()
    (worktree / "lib").symlink_to(outside)

    # When
    snap = repo.snapshot(worktree, base, "task")

    # Then: the FIFO is left out (and did not block), lib is the link, nothing is read through it
    tree = git(root, "ls-tree", "-r", snap).splitlines()
    assert [line.split("\t")[1] for line in tree] == ["README.md", "lib"]
    assert tree[1].startswith("120000 ")
    assert git(root, "cat-file", "blob", f"{snap}:lib") == str(outside)


PROTECTED_GIT = ["git", "-c", "core.protectHFS=true", "-c", "core.protectNTFS=true"]
NAMES = [
    ".git/config",
    ".GIT/hooks/post-checkout",
    "sub/.Git/x",
    ".git /x",
    ".git. /x",
    ".git:evil",
    "git~1/x",
    "GIT~1. /x",
    ".g\u200cit/x",
    "\ufeff.git/x",
    ".gi\u206ft/x",
    "a/./b",
    "a/../b",
    "a//b",
    ".git~1/config",
    ".gitx",
    "git~2",
    ".gitignore",
    "x.git",
    "gi\u200ct",
    "ok.txt",
]


def test_paths_are_refused_exactly_as_git_refuses_them(tmp_path: Path) -> None:
    # Given: git's own verdict on each name (update-index ignores what verify_path refuses,
    # with the HFS and NTFS protections on, as on macOS and Windows)
    root = make_repo(tmp_path / "repo")
    blob = git(root, "hash-object", "-w", "README.md")
    lines = "".join(f"100644 {blob}\t{name}\n" for name in NAMES)
    lines += f"120000 {blob}\t.gitmodules\n120000 {blob}\tsub/.GITMODULES \n"
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    subprocess.run(
        [*PROTECTED_GIT, "update-index", "--index-info"],
        cwd=root,
        input=lines.encode(),
        env=env,
        check=True,
        capture_output=True,
    )
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, env=env, check=True, capture_output=True
    ).stdout
    kept = {p for p in listed.split(b"\0") if p}

    # Then: refused_path refuses what git ignored, and nothing else
    for name in [*NAMES, ".gitmodules", "sub/.GITMODULES "]:
        path = name.encode()
        mode = "120000" if "modules" in name.lower() else "100644"
        assert refused_path(path, mode) is (path not in kept), name
    assert len(kept) > 5  # git did accept the ordinary names
