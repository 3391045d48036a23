"""The view verify runs on holds exactly a commit's tree: every file, mode and link, nothing
more; HEAD and the index say the start commit, as the agent's tree did."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchardist.confine import mounts
from orchardist.confine.layout import VIEWS, Layout
from orchardist.executors.views import make_view, view_paths
from orchardist.git.repo import Repo
from realtools import require
from support import git


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def _files(tree: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and link under ``tree`` but the .git pointer: its mode and its content (a
    link's target)."""
    found = {}
    for folder, dirs, names in os.walk(tree):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, tree)
            if rel == ".git":
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = (0o120000, os.fsencode(os.readlink(path)))
            else:
                found[rel] = (0o100755 if st.st_mode & 0o100 else 0o100644, Path(path).read_bytes())
    return found


def _committed(repo: Path, commit: str) -> dict[str, tuple[int, bytes]]:
    """Every file of ``commit``: its mode and its content."""
    found = {}
    for line in git(repo, "ls-tree", "-r", "-z", commit).split("\0"):
        if not line:
            continue
        meta, path = line.split("\t", 1)
        mode, _, oid = meta.split()
        body = subprocess.run(
            ["git", "-C", str(repo), "cat-file", "blob", oid], capture_output=True, check=True
        ).stdout
        found[path] = (int(mode, 8), body)
    return found


@pytest.fixture(params=["overlay", "checkout"])
def layout(request: pytest.FixtureRequest, repo: Path, tmp_path: Path) -> Layout:
    overlays = request.param == "overlay"
    if overlays:
        usable = mounts.enter() and mounts.probe(tmp_path / "probe")
        require(
            usable, "overlays cannot be mounted here (no CAP_SYS_ADMIN, or tmp cannot be upper)"
        )
    return Layout(Repo(repo), tmp_path / "root", tmp_path / "state", overlays=overlays)


@pytest.mark.parametrize("plain", [True, False], ids=["files-only", "links-modes-folders"])
def test_a_view_holds_exactly_the_commits_tree_and_says_the_start(
    repo: Path, layout: Layout, plain: bool
) -> None:
    # Given: a start commit, and a later one that changes, removes and adds files (and, not
    # plain, adds a link, makes a file executable and a file a folder: git makes those)
    (repo / "keep.txt").write_text("keep\n")
    (repo / "change.txt").write_text("old\n")
    (repo / "gone.txt").write_text("gone\n")
    (repo / "tool.sh").write_text("echo hi\n")
    (repo / "becomes").write_text("a file\n")
    start = _commit(repo, "start")
    (repo / "change.txt").write_text("new\n")
    (repo / "gone.txt").unlink()
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "added.txt").write_text("added\n")
    if not plain:
        (repo / "link").symlink_to("keep.txt")
        (repo / "tool.sh").chmod(0o755)
        (repo / "becomes").unlink()
        (repo / "becomes").mkdir()
        (repo / "becomes" / "inside.txt").write_text("inside\n")
    commit = _commit(repo, "patch")
    attempt = layout.attempt("run1", "t.1")
    layout.create(attempt, start, "run1")  # the attempt stands on the start's pristine
    view = view_paths(layout, "run1", "t.1")

    # When
    make_view(layout, view, start, commit, "run1")

    # Then: the view's files are the commit's, every one, nothing else
    try:
        assert _files(view.tree) == _committed(repo, commit)
        # HEAD and the index are the start's: git in the view sees the change as modified files
        assert git(view.tree, "rev-parse", "HEAD") == start
        assert git(view.tree, "diff", "--quiet", "--cached", start, "--exit-code") == ""
        changed = git(view.tree, "diff", "--name-status").splitlines()
        assert "M\tchange.txt" in changed and "D\tgone.txt" in changed
        assert all(
            os.path.isdir(p) and not any(p.iterdir()) for p in (view.home, view.tmp, view.io)
        )
        assert view.root.parent.name == VIEWS
    finally:
        layout.remove(view)
        layout.remove(attempt)
    layout.tidy()
    assert not layout.run_folder("run1").exists()


def test_a_view_of_the_start_itself_is_its_plain_checkout(repo: Path, layout: Layout) -> None:
    # Given: a start commit with nothing changed since (a baseline's view)
    start = git(repo, "rev-parse", "HEAD")
    view = layout.baseline("b")

    # When
    make_view(layout, view, start, start, "run1")

    # Then
    try:
        assert _files(view.tree) == _committed(repo, start)
        assert git(view.tree, "status", "--porcelain", "--untracked-files=all") == ""
    finally:
        layout.remove(view)
    layout.tidy()
