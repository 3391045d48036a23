"""How many git processes orchardist starts: counted by a logging ``git`` first on PATH (one line
per process it starts), for real commands run as a user runs them, and for the identity a
repository is set up with. Each bound is the count measured when it was set: a question asked
twice in one command (where the repository is, who commits) makes it fail."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchardist.git import env as git_env_module
from orchardist.git import repo as git_repo_module
from orchardist.git.env import GIT
from orchardist.git.repo import Repo
from support import git, make_repo, write_plan

ONE_TASK = """
[agents.sh]
kind = "shell"
command = "echo {task} > {task}.txt"

[[task]]
id = "hello"
verify = "test -f hello.txt"
"""

REVIEWED = """
[run]
review = "human"

[agents.sh]
kind = "shell"
command = "echo {task} > {task}.txt"

[[task]]
id = "a"
verify = "test -f a.txt"
"""


class GitLog:
    """A folder holding a ``git`` that logs its arguments, one line per process, then runs the
    real one."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.bin = folder
        self.log = folder / "calls.log"
        script = folder / "git"
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{self.log}"\nexec {GIT} "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def calls(self) -> list[str]:
        """The git processes started since the last call, and forget them."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines

    def cli(self, repo: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        """``orchardist ARGS`` as a new interpreter in ``repo`` with the logging git first on
        PATH (it resolves git once, at start), and the git processes it started."""
        self.calls()
        env = {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}"}
        done = subprocess.run(
            [sys.executable, "-m", "orchardist", *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done, self.calls()


@pytest.fixture
def logged(tmp_path: Path) -> GitLog:
    return GitLog(tmp_path / "logging-git")


def answer(repo: Path, *args: str) -> str:
    """What git prints for ``args`` in ``repo``, whatever its exit code."""
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def asked(calls: list[str], *words: str) -> int:
    """How many of ``calls`` ran git with ``words`` (after any ``-C PATH``)."""
    wanted = " ".join(words)
    return sum(1 for c in calls if c.removeprefix("-C ").partition(" ")[2].startswith(wanted)
               or c.startswith(wanted))  # fmt: skip


def test_a_one_task_run_asks_git_each_question_once(tmp_path: Path, logged: GitLog) -> None:
    # Given a repository with a committed one-task plan
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, ONE_TASK, commit=True)

    # When it runs to its end
    done, calls = logged.cli(repo, "run", "plan.toml")

    # Then the task's file is on the run branch
    assert done.returncode == 0, done.stdout + done.stderr
    branch = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/orchardist/")
    assert git(repo, "show", f"{branch}:hello.txt") == "hello"
    # and where the repository is, its git folder, its base and who commits were each asked
    # of git once (the checks and the run share one set-up)
    assert sum("--show-toplevel" in c for c in calls) == 1, calls
    assert sum("--git-common-dir" in c for c in calls) == 1, calls
    assert sum("HEAD^{commit}" in c for c in calls) == 1, calls
    assert asked(calls, "var") == 1, calls
    # and the user's config once (signing too), the patch's diff once (its lines too)
    assert asked(calls, "config") == 1, calls
    assert asked(calls, "diff", "--no-ext-diff") == 1, calls
    assert asked(calls, "rev-parse", "-q", "--verify", "HEAD") == 0, calls  # HEAD's on main
    assert len(calls) <= 21, "\n".join(calls)

    # When its old runs are collected
    done, calls = logged.cli(repo, "gc")

    # Then git was asked where the repository is once, and nobody's identity
    assert done.returncode == 0, done.stdout + done.stderr
    assert asked(calls, "rev-parse", "--path-format=absolute", "--show-toplevel") == 1, calls
    assert len(calls) <= 5, "\n".join(calls)


def test_review_commands_ask_no_identity_of_git(tmp_path: Path, logged: GitLog) -> None:
    # Given a run whose task awaits review
    repo = make_repo(tmp_path / "repo")
    write_plan(repo, REVIEWED, commit=True)
    ran = subprocess.run(
        [sys.executable, "-m", "orchardist", "run", "plan.toml"],
        cwd=repo, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 3, ran.stdout + ran.stderr
    run_id = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/orchardist/")
    run_id = run_id.removeprefix("orchardist/")

    # When the patch is listed, shown and approved
    listed, list_calls = logged.cli(repo, "review")
    shown, show_calls = logged.cli(repo, "review", run_id, "a", "--diff")
    approved, approve_calls = logged.cli(repo, "review", run_id, "a", "--approve")

    # Then each did its work
    assert f"{run_id} a " in listed.stdout, listed.stdout + listed.stderr
    assert "+a" in shown.stdout.splitlines(), shown.stdout + shown.stderr
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "decided: approve by" in logged.cli(repo, "review")[0].stdout
    # with three git processes each: where the repository is, its facts, the diff
    for calls in (list_calls, show_calls, approve_calls):
        assert asked(calls, "var") == 0 and asked(calls, "config") == 0, calls
        assert len(calls) <= 3, "\n".join(calls)


@pytest.fixture
def logged_in_process(logged: GitLog, monkeypatch: pytest.MonkeyPatch) -> GitLog:
    """The logging git as the one this process's orchardist runs to set up and drive a
    repository."""
    monkeypatch.setattr(git_env_module, "GIT", str(logged.bin / "git"))
    monkeypatch.setattr(git_repo_module, "GIT", str(logged.bin / "git"))
    return logged


def test_one_git_var_tells_both_identities_when_no_role_is_configured(
    tmp_path: Path, logged_in_process: GitLog
) -> None:
    # Given a repository whose git has one identity for every role
    project = make_repo(tmp_path / "project")

    # When orchardist sets it up, then commits
    repo = Repo(project)
    calls = logged_in_process.calls()
    commit = repo.commit_tree(repo.tree_of("HEAD"), [repo.rev_parse("HEAD")], "same tree")

    # Then git was asked once, and the commit is the user's as author and committer
    assert [c for c in calls if c.startswith("var ")] == ["var GIT_AUTHOR_IDENT"]
    who = git(project, "log", "-1", "--format=%an <%ae>|%cn <%ce>", commit)
    assert who == "Test User <test@example.com>|Test User <test@example.com>"


@pytest.mark.parametrize(
    "setting", ["committer.name", "committer.email", "author.name", "author.email"]
)
def test_a_role_s_own_setting_is_honoured_by_asking_git_for_each_role(
    tmp_path: Path, logged_in_process: GitLog, setting: str
) -> None:
    # Given a repository whose git has a setting for one role only (in an included file)
    project = make_repo(tmp_path / "project")
    value = "role@example.com" if setting.endswith("email") else "Role Person"
    included = tmp_path / "roles.gitconfig"
    git(project, "config", "-f", str(included), setting, value)
    git(project, "config", "include.path", str(included))

    # When orchardist sets it up, then commits
    repo = Repo(project)
    calls = logged_in_process.calls()
    commit = repo.commit_tree(repo.tree_of("HEAD"), [repo.rev_parse("HEAD")], "same tree")

    # Then each role's identity is the one git itself gives it
    assert sorted(c for c in calls if c.startswith("var ")) == [
        "var GIT_AUTHOR_IDENT",
        "var GIT_COMMITTER_IDENT",
    ]
    for role, fmt in (("AUTHOR", "%an <%ae>"), ("COMMITTER", "%cn <%ce>")):
        ident = git(project, "var", f"GIT_{role}_IDENT").rsplit(" ", 2)[0]
        assert git(project, "log", "-1", f"--format={fmt}", commit) == ident
    assert value in git(project, "log", "-1", "--format=%an %ae %cn %ce", commit)


@pytest.mark.parametrize(
    ("where", "line", "signs"),
    [
        ("repository", "gpgSign = true", True),
        ("repository", "gpgSign", True),  # a key without a value is true
        ("included", "gpgSign = yes", True),
        ("repository", "gpgSign = off", False),
        ("global", "gpgSign = true", False),  # orchardist's git reads no global config
    ],
)
def test_commit_signing_is_told_by_the_set_up_s_read_of_the_config(
    tmp_path: Path, logged_in_process: GitLog, where: str, line: str, signs: bool
) -> None:
    # Given a repository whose config (or an included file, or the global one) sets signing
    project = make_repo(tmp_path / "project")
    files = {
        "repository": project / ".git" / "config",
        "included": tmp_path / "signing.gitconfig",
        "global": Path(os.environ["HOME"]) / ".gitconfig",
    }
    with files[where].open("a") as fh:
        fh.write(f"[commit]\n\t{line}\n")
    if where == "included":
        git(project, "config", "include.path", str(files["included"]))

    # When orchardist sets it up and decides how it would commit
    repo = Repo(project)
    native = repo._native
    calls = logged_in_process.calls()

    # Then git's own answer decides, and no git process beyond the set-up's asked it
    assert (native is None) == signs
    plain = git(project, "config", "--bool", "commit.gpgSign") if where != "global" else ""
    assert (plain == "true") == signs
    assert not [c for c in calls if c.startswith("config --bool")], calls


def test_a_signing_value_not_plainly_spelled_is_asked_of_git(
    tmp_path: Path, logged_in_process: GitLog
) -> None:
    # Given a repository whose config sets signing with a number git reads as true
    project = make_repo(tmp_path / "project")
    git(project, "config", "commit.gpgSign", "2k")
    assert git(project, "config", "--bool", "commit.gpgSign") == "true"

    # When orchardist sets it up and decides how it would commit
    repo = Repo(project)
    native = repo._native

    # Then git was asked, and commits go through git (which signs them)
    assert native is None
    assert "config --bool commit.gpgSign" in logged_in_process.calls()


def test_the_guard_reads_head_s_commit_from_its_branch_s_listing(
    tmp_path: Path, logged_in_process: GitLog
) -> None:
    # Given a checkout on a branch
    project = make_repo(tmp_path / "project")
    repo = Repo(project)
    states = {}
    for state in ("on a branch", "detached", "on an unborn branch", "on a branch again"):
        if state == "detached":
            git(project, "checkout", "-q", "--detach")
        elif state == "on an unborn branch":
            git(project, "symbolic-ref", "HEAD", "refs/heads/unborn")
        elif state == "on a branch again":
            git(project, "symbolic-ref", "HEAD", "refs/heads/main")
        logged_in_process.calls()

        # When the guard takes its fingerprint
        head = repo.checkout_fingerprint()["HEAD"]
        calls = logged_in_process.calls()

        # Then HEAD's part is what git itself says of HEAD
        named = answer(project, "symbolic-ref", "-q", "HEAD")
        commit = answer(project, "rev-parse", "-q", "--verify", "HEAD")
        assert head == f"{named} {commit}", state
        # and git was asked for HEAD's commit only where no listed branch tells it
        asked_head = [c for c in calls if c.startswith("rev-parse")]
        assert len(asked_head) == (state in ("detached", "on an unborn branch")), (state, calls)
        states[state] = head
    assert len(set(states.values())) == 3  # each state told apart; the first and last alike
    assert states["on a branch"] == states["on a branch again"]


def test_the_dashboard_opens_its_repository_with_two_git_processes(
    tmp_path: Path, logged_in_process: GitLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchardist.git import where
    from orchardist.web.reads import Reads
    from orchardist.web.serve import settings_for

    # Given a repository, and its commit
    project = make_repo(tmp_path / "project")
    head = git(project, "rev-parse", "HEAD")
    monkeypatch.setattr(where, "GIT", str(logged_in_process.bin / "git"))
    logged_in_process.calls()

    # When the dashboard's settings and reads are made for it (from a subfolder)
    (project / "sub").mkdir()
    settings = settings_for(project / "sub", "127.0.0.1", 8000, "token")
    reads = Reads(settings)
    calls = logged_in_process.calls()

    # Then they name its store and read its commits
    common = Path(git(project, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert settings.store_path == common / "orchardist" / "state.db"
    assert settings.repo_root == project.resolve()
    assert reads.repo.git("diff", "--stat", head, head) == ""
    # with two git processes: where it is, and the reader's facts
    assert len(calls) <= 2, calls


def test_validate_asks_where_the_repository_is_and_its_facts_in_one_process(
    tmp_path: Path, logged: GitLog
) -> None:
    # Given a one-task plan committed in a subfolder of a repository (its workdir, then)
    repo = make_repo(tmp_path / "repo")
    (repo / "plans").mkdir()
    write_plan(repo, ONE_TASK, name="plans/plan.toml", commit=True)

    # When it is validated
    done, calls = logged.cli(repo, "validate", "plans/plan.toml")

    # Then it is ok, against the repository's top level
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "plans/plan.toml: ok (1 task, 1 agent profile)\n"
    # and one rev-parse told the top level, the git folder and the base; then one process
    # looked the workdir up at the base and git status looked for changes
    assert asked(calls, "rev-parse") == 1, calls
    assert "--show-toplevel" in calls[0] and "HEAD^{commit}" in calls[0], calls
    assert asked(calls, "cat-file", "--batch-check") == 1, calls
    assert asked(calls, "status", "--porcelain") == 1, calls
    assert len(calls) == 3, "\n".join(calls)


STATUS_BESIDE = """
[agents.sh]
kind = "shell"
command = "echo {task} > {task}.txt"

[[task]]
id = "hello"
workdir = "src"
verify = "test -f hello.txt"
"""

# Opening a FIFO blocks until its other end is opened too: a meeting of two processes, without
# a loop that looks for a file; each side gives up after 30 s
MEETS = "timeout 30 sh -c 'exec 3{way}\"$0\"' {fifo}"


def test_validate_s_git_status_runs_beside_its_checks(tmp_path: Path) -> None:
    # Given a repository with an uncommitted change, a plan whose checks look its workdir up
    # with git cat-file, and a git first on PATH where status and the first cat-file meet at
    # a FIFO (each blocks until the other opens it): cat-file gets through only while git
    # status has started and not ended
    repo = make_repo(tmp_path / "repo", {"src/main.py": "print(1)\n"})
    (repo / "src" / "main.py").write_text("print(2)\n")
    write_plan(repo, STATUS_BESIDE)
    shim, log = tmp_path / "bin", tmp_path / "calls.log"
    fifo, met = tmp_path / "meet", tmp_path / "met"
    os.mkfifo(fifo)
    shim.mkdir()
    (shim / "git").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = status ]; then {MEETS.format(way=">", fifo=fifo)}; fi\n'
        f'if [ "$1" = cat-file ] && [ ! -e "{met}" ]; then touch "{met}"\n'
        f'  {MEETS.format(way="<", fifo=fifo)} && echo "cat-file while status ran" >> "{log}"\n'
        "fi\n"
        f'exec {GIT} "$@"\n'
    )
    (shim / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}

    # When it is validated
    done = subprocess.run(
        [sys.executable, "-m", "orchardist", "validate", "plan.toml"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    # Then it is ok, and warns of the change last, as it always did
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        "warning: your checkout has 1 uncommitted change(s); the run starts from HEAD and "
        "does not include them"
    ), done.stderr
    # and the workdir's check ran while git status had started and not ended
    assert log.exists() and log.read_text() == "cat-file while status ran\n"
