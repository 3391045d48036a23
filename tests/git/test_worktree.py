"""Attempt folders outside the git directory: where they go, what is in them, who removes them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist import Workspace, load_plan, safeio
from orchardist.agents import KINDS, agent_class
from orchardist.confine import isolation, mounts
from orchardist.confine.attemptpaths import AttemptPaths
from orchardist.confine.homes import empty_home, fill_home, tool_homes
from orchardist.confine.layout import Layout
from orchardist.confine.paths import ROOT_VAR, repo_key, workdir_root
from orchardist.errors import PlanError
from orchardist.git.repo import Repo
from orchardist.runs.folders import recorded_run_folder
from orchardist.runs.gc import collect
from orchardist.safeio import remove_tree
from orchardist.state.records import RunState
from realtools import require
from run_support import leftovers, run_folder
from support import Finished, git, make_repo, toml_str, write_plan

RunPlan = Callable[..., Finished]


# -- where the root is ------------------------------------------------------------------------


def test_the_root_is_the_plan_key_then_the_variable_then_the_xdg_cache(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert workdir_root(None, {"HOME": env["HOME"]}) == tmp_path / "home" / ".cache" / "orchardist"
    assert workdir_root(None, env) == tmp_path / "xdg" / "orchardist"
    assert workdir_root(None, {**env, ROOT_VAR: str(tmp_path / "var")}) == tmp_path / "var"
    configured = tmp_path / "plan"
    assert workdir_root(configured, {**env, ROOT_VAR: str(tmp_path / "var")}) == configured


def test_a_repository_key_names_the_repository_and_differs_between_two_of_the_same_name(
    tmp_path: Path,
) -> None:
    one = make_repo(tmp_path / "a" / "proj")
    two = make_repo(tmp_path / "b" / "proj")

    key_one, key_two = repo_key(one / ".git"), repo_key(two / ".git")

    assert key_one.startswith("proj-") and key_two.startswith("proj-")
    assert key_one != key_two
    assert repo_key(one / ".git") == key_one  # stable


# -- what an attempt folder holds -------------------------------------------------------------


@pytest.fixture
def layout(repo: Path, tmp_path: Path) -> Layout:
    return Layout(Repo(repo), tmp_path / "root", tmp_path / "state")


def test_an_attempt_tree_is_checked_out_outside_the_git_directory_with_git_working_in_it(
    repo: Path, layout: Layout
) -> None:
    # Given: a fresh attempt folder at the repository's HEAD
    head = git(repo, "rev-parse", "HEAD")
    paths = layout.attempt("run1", "task.1")
    layout.create(paths, head, "run1")

    # Then: its files are the commit's, nowhere under the repository's git directory
    assert paths == AttemptPaths.under(layout.folder / "runs" / "run1" / "task.1")
    assert (paths.tree / "README.md").read_text() == "hello\n"
    assert not paths.root.resolve().is_relative_to((repo / ".git").resolve())
    assert all(p.is_dir() for p in paths.writable)
    # and git works inside it: clean status, HEAD at the base, a diff of an edit
    assert git(paths.tree, "status", "--porcelain") == ""
    assert git(paths.tree, "rev-parse", "HEAD") == head
    (paths.tree / "README.md").write_text("changed\n")
    assert "+changed" in git(paths.tree, "diff")


def test_commits_refs_and_config_written_inside_an_attempt_never_reach_the_users_repository(
    repo: Path, layout: Layout
) -> None:
    # Given: the user's objects, refs and config before
    def user_state() -> tuple[list[str], str, str]:
        objects = sorted(str(p) for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
        refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
        return objects, refs, (repo / ".git" / "config").read_text()

    before = user_state()
    paths = layout.attempt("run1", "task.1")
    layout.create(paths, git(repo, "rev-parse", "HEAD"), "run1")

    # When: the agent commits, tags, branches and configures inside its tree
    (paths.tree / "new.txt").write_text("new\n")
    git(paths.tree, "add", "new.txt")
    git(paths.tree, "commit", "-q", "-m", "agent commit")
    git(paths.tree, "tag", "sneaky")
    git(paths.tree, "branch", "sneaky")
    git(paths.tree, "config", "core.sneaky", "true")

    # Then: all of it is in the attempt's private git directory, nothing in the user's
    assert git(paths.tree, "log", "-1", "--format=%s") == "agent commit"
    assert user_state() == before
    assert (paths.git / "refs" / "tags" / "sneaky").exists()


def test_an_attempts_folders_are_removed_side_by_side_not_one_after_the_other(
    repo: Path, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: an attempt's folders, filled
    paths = layout.attempt("run1", "a.1")
    layout.create(paths, git(repo, "rev-parse", "HEAD"), "run1")
    (paths.tmp / "scratch").write_text("x")
    # and a removal of its home or tmp that waits (up to 10 s) for the other's to start
    both = threading.Barrier(2, timeout=10)
    met: list[Path] = []

    def removing(path: Path) -> None:
        if path in (paths.home, paths.tmp):
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
                met.append(path)
        remove_tree(path)

    monkeypatch.setattr(safeio, "remove_tree", removing)

    # When: the attempt is removed
    layout.remove(paths)

    # Then: home and tmp were being removed at the same time, and nothing of it is left
    assert sorted(met) == sorted([paths.home, paths.tmp])
    assert not paths.root.exists()


# -- overlays of a pristine checkout ------------------------------------------------------------


@pytest.fixture
def overlays(repo: Path, tmp_path: Path) -> Layout:
    mountable = mounts.enter() and mounts.probe(tmp_path / "probe")
    require(mountable, "overlays cannot be mounted here (no CAP_SYS_ADMIN, or tmp cannot be upper)")
    return Layout(Repo(repo), tmp_path / "root", tmp_path / "state", overlays=True)


def _commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


def _pristines(layout: Layout, run_id: str) -> list[Path]:
    return sorted((layout.run_folder(run_id) / "pristine").glob("*"))


def test_attempts_on_one_base_share_one_pristine_checkout_and_hold_only_their_changes(
    repo: Path, overlays: Layout
) -> None:
    # Given: two attempts on the repository's HEAD
    head = git(repo, "rev-parse", "HEAD")
    one, two = overlays.attempt("run1", "a.1"), overlays.attempt("run1", "b.1")
    overlays.create(one, head, "run1")
    overlays.create(two, head, "run1")

    # When: one of them edits a file, adds one and deletes one
    (one.tree / "README.md").write_text("changed\n")
    (one.tree / "new.txt").write_text("new\n")
    (one.tree / ".gitignore").unlink()

    # Then: both trees are overlays of a single pristine checkout, which nothing changed
    assert os.path.ismount(one.tree) and os.path.ismount(two.tree)
    [pristine] = _pristines(overlays, "run1")
    assert (pristine / "tree" / "README.md").read_text() == "hello\n"
    assert (pristine / "tree" / ".gitignore").exists()
    assert (two.tree / "README.md").read_text() == "hello\n"
    # the changes are in the first attempt's own folder, the rest of its files are not copied
    assert sorted(p.name for p in one.upper.iterdir()) == [
        ".git",
        ".gitignore",
        "README.md",
        "new.txt",
    ]
    assert sorted(p.name for p in two.upper.iterdir()) == [".git"]
    # their git directories are overlays of the pristine's: nothing copied until git writes
    assert os.path.ismount(one.git) and not any(one.git_layers[0].iterdir())
    # and git in the tree sees exactly the agent's changes
    status = {line.strip() for line in git(one.tree, "status", "--porcelain").splitlines()}
    assert status == {"D .gitignore", "M README.md", "?? new.txt"}
    assert git(two.tree, "status", "--porcelain") == ""
    # what git writes there goes to the attempt's own folder, never to the pristine's
    pristine_index = (pristine / "git" / "index").read_bytes()
    git(one.tree, "add", "-A")
    assert (one.git_layers[0] / "index").is_file()
    assert (pristine / "git" / "index").read_bytes() == pristine_index
    assert git(two.tree, "status", "--porcelain") == ""

    # When: both are removed: nothing is left mounted, and of each only its empty tree and git
    # folders (a bwrap starting meanwhile holds a copy of the mounts, and needs their paths)
    overlays.remove(one)
    overlays.remove(two)
    for paths in (one, two):
        assert not os.path.ismount(paths.tree) and not os.path.ismount(paths.git)
        assert sorted(paths.root.iterdir()) == [paths.git, paths.tree]
        assert not any(paths.tree.iterdir()) and not any(paths.git.iterdir())
    # and once the run is tidied, nothing at all
    overlays.tidy()
    assert not one.root.exists() and not two.root.exists()
    assert not (overlays.run_folder("run1") / "pristine").exists()


def test_an_unused_pristine_moves_to_the_next_base_and_a_used_one_never_changes(
    repo: Path, overlays: Layout
) -> None:
    # Given: an attempt on the first commit, still running
    first = git(repo, "rev-parse", "HEAD")
    running = overlays.attempt("run1", "a.1")
    overlays.create(running, first, "run1")
    second = _commit(repo, "README.md", "second\n")

    # When: an attempt starts on the second commit while the first is in use
    later = overlays.attempt("run1", "b.1")
    overlays.create(later, second, "run1")

    # Then: it gets a pristine of its own; the running attempt still sees the first commit
    assert len(_pristines(overlays, "run1")) == 2
    assert (running.tree / "README.md").read_text() == "hello\n"
    assert (later.tree / "README.md").read_text() == "second\n"

    # When: both end, and an attempt starts on a third commit
    overlays.remove(running)
    overlays.remove(later)
    third = _commit(repo, "other.txt", "third\n")
    last = overlays.attempt("run1", "c.1")
    overlays.create(last, third, "run1")

    # Then: an unused pristine was moved to it (no third one), with the third commit's files
    assert len(_pristines(overlays, "run1")) == 2
    assert (last.tree / "README.md").read_text() == "second\n"
    assert (last.tree / "other.txt").read_text() == "third\n"
    assert git(last.tree, "status", "--porcelain") == ""
    assert git(last.tree, "rev-parse", "HEAD") == third
    overlays.remove(last)
    overlays.tidy()


def test_the_run_end_removes_its_pristines_side_by_side_not_one_after_the_other(
    repo: Path, overlays: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: two pristines in a run (two attempts on two bases at once), both attempts ended
    first = overlays.attempt("run1", "a.1")
    overlays.create(first, git(repo, "rev-parse", "HEAD"), "run1")
    second = overlays.attempt("run1", "b.1")
    overlays.create(second, _commit(repo, "README.md", "second\n"), "run1")
    overlays.remove(first)
    overlays.remove(second)
    pristines = _pristines(overlays, "run1")
    assert len(pristines) == 2
    # and a removal that waits (up to 10 s) for the other pristine's to start before it ends
    both = threading.Barrier(2, timeout=10)
    met: list[Path] = []

    def removing(path: Path) -> None:
        if path in pristines:
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
                met.append(path)
        remove_tree(path)

    monkeypatch.setattr(safeio, "remove_tree", removing)

    # When: the run is tidied
    overlays.tidy()

    # Then: each pristine's removal was under way while the other's was; both are gone
    assert sorted(met) == pristines
    assert not (overlays.run_folder("run1") / "pristine").exists()


_JOIN_LATER = """
import os, sys, threading
from orchardist.confine import mounts
first = []
def made():
    first.append((mounts.enter(), os.readlink("/proc/thread-self/ns/mnt")))
thread = threading.Thread(target=made)
thread.start()
thread.join()
if not first[0][0]:
    sys.exit(3)
print(first[0][1], mounts.enter(), os.readlink("/proc/thread-self/ns/mnt"), mounts.usable())
"""


def test_a_thread_entering_after_another_made_the_namespace_joins_it(tmp_path: Path) -> None:
    # Given a process whose mount namespace was made by a thread that has ended since
    proc = subprocess.run([sys.executable, "-c", _JOIN_LATER], capture_output=True, text=True)
    require(proc.returncode != 3, "no private mount namespace here (no CAP_SYS_ADMIN)")
    # When its main thread enters too: it is in that same namespace, not left outside it
    made, entered, joined, usable = proc.stdout.split()
    assert (entered, usable) == ("True", "True"), proc.stderr
    assert joined == made
    assert made != os.readlink("/proc/self/ns/mnt")  # and it is not the host's


def test_without_overlays_each_attempt_has_a_full_checkout_of_its_own(
    repo: Path, layout: Layout
) -> None:
    paths = layout.attempt("run1", "a.1")
    layout.create(paths, git(repo, "rev-parse", "HEAD"), "run1")
    assert not os.path.ismount(paths.tree)
    assert not (layout.run_folder("run1") / "pristine").exists()
    assert (paths.tree / "README.md").read_text() == "hello\n"


def test_removing_an_attempt_removes_folders_the_agent_made_read_only(
    repo: Path, layout: Layout
) -> None:
    paths = layout.attempt("run1", "task.1")
    layout.create(paths, git(repo, "rev-parse", "HEAD"), "run1")
    locked = paths.tree / "locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0o500)
    paths.tree.chmod(0o500)

    layout.remove(paths)

    assert not paths.root.exists()
    remove_tree(paths.root)  # removing what is gone is fine


def test_a_run_folder_is_recorded_for_resume_and_gc_and_a_forged_record_is_ignored(
    repo: Path, layout: Layout, tmp_path: Path
) -> None:
    layout.create(layout.attempt("run1", "t.1"), git(repo, "rev-parse", "HEAD"), "run1")

    assert recorded_run_folder(layout.state_dir, "run1") == layout.run_folder("run1")
    (layout.state_dir / "workdirs" / "run2").write_text(f"{tmp_path}\n")
    assert recorded_run_folder(layout.state_dir, "run2") is None


# -- through a run ------------------------------------------------------------------------------

RECORD = 'echo "$ORCHARDIST_WORKTREE" > where.txt; git status --porcelain > status.txt'


def test_attempts_run_under_the_plans_workspace_and_leave_no_folder_behind(
    repo: Path, tmp_path: Path, run_plan: RunPlan
) -> None:
    # Given: a plan that puts its attempts in a folder beside the repository
    plan = write_plan(
        repo,
        f"""
        [run]
        workspace = "../attempts"

        [agents.sh]
        kind = "shell"
        command = {toml_str(RECORD)}

        [[task]]
        id = "t"
        """,
    )

    run = run_plan(plan)

    # Then: the agent worked in a tree there, git saw its new files, and the folders are gone
    assert run.state is RunState.DONE, run.doc
    root = (tmp_path / "attempts").resolve()
    where = Path(git(repo, "show", f"{run.run.branch}:where.txt"))
    assert where == root / repo_key(repo / ".git") / "runs" / run.run.id / "t.1" / "tree"
    assert "?? where.txt" in git(repo, "show", f"{run.run.branch}:status.txt")
    assert list(root.rglob("*")) == []
    assert leftovers(repo, run.run.id) == []


def test_by_default_attempts_run_under_the_users_cache(
    repo: Path, tmp_path: Path, run_plan: RunPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: neither the plan key nor the variable; HOME is a temporary folder (conftest)
    monkeypatch.delenv(ROOT_VAR)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(RECORD)}

        [[task]]
        id = "t"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    cache = Path(os.environ["HOME"]) / ".cache" / "orchardist"
    where = Path(git(repo, "show", f"{run.run.branch}:where.txt"))
    assert where.is_relative_to(cache.resolve())
    assert not (cache / repo_key(repo / ".git") / "runs" / run.run.id).exists()


def test_gc_removes_what_a_killed_run_left_in_its_attempt_folders(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run whose attempt folder was left behind (as by kill -9)
    plan = write_plan(
        repo,
        """
        [agents.sh]
        kind = "shell"
        command = "echo x > x.txt"

        [[task]]
        id = "t"
        """,
    )
    run = run_plan(plan)
    stray = run_folder(repo, run.run.id) / "t.1" / "tree"
    stray.mkdir(parents=True)
    (stray / "left.txt").write_text("left\n")

    # When: gc collects runs of any age
    ws = Workspace.open(repo)
    try:
        report = collect(ws, older_than_s=0)
    finally:
        ws.store.close()

    # Then: the folder is gone, and counted
    assert run.run.id in report["runs"]
    assert not run_folder(repo, run.run.id).exists()


# -- the plan key ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [("1", "expected"), ('""', "must not be empty"), ('"sub"', "inside the repository")],
)
def test_a_workspace_that_is_not_a_folder_outside_the_repository_is_a_plan_error(
    repo: Path, value: str, message: str
) -> None:
    plan = write_plan(repo, f'[run]\nworkspace = {value}\n\n[[task]]\nid = "t"\nverify = "true"\n')

    with pytest.raises(PlanError) as caught:
        load_plan(plan)

    assert message in str(caught.value)
    assert "run.workspace" in str(caught.value)


# -- the attempt's private HOME -----------------------------------------------------------------


def test_an_agent_kind_gets_its_state_folders_and_copies_of_its_files_from_the_real_home(
    repo: Path, layout: Layout, tmp_path: Path
) -> None:
    # Given: a real home with a credentials file, and an attempt
    real = tmp_path / "real-home"
    (real / ".tool").mkdir(parents=True)
    (real / ".tool" / "creds.json").write_text("secret")
    paths = layout.attempt("run1", "t.1")
    layout.create(paths, git(repo, "rev-parse", "HEAD"), "run1")

    # When: the home is filled for a kind that reads one present and one absent file
    copied = fill_home(paths, real, (".tool/creds.json", ".absent"), (".tool", ".local/share/x"))

    # Then: the present file is copied, the state folders exist, the real file is never written
    assert copied == [".tool/creds.json"]
    assert (paths.home / ".tool" / "creds.json").read_text() == "secret"
    assert (paths.home / ".local" / "share" / "x").is_dir()
    (paths.home / ".tool" / "creds.json").write_text("refreshed by the agent")
    assert (real / ".tool" / "creds.json").read_text() == "secret"
    empty_home(paths)
    assert list(paths.home.iterdir()) == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_agent_kind_declares_home_paths_inside_the_home(kind: str) -> None:
    cls = agent_class(kind)
    for name in (*cls.home_files, *cls.home_state):
        assert not name.startswith(("/", "~")) and ".." not in Path(name).parts, name
        assert Path(name).as_posix() == name


def test_toolchains_in_the_real_home_are_still_found_by_their_variables(tmp_path: Path) -> None:
    (tmp_path / ".rustup").mkdir()
    found = tool_homes({"PYENV_ROOT": "/opt/pyenv"}, tmp_path)
    assert found == {"RUSTUP_HOME": str(tmp_path / ".rustup"), "PYENV_ROOT": "/opt/pyenv"}


def test_an_agent_writes_its_home_and_tmp_in_the_attempt_and_verify_sees_neither(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: an agent that writes state into HOME and TMPDIR; verify checks they are gone
    real_home = Path(os.environ["HOME"])
    agent = (
        'echo state > "$HOME/.agent-state"; echo t > "$TMPDIR/t"; echo "$HOME|$TMPDIR" > where.txt'
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(agent)}

        [[task]]
        id = "t"
        verify = 'test ! -e "$HOME/.agent-state" && test -d "$HOME" && test -d "$TMPDIR"'
        """,
    )

    run = run_plan(plan)

    # Then: HOME and TMPDIR were the attempt's; the real home got nothing
    assert run.state is RunState.DONE, run.doc
    home, tmp = git(repo, "show", f"{run.run.branch}:where.txt").split("|")
    attempt = run_folder(repo, run.run.id) / "t.1"
    assert Path(home) == attempt / "home"
    # in namespaces the attempt's tmp folder is mounted on the private /tmp (TMPDIR=/tmp)
    assert Path(tmp) == (Path("/tmp") if isolation.probe().usable else attempt / "tmp")
    assert not (real_home / ".agent-state").exists()


@pytest.mark.parametrize("trap", ["fifo", "zero"])
def test_an_exclude_file_that_is_a_fifo_or_a_link_to_dev_zero_is_not_copied(
    repo: Path, tmp_path: Path, trap: str
) -> None:
    # Given: the repository's info/exclude replaced by a FIFO nobody writes, or by a link to
    # /dev/zero (without the sandbox, an agent can)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.unlink(missing_ok=True)
    if trap == "fifo":
        os.mkfifo(exclude)
    else:
        exclude.symlink_to("/dev/zero")
    layout = Layout(Repo(repo), tmp_path / "root", repo / ".git" / "orchardist")
    paths = layout.attempt("run", "job")

    # When
    layout.create(paths, git(repo, "rev-parse", "HEAD"))

    # Then: the attempt is made, without a copy of it
    assert (paths.tree / "README.md").read_text() == "hello\n"
    assert not (paths.git / "info" / "exclude").exists()


def test_the_repository_s_exclude_rules_are_copied_into_an_attempt(
    repo: Path, tmp_path: Path
) -> None:
    (repo / ".git" / "info" / "exclude").write_text("*.local\n")
    layout = Layout(Repo(repo), tmp_path / "root", repo / ".git" / "orchardist")
    paths = layout.attempt("run", "job")
    layout.create(paths, git(repo, "rev-parse", "HEAD"))
    assert (paths.git / "info" / "exclude").read_text() == "*.local\n"
