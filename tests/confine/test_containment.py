"""Misbehaving agents are contained: each ends as a classified failure, nothing of it is merged,
and nothing of it is left behind (no process, no worktree).

Agents here hang, daemonize, flood their output, print bytes that are not UTF-8, write to the
user's checkout, another attempt's worktree or the run branch, wreck their worktree, or produce
patches with escaping symlinks or huge files.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist import RunState, Workspace, create_run, execute, load_plan, status_document
from orchardist.confine import isolation
from orchardist.confine import landlock as sandbox
from realtools import require
from run_support import leftovers, orchardist, run_folder, task_trailers
from support import (
    Finished,
    git,
    make_repo,
    marked_processes,
    running_with_arg,
    toml_str,
    write_plan,
)

MiB = 1024**2
FLOOD_BYTES = 64 * MiB
RunPlan = Callable[..., Finished]


def attempt(run: Finished, task_id: str, n: int = 1) -> dict[str, Any]:
    """The n-th attempt of a task in the status document."""
    found: dict[str, Any] = run.task(task_id)["attempts"][n - 1]
    return found


def nothing_left(run: Finished) -> None:
    """No process of the run, no attempt's marked process, no worktree."""
    assert leftovers(run.root, run.run.id) == []
    for record in run.ws.store.attempts(run.run.id):
        assert marked_processes(record.marker) == set(), (record.task_id, record.n)


# -- process control -------------------------------------------------------------------------


def test_a_hanging_agent_that_ignores_sigterm_and_left_a_daemon_times_out_leaving_nothing(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: an agent that starts a setsid child ignoring SIGTERM, then hangs ignoring SIGTERM
    plan = write_plan(
        repo,
        """
        [agents.hanger]
        kind = "scripted"
        timeout = "1s"
        script = { "*" = { spawn_daemon = true, hang = true } }

        [[task]]
        id = "hang"
        """,
    )
    # When
    run = run_plan(plan)

    # Then: a timeout failure (the agent and its child ignore SIGTERM: only the SIGKILL after
    # the grace period ends them, or the run would not have ended)
    assert run.state is RunState.FAILED
    assert attempt(run, "hang")["failure"] == "timeout"
    assert attempt(run, "hang")["detail"] == "agent timed out after 1s"
    assert run.task("hang")["reason"].startswith("timeout: ")
    assert run.commits() == []
    nothing_left(run)


def test_a_daemon_an_agent_leaves_behind_is_killed_when_the_attempt_ends(
    repo: Path, sync: Path, run_plan: RunPlan
) -> None:
    # Given: a scripted agent that leaves a setsid daemon ignoring SIGTERM, and a shell agent
    # that does the same and tells us its daemon's pid; both then finish normally
    # (tagged with an argument of its own: its pid inside a pid namespace means nothing here)
    tag = f"daemon-{uuid.uuid4().hex}"
    daemon = (
        f"setsid sh -c 'trap \"\" TERM; touch {sync}/daemon; sleep 600; :' {tag} "
        "</dev/null >/dev/null 2>&1 &\n"
        f"until [ -e {sync}/daemon ]; do sleep 0.01; done\n"
        "echo shell > shell.txt\n"
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.fake]
        kind = "scripted"
        script = {{ scripted = {{ spawn_daemon = true, write = {{ "scripted.txt" = "s\\n" }} }} }}

        [agents.sh]
        kind = "shell"
        command = {toml_str(daemon)}

        [[task]]
        id = "scripted"
        agent = "fake"

        [[task]]
        id = "shell"
        agent = "sh"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: both tasks done; the daemons are gone (one of them provably existed)
    assert run.state is RunState.DONE, run.doc
    assert (sync / "daemon").exists()
    assert not running_with_arg(tag)
    nothing_left(run)


def test_an_agent_flooding_eight_times_the_cap_completes_with_a_capped_log_keeping_head_and_tail(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: an agent printing 64 MiB, eight times the log's 8 MiB cap (docs/state.md): the
    # cap, the head and the tail show as well as with the gigabyte this printed before, which
    # cost ~3 s of CPU to pipe through (the reader's and the writer's) and proved no more
    plan = write_plan(
        repo,
        f"""
        [agents.fake]
        kind = "scripted"
        [agents.fake.script.flood]
        print = "FIRST LINE"
        flood_bytes = {FLOOD_BYTES}
        write = {{ "x.txt" = "x\\n" }}

        [[task]]
        id = "flood"
        verify = "echo LAST LINE FROM VERIFY && test -f x.txt"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    log = Path(attempt(run, "flood")["log"]).read_bytes()
    assert len(log) < 9 * MiB  # the cap is 8 MiB, plus orchardist's own lines
    assert log.startswith(b"FIRST LINE\n")
    omitted = re.search(rb"\[orchardist: (\d+) bytes of output omitted\]", log)
    assert omitted is not None
    assert int(omitted[1]) >= FLOOD_BYTES - 8 * MiB  # the whole flood went through the reader
    assert log.rstrip().endswith(b"LAST LINE FROM VERIFY")
    nothing_left(run)


def test_output_that_is_not_utf8_crashes_nothing_and_its_log_is_readable(
    repo: Path, run_plan: RunPlan
) -> None:
    plan = write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        script = { bin = { binary_output = true, write = { "b.txt" = "b\\n" } } }

        [[task]]
        id = "bin"
        verify = "test -f b.txt"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    shown = orchardist(repo, "logs", run.run.id, "bin")
    assert shown.returncode == 0, shown.stderr
    assert "not utf-8" in shown.stdout
    assert "\ufffd" in shown.stdout  # undecodable bytes shown as replacement characters
    nothing_left(run)


# -- writing outside the worktree: refused by the sandbox -----------------------------------

NO_LANDLOCK = "this kernel has no Landlock: writes cannot be confined"


@pytest.fixture
def landlock() -> None:
    """The sandbox's Landlock, which these tests are about: missing, a skip (a failure on CI)."""
    require(sandbox.available(), NO_LANDLOCK)


needs_landlock = pytest.mark.usefixtures("landlock")


@pytest.fixture
def sealed(tmp_path: Path) -> Iterator[Path]:
    """A folder outside pytest's base folder for the repository of a sandboxed run.

    pytest's ``pytest-current`` symlink aliases every ``tmp_path``; the sandbox follows such
    aliases (see the xfail below), so a repository there cannot be protected.
    """
    folder = Path(tempfile.mkdtemp(prefix="orchardist-sealed-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


ESCAPES = {
    "checkout": 'echo hacked >> "$REPO/README.md"',
    "new_file_in_checkout": 'echo hacked > "$REPO/dropped.txt"',
    "attempt_folder": 'echo planted > "$ORCHARDIST_WORKTREE/../planted.txt"',
    "user_objects": 'echo planted > "$REPO/.git/objects/planted"',
    "user_config": 'echo "[core] sneaky = true" >> "$REPO/.git/config"',
}
# git commands that change a repository: they work, on the attempt's private git directory only.
PRIVATE_GIT = {
    "tag": "git tag sneaky",
    "branch": "git branch sneaky",
    "commit": "git commit -q --allow-empty -m sneaky",
    "git_config": "git config --local core.sneaky true",
}


@needs_landlock
def test_with_the_sandbox_writes_outside_the_worktree_are_refused_and_nothing_escapes(
    sealed: Path, run_plan: RunPlan
) -> None:
    # Given: one task per place an agent must not write to; each notes whether it could
    repo = make_repo(sealed / "repo", {"README.md": "hello\n"})
    before = checkout(repo)
    lines = [f"REPO={shlex.quote(str(repo))}", 'case "$ORCHARDIST_TASK" in']
    for task_id, action in {**ESCAPES, **PRIVATE_GIT}.items():
        lines.append(
            f"{task_id}) if {action} 2>/dev/null; then r=escaped; else r=refused; fi;"
            f' echo "$r" > {task_id}.txt ;;'
        )
    lines.append("esac")
    tasks = "\n".join(f'[[task]]\nid = "{t}"\n' for t in {**ESCAPES, **PRIVATE_GIT})
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 4

[agents.sh]
kind = "shell"
command = {toml_str(chr(10).join(lines))}

{tasks}
""",
        commit=True,
    )
    before = checkout(repo)

    run = run_plan(plan)

    # Then: every write outside was refused (with namespaces, those at the checkout's path
    # landed in the attempt's own tree, shown there), git's own writes stayed in the attempt's
    # private git directory; the checkout, its refs, config and objects are untouched
    assert run.state is RunState.DONE, run.doc
    outcomes = {t: git(repo, "show", f"{run.run.branch}:{t}.txt") for t in ESCAPES}
    own_tree = {"checkout", "new_file_in_checkout"} if isolation.probe().usable else set()
    assert outcomes == {t: "escaped" if t in own_tree else "refused" for t in ESCAPES}
    in_git = {t: git(repo, "show", f"{run.run.branch}:{t}.txt") for t in PRIVATE_GIT}
    assert in_git == dict.fromkeys(PRIVATE_GIT, "escaped")
    assert checkout(repo) == before
    assert not (repo / ".git" / "objects" / "planted").exists()
    assert not (run_folder(repo, run.run.id) / "attempt_folder.1" / "planted.txt").exists()
    trailers = task_trailers(repo, run.run.base_commit, run.run.branch)
    assert sorted(trailers) == sorted({**ESCAPES, **PRIVATE_GIT})
    nothing_left(run)


@needs_landlock
def test_the_sandbox_is_not_opened_by_a_symlink_that_aliases_a_folder_above_the_repository(
    sealed: Path, run_plan: RunPlan
) -> None:
    # Given: the repository's folder also reachable through a symlink beside it
    (sealed / "projects").mkdir()
    (sealed / "alias").symlink_to(sealed / "projects")
    repo = make_repo(sealed / "projects" / "repo", {"README.md": "hello\n"})
    command = (
        f"if echo hacked >> {shlex.quote(str(repo / 'README.md'))} 2>/dev/null;"
        " then echo escaped > r.txt; else echo refused > r.txt; fi"
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        """,
        commit=True,
    )

    run = run_plan(plan)

    # Then: the user's file is unchanged; with namespaces the write reached the attempt's own
    # tree, which is shown at the repository's path
    assert (repo / "README.md").read_text() == "hello\n"
    expected = "escaped" if isolation.probe().usable else "refused"
    assert git(repo, "show", f"{run.run.branch}:r.txt") == expected


def checkout(repo: Path) -> str:
    """The user's checkout: HEAD, branches and tags (not orchardist's), status, config, README."""
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags")
    return "\n".join(
        [
            git(repo, "rev-parse", "HEAD"),
            "\n".join(r for r in refs.splitlines() if not r.startswith("refs/heads/orchardist/")),
            git(repo, "status", "--porcelain", "--untracked-files=all"),
            git(repo, "config", "--local", "--list"),
            (repo / "README.md").read_text(),
        ]
    )


# -- writing outside the worktree: detected after the fact (no sandbox) ----------------------

CHECKOUT_EDITS = {
    "tag": 'git -C "$REPO" tag sneaky',
    "branch": 'git -C "$REPO" branch sneaky',
}


@pytest.mark.parametrize("edit", CHECKOUT_EDITS, ids=list(CHECKOUT_EDITS))
def test_without_the_sandbox_an_attempt_that_edits_the_users_checkout_fails_saying_so(
    repo: Path, run_plan: RunPlan, edit: str
) -> None:
    # Given: an agent whose first attempt also changes the user's checkout
    command = (
        f"REPO={shlex.quote(str(repo))}\n"
        f'if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then {CHECKOUT_EDITS[edit]}; fi\n'
        "echo mine > mine.txt\n"
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        retry_backoff = "0.05s"

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "meddle"
        retries = 1
        verify = "test -f mine.txt"
        """,
    )

    run = run_plan(plan)

    # Then: the first attempt failed, saying why, with nothing taken from it; the clean
    # retry was merged
    assert run.state is RunState.DONE, run.doc
    first = attempt(run, "meddle", 1)
    assert first["failure"] == "agent_error"
    assert "the user's checkout changed while the agent ran" in first["detail"]
    assert first["patch"] is None
    assert attempt(run, "meddle", 2)["state"] == "merged"
    assert run.tree() == {".gitignore", "README.md", "mine.txt"}
    assert git(repo, "show", f"{run.run.branch}:README.md") == "hello"
    nothing_left(run)


def test_without_the_sandbox_the_attempt_that_edits_the_checkout_is_caught_not_a_bystander(
    repo: Path, sync: Path, run_plan: RunPlan
) -> None:
    # Given: "meddle" writes to the user's checkout and keeps working until the concurrent
    # "innocent" attempt, which started before the write and ends after it, is over
    command = f"""\
case "$ORCHARDIST_TASK" in
meddle)
  until [ -e {sync}/innocent-started ]; do sleep 0.01; done
  git -C {shlex.quote(str(repo))} tag sneaky
  touch {sync}/meddled
  until [ ! -d "$ORCHARDIST_WORKTREE/../../innocent.1" ]; do sleep 0.01; done
  echo meddle > meddle.txt ;;
innocent)
  touch {sync}/innocent-started
  until [ -e {sync}/meddled ]; do sleep 0.01; done
  echo innocent > innocent.txt ;;
esac
"""
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "meddle"
        timeout = "30s"

        [[task]]
        id = "innocent"
        timeout = "30s"
        """,
    )

    run = run_plan(plan)

    # Then: what wrote to the checkout is never merged. Without a sandbox nothing tells who
    # wrote, so every attempt whose agent ran meanwhile is a suspect and none is kept: the
    # bystander may fail too, but always for that reason, never silently
    assert "meddle.txt" not in run.tree()
    assert attempt(run, "meddle")["failure"] == "agent_error"
    assert "user's checkout" in attempt(run, "meddle")["detail"]
    innocent = attempt(run, "innocent")
    assert run.states()["innocent"] == "done" or "user's checkout" in innocent["detail"]


# The attempt's own git directory is private; its alternates file names the user's objects,
# and so the user's git directory, which nothing stops an agent from using without the sandbox.
USER_GIT = '"$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")"'
SNEAK = f"""\
set -eu
base=$(git rev-parse HEAD)
export GIT_DIR={USER_GIT}
export GIT_INDEX_FILE="$ORCHARDIST_WORKTREE/.sneak-index"
git read-tree "$base"
blob=$(echo sneaked | git hash-object -w --stdin)
git update-index --add --cacheinfo "100644,$blob,sneaked.txt"
commit=$(git -c user.name=x -c user.email=x@y commit-tree "$(git write-tree)" -p "$base" -m sneaked)
rm -f "$GIT_INDEX_FILE"
git update-ref "refs/heads/orchardist/$ORCHARDIST_RUN" "$commit"
echo mine > mine.txt
"""


def sneak_plan(repo: Path) -> Path:
    """An agent that commits a file straight onto the run branch, behind the scheduler."""
    return write_plan(
        repo,
        f"""
        [run]
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = {toml_str(SNEAK)}

        [[task]]
        id = "sneak"
        verify = "test -f mine.txt"
        """,
    )


@pytest.fixture(scope="module")
def _sneaked_runs() -> Iterator[dict[str, Finished]]:
    made: dict[str, Finished] = {}
    yield made
    for run in made.values():
        run.ws.store.close()


@pytest.fixture
def sneaked(
    _sneaked_runs: dict[str, Finished], tmp_path_factory: pytest.TempPathFactory
) -> Finished:
    """The run of ``sneak_plan``, made by the first test that asks (in its isolated environment)
    and only read after it: the two tests of what it left ran the same plan twice."""
    if "run" not in _sneaked_runs:
        repo = make_repo(tmp_path_factory.mktemp("sneak") / "repo", {"README.md": "hello\n"})
        plan = load_plan(sneak_plan(repo))
        ws = Workspace.open(plan.repo)
        run = create_run(ws, plan)
        state = execute(ws, plan, run)
        doc = status_document(ws.store, ws.resolve_run(run.id))
        _sneaked_runs["run"] = Finished(ws, run, state, doc)
    return _sneaked_runs["run"]


def test_without_the_sandbox_a_commit_an_agent_puts_on_the_run_branch_is_not_kept(
    sneaked: Finished,
) -> None:
    run = sneaked

    # Then: the attempt fails, and the branch is put back where orchardist left it
    assert run.state is RunState.FAILED, run.doc
    assert "sneaked.txt" not in run.tree()
    assert run.commits() == []
    moved = [e for e in run.ws.store.events(run.run.id) if e.data.get("state") == "branch_moved"]
    assert moved, "the moved branch was not noticed"
    nothing_left(run)


def test_without_the_sandbox_the_attempt_that_moved_the_run_branch_fails_saying_so(
    sneaked: Finished,
) -> None:
    run = sneaked

    assert attempt(run, "sneak")["failure"] == "agent_error"
    assert "run branch" in attempt(run, "sneak")["detail"]


@pytest.mark.xfail(
    strict=True,
    reason="without the sandbox nothing checks that an attempt's worktree holds only what its "
    "own agent wrote: a file planted by another agent is merged as the victim's work",
)
def test_without_the_sandbox_an_agent_that_writes_into_another_worktree_is_caught(
    repo: Path, sync: Path, run_plan: RunPlan
) -> None:
    # Given: "planter" writes a file into "victim"'s worktree while victim works
    command = f"""\
case "$ORCHARDIST_TASK" in
planter)
  until [ -e {sync}/victim-started ]; do sleep 0.01; done
  echo planted > "$ORCHARDIST_WORKTREE/../../victim.1/tree/planted.txt"
  touch {sync}/planted
  echo planter > planter.txt ;;
victim)
  touch {sync}/victim-started
  until [ -e {sync}/planted ]; do sleep 0.01; done
  echo victim > victim.txt ;;
esac
"""
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "planter"
        timeout = "30s"

        [[task]]
        id = "victim"
        timeout = "30s"
        """,
    )

    run = run_plan(plan)

    # Then: the planted file is not merged, and the planter's attempt failed saying why
    assert "planted.txt" not in run.tree()
    assert attempt(run, "planter")["failure"] == "agent_error"


GIT_DIR_EDITS = {
    "config": f"git --git-dir={USER_GIT} config --local core.hooksPath /tmp/evil-hooks",
    "hook": f'echo "echo owned" > {USER_GIT}/hooks/post-checkout',
}


@pytest.mark.parametrize("edit", GIT_DIR_EDITS, ids=list(GIT_DIR_EDITS))
def test_without_the_sandbox_an_agent_that_edits_the_git_config_or_hooks_is_caught(
    repo: Path, run_plan: RunPlan, edit: str
) -> None:
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = {toml_str(GIT_DIR_EDITS[edit] + "; echo mine > mine.txt")}

        [[task]]
        id = "meddle"
        """,
    )

    run = run_plan(plan)

    assert attempt(run, "meddle")["failure"] == "agent_error"
    assert "mine.txt" not in run.tree()


# -- wrecked worktrees and refused patches ---------------------------------------------------

HOSTILE = {
    "deletes_worktree": (
        'rm -rf "$ORCHARDIST_WORKTREE"',
        "the agent deleted or damaged its worktree",
    ),
    "garbles_git_file": (
        "echo garbage > .git",
        "the agent deleted or damaged its worktree",
    ),
    "repoints_git_file": (
        "echo 'gitdir: /nonexistent/elsewhere' > .git",
        "the agent deleted or damaged its worktree",
    ),
    "removes_git_file": ("rm .git", "the agent deleted or damaged its worktree"),
    "fifo_git_file": ("rm .git && mkfifo .git", "the agent deleted or damaged its worktree"),
    "links_etc_passwd": (
        "ln -s /etc/passwd x",
        "patch refused: x is a symlink pointing outside the repository",
    ),
    "links_up_and_out": (
        "ln -s ../../outside y",
        "patch refused: y is a symlink pointing outside the repository",
    ),
    "links_out_from_a_folder": (
        "mkdir -p deep && ln -s ../../outside deep/z",
        "patch refused: deep/z is a symlink pointing outside the repository",
    ),
    "writes_a_big_file": (
        "head -c 2000000 /dev/zero > big.bin",
        "patch refused: big.bin is 1.9 MiB, over the 1 MiB limit",
    ),
}


def test_wrecked_worktrees_escaping_symlinks_and_huge_files_fail_cleanly_and_merge_nothing(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: one task per kind of misbehaviour (each also writes an ordinary file), and one
    # well-behaved task whose symlinks stay inside and whose file is under the limit
    lines = ['case "$ORCHARDIST_TASK" in']
    for task_id, (action, _) in HOSTILE.items():
        lines.append(f"{task_id}) echo {task_id} > {task_id}.txt; {action} ;;")
    lines.append(
        "fine) echo fine > fine.txt; ln -s fine.txt link; mkdir -p d; ln -s ../fine.txt d/link;"
        " head -c 500000 /dev/zero > medium.bin ;;"
    )
    lines.append("esac")
    tasks = "\n".join(f'[[task]]\nid = "{t}"\n' for t in [*HOSTILE, "fine"])
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 4
max_patch_mb = 1

[agents.sh]
kind = "shell"
command = {toml_str(chr(10).join(lines))}
circuit_breaker = 100  # these failures are the agent's, and all are wanted

{tasks}
""",
    )

    # When
    run = run_plan(plan)

    # Then: each hostile attempt failed as an agent error with its reason
    assert run.state is RunState.FAILED
    for task_id, (_, reason) in HOSTILE.items():
        (only,) = run.task(task_id)["attempts"]  # no infra error: worktrees do not race
        assert (only["state"], only["failure"]) == ("failed", "agent_error"), (task_id, only)
        if task_id == "deletes_worktree" and sandbox.available():
            reason = "agent exited with"  # the sandbox refuses to remove the folder itself
        assert only["detail"].startswith(reason), (task_id, only["detail"])
        assert run.task(task_id)["state"] == "failed"
    # and nothing of theirs was merged: the branch holds only the well-behaved task
    assert task_trailers(repo, run.run.base_commit, run.run.branch) == ["fine"]
    assert run.tree() == {".gitignore", "README.md", "fine.txt", "link", "d/link", "medium.bin"}
    # and nothing is left, the user's checkout included
    nothing_left(run)
    assert git(repo, "status", "--porcelain") == "?? plan.toml"


# -- the user's own checkout during a run: theirs to edit ------------------------------------


@pytest.mark.parametrize("confined", [True, False], ids=["sandbox on", "sandbox off"])
def test_editing_a_file_and_checking_out_the_run_branch_during_a_run_fails_no_attempt(
    repo: Path, sync: Path, run_plan: RunPlan, confined: bool
) -> None:
    if confined:
        require(sandbox.available(), NO_LANDLOCK)
    # Given: an agent that works until the user has done their edits
    command = (
        f"touch {sync}/started-$ORCHARDIST_TASK\n"
        f"until [ -e {sync}/user-done ]; do sleep 0.01; done\n"
        "echo mine > $ORCHARDIST_TASK.txt\n"
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = {str(confined).lower()}
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "one"
        timeout = "60s"
        verify = "test -f one.txt"

        [[task]]
        id = "two"
        timeout = "60s"
        verify = "test -f two.txt"
        """,
        commit=True,
    )

    def user() -> None:
        deadline = time.monotonic() + 30
        while not all((sync / f"started-{t}").exists() for t in ("one", "two")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        # When: the user edits a file of their checkout and checks out the run branch
        (repo / "README.md").write_text("my own edit\n")
        branch = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/orchardist/")
        git(repo, "checkout", "-q", branch)
        (sync / "user-done").touch()

    helper = threading.Thread(target=user)
    helper.start()
    try:
        run = run_plan(plan)
    finally:
        (sync / "user-done").touch()
        helper.join(timeout=60)

    # Then: no attempt failed, both tasks merged, and the user's edit is still theirs
    assert run.state is RunState.DONE, run.doc
    assert [attempt(run, t)["state"] for t in ("one", "two")] == ["merged", "merged"]
    assert {"one.txt", "two.txt"} <= run.tree()
    assert (repo / "README.md").read_text() == "my own edit\n"
    if not confined:  # the log says what it could not tell apart
        # (in the log of whichever attempt took its patch first after the change)
        logs = [Path(attempt(run, t)["log"]).read_text() for t in ("one", "two")]
        assert any("the user's checkout changed while this agent ran" in log for log in logs)


def test_without_the_sandbox_an_agent_editing_the_checkout_is_noted_not_failed(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: no sandbox, and an agent that also edits a file of the user's checkout
    # (what is not guaranteed: without a sandbox nothing tells this from the user's own edit)
    command = f"echo hacked >> {shlex.quote(str(repo))}/README.md\necho mine > mine.txt\n"
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "meddle"
        verify = "test -f mine.txt"
        """,
    )

    run = run_plan(plan)

    # Then: only its own worktree's work reaches the run branch, and its log says what happened
    assert run.state is RunState.DONE, run.doc
    assert git(repo, "show", f"{run.run.branch}:README.md") == "hello"
    log = Path(attempt(run, "meddle")["log"]).read_text()
    assert "the user's checkout changed while this agent ran (files or index)" in log
