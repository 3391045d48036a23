"""A checkout moved to the next commit by orchardist (indexfile.py) ends exactly as git's own
``read-tree -m -u`` leaves it: the same files, modes and index entries, and a clean status."""

from __future__ import annotations

import os
import stat
import zlib
from itertools import pairwise
from pathlib import Path

import pytest

from orchardist.git.indexfile import IndexFile, advance, write_changes
from orchardist.git.repo import Repo
from support import git, make_repo


def _commit(repo: Path, write: dict[str, str | None], executable: tuple[str, ...] = ()) -> str:
    """Commit ``write`` (path: text, or None: delete) and the executable bits asked."""
    for name, text in write.items():
        if text is None:
            git(repo, "rm", "-q", name)
            continue
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    for name in executable:
        (repo / name).chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "step")
    return git(repo, "rev-parse", "HEAD")


def _checkout(repo: Path, folder: Path, commit: str) -> tuple[Path, Path]:
    """A checkout of ``commit`` by git (``read-tree --reset -u``), as a pristine starts."""
    gitdir, tree = folder / "git", folder / "tree"
    tree.mkdir(parents=True)
    git(repo, "init", "-q", "--bare", str(gitdir))
    (gitdir / "objects" / "info" / "alternates").write_text(f"{repo / '.git' / 'objects'}\n")
    git(repo, f"--git-dir={gitdir}", f"--work-tree={tree}", "read-tree", "--reset", "-u", commit)
    return gitdir, tree


def _files(tree: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file and folder under ``tree``: its bytes (folders: b"/") and executable bit."""
    found = {}
    for folder, dirs, files in os.walk(tree):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), tree)] = (b"/", False)
        for name in files:
            path = Path(folder, name)
            executable = bool(path.stat().st_mode & stat.S_IXUSR)
            found[str(path.relative_to(tree))] = (path.read_bytes(), executable)
    return found


def _git_in(gitdir: Path, tree: Path, *args: str) -> str:
    return git(tree, f"--git-dir={gitdir}", f"--work-tree={tree}", *args)


STEPS: list[tuple[dict[str, str | None], tuple[str, ...]]] = [
    ({"src/new.py": "new\n", "top.txt": "changed\n"}, ()),  # a file added, one changed
    ({"run.sh": "#!/bin/sh\n"}, ("run.sh",)),  # an executable file added
    ({"src/a.py": None, "deep/er/x.txt": None}, ()),  # removed; deep/er/ left empty
    ({"run.sh": "#!/bin/sh\necho\n", "src/a2.py": "a2\n"}, ()),  # executable file changed
    ({"docs/one.md": "1\n", "docs/two.md": "2\n", "top.txt": None}, ("docs/one.md",)),
]


def test_moving_a_checkout_commit_by_commit_matches_git_s_two_way_read_tree(
    tmp_path: Path,
) -> None:
    # Given a repository and a series of commits that add, change and remove files, change
    # executable bits and empty folders, and two checkouts of its first commit
    repo = make_repo(
        tmp_path / "repo",
        {"top.txt": "top\n", "src/a.py": "a\n", "src/b.py": "b\n", "deep/er/x.txt": "x\n"},
    )
    commits = [git(repo, "rev-parse", "HEAD")]
    commits += [_commit(repo, write, executable) for write, executable in STEPS]
    ours_git, ours = _checkout(repo, tmp_path / "ours", commits[0])
    theirs_git, theirs = _checkout(repo, tmp_path / "theirs", commits[0])
    index = IndexFile.parse((ours_git / "index").read_bytes())
    assert index is not None

    for old, new in pairwise(commits):
        # When orchardist moves one to the next commit, and git the other
        data = advance(Repo(repo), ours, index, old, new)
        assert data is not None
        (ours_git / "index").write_bytes(data)
        _git_in(theirs_git, theirs, "read-tree", "-m", "-u", old, new)

        # Then the files, their bits and the folders are the same as git's, and the index
        # has the new commit's entries with the stat of the files: git sees no change
        assert _files(ours) == _files(theirs)
        assert _git_in(ours_git, ours, "ls-files", "-s") == _git_in(
            theirs_git, theirs, "ls-files", "-s"
        )
        assert _git_in(ours_git, ours, "diff-files", "--name-only") == ""
        assert _git_in(ours_git, ours, "diff-index", "--name-only", new) == ""
        (ours_git / "HEAD").write_text(f"{new}\n")
        assert _git_in(ours_git, ours, "status", "--porcelain") == ""

    assert not (ours / "deep").exists()  # its last file removed, the folders went too
    # and an edit made afterwards is seen by git through the index orchardist wrote
    (ours / "run.sh").write_text("edited\n")
    assert _git_in(ours_git, ours, "diff-files", "--name-only") == "run.sh"


@pytest.mark.parametrize(
    ("write", "why"),
    [
        ({"link": None}, "a symlink"),
        ({".gitattributes": "*.txt eol=crlf\n"}, "attributes could convert files on checkout"),
        ({"top.txt": None, "top.txt/inner": "x\n"}, "a file becomes a folder"),
        ({"src/a.py": None, "src": "now a file\n"}, "a folder becomes a file"),
    ],
)
def test_a_move_orchardist_does_not_do_is_left_to_git_and_changes_nothing(
    tmp_path: Path, write: dict[str, str | None], why: str
) -> None:
    # Given a checkout of a commit, and a next commit with what the module leaves to git
    repo = make_repo(tmp_path / "repo", {"top.txt": "top\n", "src/a.py": "a\n"})
    old = git(repo, "rev-parse", "HEAD")
    if "link" in write:
        os.symlink("top.txt", repo / "link")
        write = {}
    new = _commit(repo, write)
    gitdir, tree = _checkout(repo, tmp_path / "pristine", old)
    before = (gitdir / "index").read_bytes(), _files(tree)
    index, unchanged = IndexFile.parse(before[0]), IndexFile.parse(before[0])
    assert index is not None and unchanged is not None

    # When orchardist is asked to move it: it declines, and neither the files nor the
    # index file changed (git's read-tree then does the move)
    assert advance(Repo(repo), tree, index, old, new) is None, why
    assert ((gitdir / "index").read_bytes(), _files(tree)) == before
    assert index.to_bytes() == unchanged.to_bytes()


def test_an_index_with_attributes_in_the_tree_or_not_version_2_is_left_to_git(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "sub/.gitattributes": "* -text\n"})
    gitdir, _ = _checkout(repo, tmp_path / "pristine", git(repo, "rev-parse", "HEAD"))
    index = IndexFile.parse((gitdir / "index").read_bytes())
    assert index is not None and index.attributes
    git(repo, f"--git-dir={gitdir}", "update-index", "--index-version", "4")
    assert IndexFile.parse((gitdir / "index").read_bytes()) is None


def test_loose_blobs_are_read_without_git_only_when_they_hash_to_their_id(
    tmp_path: Path,
) -> None:
    # Given: a move that adds two files; an objects folder holding one of their blobs (moved
    # out of the repository: only there) and, under the other's id, a forged object
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    old = git(repo, "rev-parse", "HEAD")
    new = _commit(repo, {"real.txt": "real\n", "forged.txt": "the truth\n"})
    gitdir, tree = _checkout(repo, tmp_path / "checkout", old)
    index = IndexFile.parse((gitdir / "index").read_bytes())
    assert index is not None
    loose = tmp_path / "loose"
    real = git(repo, "rev-parse", f"{new}:real.txt")
    (loose / real[:2]).mkdir(parents=True)
    (repo / ".git" / "objects" / real[:2] / real[2:]).rename(loose / real[:2] / real[2:])
    forged = git(repo, "rev-parse", f"{new}:forged.txt")
    (loose / forged[:2]).mkdir(exist_ok=True)
    (loose / forged[:2] / forged[2:]).write_bytes(zlib.compress(b"blob 6\0a lie\n"))

    # When
    moved = write_changes(Repo(repo), tree, index, old, new, loose=loose)

    # Then: both files hold the commit's bytes: the blob only in the folder was read from
    # there, and the forged object was not believed (git read the real one)
    assert moved
    assert (tree / "real.txt").read_text() == "real\n"
    assert (tree / "forged.txt").read_text() == "the truth\n"
