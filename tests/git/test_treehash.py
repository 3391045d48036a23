"""The snapshot's own hashing: what it reads, what it refuses to follow, symlink chains."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchardist.confine import mounts
from orchardist.confine.attemptpaths import AttemptPaths
from orchardist.confine.layout import Layout
from orchardist.git.repo import Repo
from orchardist.git.treehash import escaping_symlinks, refused_path
from orchardist.safeio import remove_tree
from realtools import require
from support import add_worktree, git, make_repo


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
    worktree = add_worktree(root, tmp_path / "wt", base)
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


# -- the snapshot that reads only what changed ---------------------------------------------------


@pytest.fixture(params=[False, True], ids=["checkout", "overlay"])
def overlaid(request: pytest.FixtureRequest) -> bool:
    """Each snapshot test on an attempt tree of its own, and on an overlay of a pristine one."""
    tmp_path: Path = request.getfixturevalue("tmp_path")
    if request.param:
        mountable = mounts.enter() and mounts.probe(tmp_path / "probe")
        require(
            mountable, "overlays cannot be mounted here (no CAP_SYS_ADMIN, or tmp cannot be upper)"
        )
    return bool(request.param)


def _attempt(
    tmp_path: Path, files: dict[str, str], overlaid: bool
) -> tuple[Repo, Layout, AttemptPaths, str]:
    """A repository of ``files`` (plus a binary, an executable, a symlink and a submodule
    entry), and an attempt folder at its head the way the executor makes one: a checkout of
    its own, or an overlay of the run's pristine checkout."""
    root = make_repo(tmp_path / "repo", files)
    (root / "logo.bin").write_bytes(bytes(range(256)))
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("README.md")
    git(root, "add", "-A")
    sub = git(root, "rev-parse", "HEAD")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{sub},vendor/sub")
    git(root, "commit", "-qm", "more kinds")
    repo = Repo(root)
    layout = Layout(repo, tmp_path / "workdirs", tmp_path / "state", overlays=overlaid)
    paths = layout.attempt("run1", "t.1")
    base = repo.rev_parse("HEAD")
    layout.create(paths, base, "run1")
    assert os.path.ismount(paths.tree) is overlaid
    return repo, layout, paths, base


def _both(repo: Repo, layout: Layout, paths: AttemptPaths, base: str) -> tuple[str, str]:
    """The tree of the snapshot that reads only what changed, and of the one that reads all."""
    checkout = layout.checkout(paths, "run1")
    assert checkout is not None
    # an overlay's upper folder names what changed: nothing else is looked at
    assert (checkout.only is not None) is os.path.ismount(paths.tree)
    fast = repo.snapshot(paths.tree, base, "task", checkout)
    full = repo.snapshot(paths.tree, base, "task")
    return repo.tree_of(fast), repo.tree_of(full)


FILES = {
    ".gitignore": "*.log\n",
    "README.md": "hello\n",
    "src/app.py": "print('app')\n",
    "src/old_name.py": "def f():\n    return 1\n" * 20,
    "src/deep/er/mod.py": "x = 1\n",
    "doomed/a.txt": "a\n",
    "doomed/b/c.txt": "c\n",
    "becomes_dir": "file\n",
    "becomes_file/x.txt": "x\n",
    "ignored_but_tracked.log": "tracked\n",
    "move_dir/in/y.txt": "y\n",
    "emptied/z.txt": "z\n",
}


def test_reading_only_what_changed_gives_the_tree_reading_everything_gives(
    tmp_path: Path, overlaid: bool
) -> None:
    # Given an attempt whose agent made every kind of change, same-size edits right after the
    # checkout (one clock tick: the stat data alone cannot tell), and played with its own git
    repo, layout, paths, base = _attempt(tmp_path, FILES, overlaid)
    tree = paths.tree
    (tree / "README.md").write_text("HELLO\n")  # same size, same tick as the checkout
    (tree / "src" / "old_name.py").rename(tree / "src" / "new_name.py")
    (tree / "src" / "deep" / "er" / "new.py").write_text("y = 2\n")
    shutil.rmtree(tree / "doomed")
    (tree / "becomes_dir").unlink()
    (tree / "becomes_dir").mkdir()
    (tree / "becomes_dir" / "inside.txt").write_text("in\n")
    shutil.rmtree(tree / "becomes_file")
    (tree / "becomes_file").write_text("now a file\n")
    (tree / "logo.bin").write_bytes(bytes(reversed(range(256))))
    (tree / "run.sh").chmod(0o644)
    (tree / "src" / "app.py").chmod(0o755)
    (tree / "link").unlink()
    (tree / "link").symlink_to("src/app.py")
    (tree / "new_link").symlink_to("../outside")
    (tree / "noise.log").write_text("ignored\n")
    (tree / "ignored_but_tracked.log").write_text("changed\n")
    (tree / "data.bin").write_bytes(b"\x00\xff\x00binary\x00")
    (tree / "move_dir").rename(tree / "moved_dir")  # a folder renamed whole
    shutil.rmtree(tree / "emptied")  # a folder deleted, then made again with other files
    (tree / "emptied").mkdir()
    (tree / "emptied" / "other.txt").write_text("other\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "the agent's own commit")

    # When both snapshots are taken, then Then they are the same tree
    fast, full = _both(repo, layout, paths, base)
    assert fast == full
    changed = repo.changed_files(base, fast)
    assert "README.md" in changed and "noise.log" not in changed
    assert {"move_dir/in/y.txt", "moved_dir/in/y.txt", "emptied/z.txt"} <= set(changed)
    assert "vendor/sub" not in changed  # the submodule stays as the base has it
    mode = git(repo.root, "ls-tree", fast, "src/app.py").split()[0]
    assert mode == "100755"


def test_an_untouched_attempt_and_one_emptied_of_everything_agree_too(
    tmp_path: Path, overlaid: bool
) -> None:
    repo, layout, paths, base = _attempt(tmp_path, FILES, overlaid)
    fast, full = _both(repo, layout, paths, base)
    assert fast == full == repo.tree_of(base)

    for entry in paths.tree.iterdir():
        if entry.name != ".git":
            remove_tree(entry)
    fast, full = _both(repo, layout, paths, base)
    assert fast == full
    assert git(repo.root, "ls-tree", "-r", "--name-only", fast) == "vendor/sub"


def test_the_snapshot_of_a_change_writes_only_the_changed_files_and_their_folders(
    tmp_path: Path, overlaid: bool
) -> None:
    # Given a repository of 300 files, all packed, and an attempt that edits one deep file
    files = {f"pkg{i // 30}/sub/mod{i}.py": f"x = {i}\n" for i in range(300)}
    repo, layout, paths, base = _attempt(tmp_path, files, overlaid)
    git(repo.root, "gc", "-q")
    objects = repo.common_dir / "objects"

    def loose() -> set[str]:
        return {f"{d.name}{f.name}" for d in objects.glob("[0-9a-f][0-9a-f]") for f in d.iterdir()}

    before = loose()
    (paths.tree / "pkg3" / "sub" / "mod99.py").write_text("x = 'edited'\n")

    # When its patch is taken
    checkout = layout.checkout(paths, "run1")
    assert checkout is not None
    snap = repo.snapshot(paths.tree, base, "task", checkout)

    # Then the objects written are the blob, the three folders above it, and the commit
    new = loose() - before
    assert len(new) == 5, [git(repo.root, "cat-file", "-t", o) + " " + o for o in new]
    assert repo.changed_files(base, snap) == ["pkg3/sub/mod99.py"]


def test_the_agent_cannot_reach_the_index_copy_the_snapshot_lists_from(
    tmp_path: Path, overlaid: bool
) -> None:
    _, layout, paths, _ = _attempt(tmp_path, FILES, overlaid)
    assert paths.checkout_index.is_file()
    assert not any(paths.checkout_index.is_relative_to(folder) for folder in paths.writable)
    layout.remove(paths)
    layout.tidy()
    assert layout.checkout(paths, "run1") is None
    assert not list((tmp_path / "workdirs").rglob("listing.git"))
    assert not list((tmp_path / "workdirs").rglob("pristine"))


def test_an_index_copy_changed_behind_orchardists_back_is_not_trusted(
    tmp_path: Path, overlaid: bool
) -> None:
    # Given an attempt without the sandbox, whose agent edited a file and rewrote the index
    # copy to record the edited file's stat data (hiding the edit from the listing)
    repo, layout, paths, base = _attempt(tmp_path, FILES, overlaid)
    (paths.tree / "src" / "app.py").write_text("print('changed')\n")
    env = {**os.environ, "GIT_INDEX_FILE": str(paths.checkout_index)}
    subprocess.run(
        ["git", "--git-dir", str(paths.git), "--work-tree", str(paths.tree), "add", "src/app.py"],
        check=True,
        env=env,
    )

    # Then orchardist does not use it, and the snapshot reading every file has the edit
    assert layout.checkout(paths, "run1") is None
    snap = repo.snapshot(paths.tree, base, "task", layout.checkout(paths, "run1"))
    assert repo.changed_files(base, snap) == ["src/app.py"]
