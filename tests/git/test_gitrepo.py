"""git plumbing on real repositories: snapshots, merges, ref compare-and-swap, worktrees."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchardist.errors import GitError
from orchardist.git.env import FALLBACK_EMAIL, FALLBACK_NAME
from orchardist.git.repo import Repo, commit_message
from orchardist.git.where import find_toplevel
from support import add_worktree, git, make_repo


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with text, binary and nested files, and ignore rules."""
    root = make_repo(
        tmp_path / "project",
        {
            ".gitignore": "__pycache__/\n*.log\n",
            "README.md": "hello\n",
            "src/app.py": "print('app')\n",
            "src/old_name.py": "def f():\n    return 1\n" * 20,
            "doomed.txt": "delete me\n",
        },
    )
    (root / "logo.bin").write_bytes(bytes(range(256)))
    git(root, "add", "logo.bin")
    git(root, "commit", "-qm", "add logo")
    return root


def worktree_at_head(repo: Repo, tmp_path: Path) -> tuple[Path, str]:
    base = repo.rev_parse("HEAD")
    worktree = add_worktree(repo.root, tmp_path / "worktrees" / "task-1", base)
    return worktree, base


def files_of(root: Path, commit: str) -> dict[str, bytes]:
    """Every file of ``commit`` and its bytes."""
    names = git(root, "ls-tree", "-r", "--name-only", "-z", commit).split("\0")
    return {name: blob(root, commit, name) for name in names if name}


def blob(root: Path, commit: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{path}"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout


def commit_on(root: Path, base: str, files: dict[str, str], message: str) -> str:
    """A commit on top of ``base`` changing ``files``, made without touching any checkout."""
    repo = Repo(root)
    scratch = root.parent / f"scratch-{message.replace(' ', '-')}"
    add_worktree(root, scratch, base)
    for name, text in files.items():
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_text(text)
    commit = repo.snapshot(scratch, base, message)
    repo.remove_worktree(scratch)
    return commit


# -- snapshot ----------------------------------------------------------------------------


def test_a_snapshot_captures_every_kind_of_change_on_disk(project: Path, tmp_path: Path) -> None:
    # Given a worktree where an agent modified, added, deleted, renamed and wrote binary files
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "README.md").write_text("hello, world\n")
    (worktree / "brand" / "new" / "deep").mkdir(parents=True)
    (worktree / "brand" / "new" / "deep" / "file.txt").write_text("new\n")
    (worktree / "doomed.txt").unlink()
    (worktree / "src" / "old_name.py").rename(worktree / "src" / "new_name.py")
    (worktree / "logo.bin").write_bytes(bytes(reversed(range(256))))
    (worktree / "data.bin").write_bytes(b"\x00\xff\x00binary\x00")

    # When it is snapshotted
    snap = repo.snapshot(worktree, base, "task 1\n")

    # Then the commit's files are exactly the files on disk, on top of the base
    before = files_of(project, base)
    assert files_of(project, snap) == {
        ".gitignore": before[".gitignore"],
        "README.md": b"hello, world\n",
        "brand/new/deep/file.txt": b"new\n",
        "src/app.py": before["src/app.py"],
        "src/new_name.py": before["src/old_name.py"],
        "logo.bin": bytes(reversed(range(256))),
        "data.bin": b"\x00\xff\x00binary\x00",
    }
    assert git(project, "rev-parse", f"{snap}^") == base
    assert git(project, "log", "-1", "--format=%s", snap) == "task 1"
    # and git sees the rename as one
    renames = git(project, "diff", "--name-status", "-M", base, snap)
    assert "R100\tsrc/old_name.py\tsrc/new_name.py" in renames.splitlines()


def test_a_snapshot_leaves_out_ignored_files(project: Path, tmp_path: Path) -> None:
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "src" / "__pycache__").mkdir()
    (worktree / "src" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\x00cache")
    (worktree / "run.log").write_text("noise\n")
    (worktree / "kept.txt").write_text("kept\n")

    snap = repo.snapshot(worktree, base, "task")

    assert repo.changed_files(base, snap) == ["kept.txt"]


def test_a_snapshot_of_an_untouched_worktree_has_the_base_tree(
    project: Path, tmp_path: Path
) -> None:
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    snap = repo.snapshot(worktree, base, "nothing")
    assert repo.tree_of(snap) == repo.tree_of(base)
    assert repo.changed_lines(base, snap) == 0


def test_a_snapshot_ignores_what_the_agent_did_to_its_own_index_and_head(
    project: Path, tmp_path: Path
) -> None:
    # Given an agent that committed one change itself, staged a file it then deleted,
    # unstaged a tracked file it kept, and left another change unstaged
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "committed.txt").write_text("the agent committed this\n")
    git(worktree, "add", "committed.txt")
    git(worktree, "commit", "-qm", "agent's own commit")
    (worktree / "staged-then-deleted.txt").write_text("gone\n")
    git(worktree, "add", "staged-then-deleted.txt")
    (worktree / "staged-then-deleted.txt").unlink()
    git(worktree, "rm", "-q", "--cached", "src/app.py")
    (worktree / "README.md").write_text("unstaged edit\n")
    agent_head = git(worktree, "rev-parse", "HEAD")

    # When it is snapshotted against the base
    snap = repo.snapshot(worktree, base, "task")

    # Then the snapshot is the base plus the files as they are on disk
    assert git(project, "rev-parse", f"{snap}^") == base
    assert sorted(repo.changed_files(base, snap)) == ["README.md", "committed.txt"]
    assert blob(project, snap, "src/app.py") == b"print('app')\n"
    # and the agent's own index and HEAD are left as the agent left them
    assert git(worktree, "rev-parse", "HEAD") == agent_head
    assert "D  src/app.py" in git(worktree, "status", "--porcelain").splitlines()


def test_a_snapshot_leaves_no_private_index_behind(project: Path, tmp_path: Path) -> None:
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    repo.snapshot(worktree, base, "task")
    assert sorted(p.name for p in worktree.parent.iterdir()) == ["task-1"]


def test_changed_lines_counts_added_and_removed_lines_and_binary_files_once(
    project: Path, tmp_path: Path
) -> None:
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "README.md").write_text("one\ntwo\n")  # 1 removed, 2 added
    (worktree / "logo.bin").write_bytes(b"\x00new")  # binary: 1
    snap = repo.snapshot(worktree, base, "task")
    assert repo.changed_lines(base, snap) == 4
    assert sorted(repo.changed_files(base, snap)) == ["README.md", "logo.bin"]


# -- merge_trees -------------------------------------------------------------------------


def test_changes_to_different_files_merge_cleanly(project: Path) -> None:
    # Given two tasks' commits on the same base, touching different files
    repo = Repo(project)
    base = repo.rev_parse("HEAD")
    ours = commit_on(project, base, {"README.md": "ours\n"}, "ours")
    theirs = commit_on(project, base, {"src/app.py": "print('theirs')\n"}, "theirs")

    # When they are merged
    result = repo.merge_trees(base, ours, theirs)

    # Then the tree holds both changes, and no checkout moved
    assert result.conflicts == ()
    assert result.tree is not None
    merged = repo.commit_tree(result.tree, [ours], "merged")
    assert blob(project, merged, "README.md") == b"ours\n"
    assert blob(project, merged, "src/app.py") == b"print('theirs')\n"
    assert git(project, "status", "--porcelain") == ""
    assert git(project, "rev-parse", "HEAD") == base


def test_edits_to_the_same_line_conflict_and_name_the_file(project: Path) -> None:
    repo = Repo(project)
    base = repo.rev_parse("HEAD")
    ours = commit_on(project, base, {"README.md": "ours\n", "a.txt": "a\n"}, "ours")
    theirs = commit_on(project, base, {"README.md": "theirs\n", "b.txt": "b\n"}, "theirs")

    result = repo.merge_trees(base, ours, theirs)

    assert result.tree is None
    assert result.conflicts == ("README.md",)


def test_a_merge_of_unknown_commits_raises_git_error(project: Path) -> None:
    repo = Repo(project)
    with pytest.raises(GitError):
        repo.merge_trees("HEAD", "HEAD", "0123456789abcdef0123456789abcdef01234567")


# -- refs --------------------------------------------------------------------------------


def test_update_ref_creates_a_ref_only_if_it_does_not_exist(project: Path) -> None:
    repo = Repo(project)
    head = repo.rev_parse("HEAD")
    first = repo.rev_parse("HEAD~1")
    assert repo.update_ref("refs/heads/run", head, None)
    assert not repo.update_ref("refs/heads/run", first, None)
    assert repo.rev_parse("refs/heads/run") == head


def test_update_ref_moves_a_ref_only_from_the_expected_commit(project: Path) -> None:
    # Given a run branch at the first commit
    repo = Repo(project)
    head, first = repo.rev_parse("HEAD"), repo.rev_parse("HEAD~1")
    repo.set_ref("refs/heads/run", first)

    # When a writer with a stale view tries to move it, it fails and nothing moves
    assert not repo.update_ref("refs/heads/run", head, head)
    assert repo.rev_parse("refs/heads/run") == first

    # When a writer with the current view moves it, it moves
    assert repo.update_ref("refs/heads/run", head, first)
    assert repo.rev_parse("refs/heads/run") == head


def test_refs_can_be_read_set_and_deleted(project: Path) -> None:
    repo = Repo(project)
    head = repo.rev_parse("HEAD")
    assert repo.try_rev_parse("refs/orchardist/x") is None
    repo.set_ref("refs/orchardist/x", head)
    assert repo.try_rev_parse("refs/orchardist/x") == head
    repo.delete_ref("refs/orchardist/x")
    repo.delete_ref("refs/orchardist/x")  # twice is fine
    assert repo.try_rev_parse("refs/orchardist/x") is None
    with pytest.raises(GitError):
        repo.rev_parse("refs/orchardist/x")


def test_is_ancestor(project: Path) -> None:
    repo = Repo(project)
    assert repo.is_ancestor("HEAD~1", "HEAD")
    assert not repo.is_ancestor("HEAD", "HEAD~1")


# -- worktrees ---------------------------------------------------------------------------


def test_removing_a_worktree_deletes_it_and_git_forgets_it(project: Path, tmp_path: Path) -> None:
    repo = Repo(project)
    worktree = add_worktree(project, tmp_path / "wt" / "a", repo.rev_parse("HEAD"))
    (worktree / "dirty.txt").write_text("uncommitted\n")

    repo.remove_worktree(worktree)

    assert not worktree.exists()
    assert [p.resolve() for p in repo.worktrees()] == [project.resolve()]


def test_a_worktree_whose_folder_was_deleted_can_be_removed_and_git_forgets_it(
    project: Path, tmp_path: Path
) -> None:
    # Given a worktree that an agent deleted outright
    repo = Repo(project)
    worktree = add_worktree(project, tmp_path / "wt" / "a", repo.rev_parse("HEAD"))
    shutil.rmtree(worktree)

    # When it is removed, git forgets it
    repo.remove_worktree(worktree)
    assert [p.resolve() for p in repo.worktrees()] == [project.resolve()]


def test_the_main_checkout_is_never_touched(project: Path, tmp_path: Path) -> None:
    # Given a user with uncommitted work in the main checkout
    (project / "README.md").write_text("user's edit\n")
    status = ("status", "--porcelain=v1", "--untracked-files=all")
    before = git(project, *status)

    # When worktrees are added, snapshotted, merged and removed
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "x.txt").write_text("x\n")
    snap = repo.snapshot(worktree, base, "task")
    repo.merge_trees(base, base, snap)
    repo.update_ref("refs/heads/orchardist/run", snap, None)
    repo.remove_worktree(worktree)

    # Then the user's checkout is as it was
    assert git(project, *status) == before
    assert (project / "README.md").read_text() == "user's edit\n"
    assert git(project, "rev-parse", "HEAD") == base


# -- identity ----------------------------------------------------------------------------


def test_commits_are_made_by_orchardist_when_git_has_no_identity(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given no global or system config, and a repository that refuses to guess an identity
    empty_home = tmp_path / "empty-home"
    empty_home.mkdir()
    monkeypatch.setenv("HOME", str(empty_home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("EMAIL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("GIT_COMMITTER_EMAIL", raising=False)
    git(project, "config", "user.useConfigOnly", "true")
    with pytest.raises(subprocess.CalledProcessError):  # plain git cannot commit here
        git(project, "commit", "--allow-empty", "-qm", "no identity")

    # When orchardist snapshots a worktree
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "x.txt").write_text("x\n")
    snap = repo.snapshot(worktree, base, "task")

    # Then the commit is authored and committed by orchardist
    who = git(project, "log", "-1", "--format=%an <%ae>|%cn <%ce>", snap)
    assert who == f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>|{FALLBACK_NAME} <{FALLBACK_EMAIL}>"


def test_commits_keep_the_user_s_identity_when_git_has_one(project: Path) -> None:
    repo = Repo(project)
    commit = repo.commit_tree(repo.tree_of("HEAD"), [repo.rev_parse("HEAD")], "same tree")
    assert git(project, "log", "-1", "--format=%an <%ae>", commit) == "Test User <test@example.com>"


def test_a_repo_set_up_to_read_still_commits_as_the_user(project: Path) -> None:
    # Given a repository set up for reading only (no identity asked of git)
    reader = Repo(project, identity=False)

    # When it commits
    commit = reader.commit_tree(reader.tree_of("HEAD"), [reader.rev_parse("HEAD")], "same")

    # Then the commit carries the user's identity, as one a full repository makes
    who = git(project, "log", "-1", "--format=%an <%ae>|%cn <%ce>", commit)
    assert who == "Test User <test@example.com>|Test User <test@example.com>"
    assert reader.identity() == Repo(project).identity()


# -- small helpers -----------------------------------------------------------------------


def test_find_toplevel_finds_the_root_from_a_subfolder_or_returns_none(
    project: Path, tmp_path: Path
) -> None:
    assert find_toplevel(project / "src") == project.resolve()
    outside = tmp_path / "outside"
    outside.mkdir()
    assert find_toplevel(outside) is None


def test_a_repo_outside_git_raises_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError):
        Repo(tmp_path)


def test_commit_messages_carry_trailers_that_git_can_read_back(project: Path) -> None:
    # Given a commit whose message carries orchardist trailers
    repo = Repo(project)
    base = repo.rev_parse("HEAD")
    message = commit_message("Add the parser", {"Task": "parse", "Attempt": 2})
    commit = repo.commit_tree(repo.tree_of(base), [base], message)

    # Then the message reads as expected, and git finds the trailers
    assert message == "Add the parser\n\nOrchardist-Task: parse\nOrchardist-Attempt: 2\n"
    trailers = git(project, "log", "-1", "--format=%(trailers:only,unfold)", commit)
    assert trailers.splitlines() == ["Orchardist-Task: parse", "Orchardist-Attempt: 2"]
    assert commit_message("  ", {}) == "orchardist task\n\n"


# -- the in-process fast paths: loose commits and the loose-ref compare-and-swap ------------


def test_commits_written_in_process_are_ones_git_reads_and_verifies(project: Path) -> None:
    # Given: a repository where commits may be written without git (SHA-1, no signing)
    repo = Repo(project)
    assert repo._native is not None
    head = git(project, "rev-parse", "HEAD")
    tree = repo.tree_of(head)

    # When: a commit is written in-process
    commit = repo.commit_tree(tree, [head], commit_message("Native", {"Task": "t"}))

    # Then: git reads it back as an ordinary commit, and fsck finds nothing wrong
    assert git(project, "cat-file", "-t", commit) == "commit"
    assert git(project, "rev-parse", f"{commit}^{{tree}}") == tree
    assert git(project, "rev-parse", f"{commit}^") == head
    assert git(project, "log", "-1", "--format=%s%n%an", commit) == "Native\nTest User"
    assert (
        "error"
        not in subprocess.run(
            ["git", "fsck", "--strict"], cwd=project, capture_output=True, text=True
        ).stderr
    )


@pytest.mark.parametrize(
    "name", ["Ada Lovelace", "  Ada Lovelace.  ", "Dr. O'Neil, Jr.", "José Ñandú"]
)
def test_the_identity_is_what_git_var_prints_for_the_repository(project: Path, name: str) -> None:
    # Given: a user name git trims when it writes an identity (leading and trailing "crud")
    git(project, "config", "user.name", name)
    git(project, "config", "user.email", "ada@example.com")
    repo = Repo(project)
    for role in ("AUTHOR", "COMMITTER"):
        # When: orchardist reads the identity it commits with, without running git again
        got = repo.identity(role)
        # Then: it is exactly the one git itself would write
        ident = git(project, "var", f"GIT_{role}_IDENT").rsplit(" ", 2)[0]
        assert f"{got[0]} <{got[1]}>" == ident
    assert repo._native == (ident, ident)


def test_commit_signing_sends_commits_through_git(project: Path) -> None:
    git(project, "config", "commit.gpgSign", "true")
    assert Repo(project)._native is None


def test_the_loose_ref_compare_and_swap_moves_only_from_the_expected_commit_and_logs_it(
    project: Path,
) -> None:
    # Given: a branch at HEAD, created through git (so it has a reflog)
    repo = Repo(project)
    head = git(project, "rev-parse", "HEAD")
    repo.update_ref("refs/heads/run", head, None)
    child = repo.commit_tree(repo.tree_of(head), [head], "child\n")

    # When / Then: a wrong expectation changes nothing; the right one moves it, logged as ours
    assert not repo.update_ref("refs/heads/run", child, child)
    assert git(project, "rev-parse", "run") == head
    assert repo.update_ref("refs/heads/run", child, head)
    assert git(project, "rev-parse", "run") == child
    assert git(project, "reflog", "show", "--format=%gs", "run").splitlines() == [
        "orchardist",
        "orchardist",
    ]
    assert not (project / ".git" / "refs" / "heads" / "run.lock").exists()


def test_a_locked_or_packed_ref_is_left_to_git(project: Path) -> None:
    repo = Repo(project)
    head = git(project, "rev-parse", "HEAD")
    repo.update_ref("refs/heads/run", head, None)
    child = repo.commit_tree(repo.tree_of(head), [head], "child\n")
    lock = project / ".git" / "refs" / "heads" / "run.lock"

    # A lock someone else holds: git refuses too, and the lock is not ours to remove
    lock.write_text("")
    assert not repo.update_ref("refs/heads/run", child, head)
    assert lock.exists()
    lock.unlink()

    # A packed ref: git moves it
    git(project, "pack-refs", "--all")
    assert not (project / ".git" / "refs" / "heads" / "run").exists()
    assert repo.update_ref("refs/heads/run", child, head)
    assert git(project, "rev-parse", "run") == child


# -- patch_problems ----------------------------------------------------------------------


def test_only_symlinks_a_patch_makes_are_judged_not_the_users_own(
    project: Path, tmp_path: Path
) -> None:
    # Given a base that already holds the user's own link out of the repository
    (project / "docs").symlink_to("/usr/share/doc")
    git(project, "add", "docs")
    git(project, "commit", "-qm", "user's link")
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)

    # When one patch adds an ordinary file and another adds a link out as well
    (worktree / "plain.txt").write_text("plain\n")
    plain = repo.snapshot(worktree, base, "plain")
    (worktree / "out").symlink_to("../../elsewhere")
    linked = repo.snapshot(worktree, base, "linked")

    # Then only the link the patch made is refused
    assert repo.patch_problems(base, plain, None) == []
    assert repo.patch_problems(base, linked, None) == [
        "out is a symlink pointing outside the repository"
    ]


def test_files_over_the_limit_are_named_with_their_size(project: Path, tmp_path: Path) -> None:
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "big.bin").write_bytes(b"\0" * 3 * 1024 * 1024)
    (worktree / "small.txt").write_text("small\n")
    (worktree / "doomed.txt").unlink()
    snap = repo.snapshot(worktree, base, "task")
    assert repo.patch_problems(base, snap, 2 * 1024 * 1024) == [
        "big.bin is 3.0 MiB, over the 2 MiB limit (max_patch_mb)"
    ]
    assert repo.patch_problems(base, snap, 4 * 1024 * 1024) == []


def test_the_users_global_excludes_file_still_keeps_files_out_of_a_snapshot_unless_it_is_a_fifo(
    project: Path, tmp_path: Path
) -> None:
    # Given: a global excludes file, named in ~/.gitconfig (which orchardist's git never reads)
    home = Path.home()
    (home / "ignore").write_text("*.swp\n")
    with (home / ".gitconfig").open("a") as fh:
        fh.write("[core]\n\texcludesFile = ~/ignore\n")
    repo = Repo(project)
    worktree, base = worktree_at_head(repo, tmp_path)
    (worktree / "notes.swp").write_text("editor swap\n")
    (worktree / "kept.txt").write_text("kept\n")

    # When / Then: the snapshot leaves out what the user ignores everywhere
    snap = repo.snapshot(worktree, base, "task")
    assert repo.changed_files(base, snap) == ["kept.txt"]

    # and when the excludes file is a FIFO, orchardist does not hand it to git (which would
    # wait on it for good): the snapshot is taken, the file just is not excluded
    (home / "ignore").unlink()
    os.mkfifo(home / "ignore")
    repo = Repo(project)
    snap = repo.snapshot(worktree, base, "task")
    assert sorted(repo.changed_files(base, snap)) == ["kept.txt", "notes.swp"]
