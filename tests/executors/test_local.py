"""The local executor, end to end: worktrees, patches, environment, logs, timeouts, processes.

Driven through the public API (a plan, ``create_run``, ``execute``) so the scheduler's
internals may change freely; what is checked here is what an attempt's processes see and leave.
"""

from __future__ import annotations

import gc
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist import RunState
from orchardist.confine import isolation
from orchardist.confine.procs import CancelToken, new_marker
from orchardist.executors import AttemptJob, Outcome, Phase
from orchardist.executors.local import LocalExecutor
from orchardist.git.repo import Repo
from orchardist.state.agentrecords import AgentProfile
from orchardist.state.records import AttemptState
from support import Finished, git, make_repo, running_with_arg, toml_str, write_plan

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]
PY = shlex.quote(sys.executable)
DUMP_ENV = f"{PY} -c \"import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))\""


# The agent side of a handshake: says it started, then waits (bounded) for the test's "go".
WAIT_FOR_GO = """\
import pathlib, sys, time
sync = pathlib.Path(sys.argv[1])
(sync / "started").touch()
deadline = time.monotonic() + 120
while not (sync / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def wait_for(path: Path, timeout_s: float = 120.0) -> None:
    """Until ``path`` exists (a generous bound: the machine may be loaded)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# -- patches -----------------------------------------------------------------------------------


def tree_entries(repo: Path, commit: str) -> dict[str, str]:
    """``path -> mode`` of every file in a commit's tree (names unquoted)."""
    out = subprocess.run(
        ["git", "ls-tree", "-r", "-z", commit], cwd=repo, capture_output=True, check=True
    ).stdout.decode()
    entries = {}
    for record in filter(None, out.split("\0")):
        meta, path = record.split("\t", 1)
        entries[path] = meta.split()[0]
    return entries


def test_the_patch_is_what_the_agent_changed_and_nothing_else(
    tmp_path: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: files to delete, rename, edit and make executable; ignore rules; and a tracked
    # file that the ignore rules would match
    repo = make_repo(
        tmp_path / "repo",
        {
            "README.md": "hello\n",
            ".gitignore": "*.log\n__pycache__/\n.pytest_cache/\n",
            "old.txt": "to be deleted\n",
            "move_me.txt": "to be renamed\n",
            "edit.txt": "edit\n",
            "run.sh": "echo run\n",
        },
    )
    (repo / "tracked.log").write_text("tracked despite *.log\n")
    git(repo, "add", "-f", "tracked.log")
    git(repo, "commit", "-qm", "a tracked log")
    command = shell_scripts(
        change="""\
        mkdir -p new/deeper/dir
        printf 'nested\\n' > new/deeper/dir/file.txt
        rm old.txt
        mv move_me.txt moved.txt
        printf 'edited\\n' >> edit.txt
        chmod +x run.sh
        ln -s edit.txt link.txt
        mkdir -p "dir with space" && echo unicode > "dir with space/ünï çødé.txt"
        "$PY" -c "open('blob.bin', 'wb').write(bytes(range(256)) + b'\\0\\r\\n')"
        echo more >> tracked.log
        echo noise > build.log
        mkdir -p __pycache__ && echo cache > __pycache__/mod.pyc
        """
    )
    # verify writes a report, a cache and an ignored file: none of it may reach the commit
    verify = (
        "echo ok > report.txt && mkdir -p reports/junit && touch reports/junit/x.xml"
        " && mkdir -p .pytest_cache && touch .pytest_cache/v && echo v > verify.log"
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "change"
        verify = {toml_str(verify)}
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    assert tree_entries(repo, run.branch) == {
        "README.md": "100644",
        ".gitignore": "100644",
        "new/deeper/dir/file.txt": "100644",
        "moved.txt": "100644",
        "edit.txt": "100644",
        "run.sh": "100755",
        "link.txt": "120000",
        "dir with space/ünï çødé.txt": "100644",
        "blob.bin": "100644",
        "tracked.log": "100644",
    }
    assert run.read("edit.txt") == "edit\nedited"
    assert run.read("moved.txt") == "to be renamed"
    assert run.read("link.txt") == "edit.txt"
    assert run.read("tracked.log") == "tracked despite *.log\nmore"
    blob = subprocess.run(
        ["git", "cat-file", "blob", f"{run.branch}:blob.bin"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    assert blob == bytes(range(256)) + b"\0\r\n"
    assert not (repo / "report.txt").exists()
    assert len(run.commits()) == 1


def test_an_agent_that_commits_in_its_worktree_still_yields_one_task_commit(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    command = shell_scripts(
        committer="""\
        echo committed > committed.txt
        git add -A
        git commit -qm "the agent's own commit"
        echo uncommitted > uncommitted.txt
        """
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "committer"
        title = "Commit by orchardist"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    [commit] = run.commits()
    assert git(repo, "log", "-1", "--format=%s%n%P", commit).splitlines() == [
        "Commit by orchardist",
        run.run.base_commit,
    ]
    assert {"committed.txt", "uncommitted.txt"} <= run.tree()


# -- the agent's world -------------------------------------------------------------------------


def test_the_agent_gets_a_scrubbed_environment_with_the_orchardist_variables(
    repo: Path,
    sync: Path,
    shell_scripts: Scripts,
    run_plan: RunPlan,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given: secrets in the caller's environment; one profile allows MY_TOKEN through
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    monkeypatch.setenv("MY_TOKEN", "allowed")
    body = (
        f'{DUMP_ENV} "$SYNC/env-$ORCHARDIST_TASK.json"\npwd -P > "$SYNC/cwd-$ORCHARDIST_TASK"\n'
        'cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/prompt-$ORCHARDIST_TASK"\n'
    )
    command = shell_scripts(plain=body, trusted=body)
    verify = f'{DUMP_ENV} "{sync}/verify-env-$ORCHARDIST_TASK.json"'
    plan = write_plan(
        repo,
        f"""
        [run]
        verify = {toml_str(verify)}

        [agents.plain]
        kind = "shell"
        command = {toml_str(command)}

        [agents.trusted]
        kind = "shell"
        command = {toml_str(command)}
        env = ["MY_TOKEN"]

        [[task]]
        id = "plain"
        agent = "plain"
        prompt = "Do the plain thing."
        allow_empty = true

        [[task]]
        id = "trusted"
        agent = "trusted"
        prompt = "Do the trusted thing."
        allow_empty = true
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    for task_id in ("plain", "trusted"):
        env = json.loads((sync / f"env-{task_id}.json").read_text())
        assert "SECRET_TOKEN" not in env
        assert "GIT_CONFIG_NOSYSTEM" not in env  # set by the test harness, not allowlisted
        assert env["HOME"].endswith(f"/runs/{run.run.id}/{task_id}.1/home")  # its own HOME
        assert env["PATH"] == os.environ["PATH"]
        assert env["ORCHARDIST_TASK"] == task_id
        assert env["ORCHARDIST_ATTEMPT"] == "1"
        assert env["ORCHARDIST_CANDIDATE"] == "0"
        assert env["ORCHARDIST_RUN"] == run.run.id
        assert env["ORCHARDIST_PROMPT"].strip() == f"Do the {task_id} thing."
        assert (sync / f"prompt-{task_id}").read_text() == env["ORCHARDIST_PROMPT"]
        assert "ORCHARDIST_OUTPUT" in env
        worktree = Path(env["ORCHARDIST_WORKTREE"])
        # with namespaces the attempt's tree is seen at the repository's own path, and runs there
        cwd = repo if isolation.probe().usable else worktree
        assert (sync / f"cwd-{task_id}").read_text().strip() == str(cwd.resolve())
        assert worktree.resolve() != repo.resolve()
        verify_env = json.loads((sync / f"verify-env-{task_id}.json").read_text())
        assert "SECRET_TOKEN" not in verify_env
        assert verify_env["ORCHARDIST_TASK"] == task_id
    plain = json.loads((sync / "env-plain.json").read_text())
    trusted = json.loads((sync / "env-trusted.json").read_text())
    assert "MY_TOKEN" not in plain
    assert trusted["MY_TOKEN"] == "allowed"


def test_the_agent_runs_detached_at_the_tip_with_stdin_closed_in_its_own_session(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # The agent's session is read from outside, in /proc: inside its pid namespace a session
    # led from outside reads as 0, and so may the test's own (a CI container's pid namespace).
    tag = f"session-{uuid.uuid4().hex}"
    (sync / "wait.py").write_text(WAIT_FOR_GO)
    command = shell_scripts(
        look=f"""\
        echo "$ORCHARDIST_WORKTREE" > "$SYNC/worktree"
        git rev-parse HEAD > "$SYNC/head"
        if git symbolic-ref -q HEAD; then echo attached > "$SYNC/attached"; fi
        cat > "$SYNC/stdin"
        "$PY" "$SYNC/wait.py" "$SYNC" {tag}
        echo to-stdout
        echo to-stderr >&2
        """
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}
        timeout = "20s"

        [[task]]
        id = "look"
        verify = "echo from-verify"
        allow_empty = true
        """,
    )

    finished: list[Finished] = []
    runner = threading.Thread(target=lambda: finished.append(run_plan(plan)))
    runner.start()
    try:
        wait_for(sync / "started")
        (agent,) = running_with_arg(tag)
        fields = Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()
        session, tty = int(fields[3]), int(fields[4])
    finally:
        (sync / "go").touch()
        runner.join()
    run = finished[0]

    assert run.state is RunState.DONE, run.doc
    assert (sync / "head").read_text().strip() == run.run.base_commit
    assert not (sync / "attached").exists()
    assert (sync / "stdin").read_text() == ""
    assert session not in (0, os.getsid(0))
    assert tty == 0
    worktree = Path((sync / "worktree").read_text().strip())
    assert not worktree.exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    log = Path(run.task("look")["attempts"][0]["log"]).read_text()
    assert "to-stdout" in log
    assert "to-stderr" in log
    assert "from-verify" in log


def test_commands_run_in_the_plans_folder_inside_the_worktree(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a plan that lives in a subfolder of the repository
    (repo / "proj").mkdir()
    (repo / "proj" / "keep.txt").write_text("kept\n")
    git(repo, "add", "proj")
    git(repo, "commit", "-qm", "proj")
    command = shell_scripts(here="test -f keep.txt\necho made > made.txt\n")
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "here"
        verify = "test -f made.txt && test -f keep.txt"
        """,
        name="proj/plan.toml",
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    assert "proj/made.txt" in run.tree()


def test_an_agent_that_wrecks_its_worktree_fails_and_is_cleaned_up(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    command = shell_scripts(wreck="rm -rf .git\necho orphan > orphan.txt\n")
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "wreck"
        """,
    )

    run = run_plan(plan)

    assert run.states() == {"wreck": "failed"}
    assert run.task("wreck")["attempts"][0]["failure"] == "agent_error"
    assert run.commits() == []
    assert len(git(repo, "worktree", "list").splitlines()) == 1


# -- timeouts and processes --------------------------------------------------------------------


def test_timeouts_end_agents_and_verify_commands_early(repo: Path, run_plan: RunPlan) -> None:
    # Given: an agent that hangs ignoring SIGTERM (profile timeout), one that sleeps past its
    # task's timeout, and a verify command that sleeps past it
    plan = write_plan(
        repo,
        """
        [run]
        max_parallel = 3

        [agents.hanger]
        kind = "scripted"
        timeout = "1s"
        script = { "*" = { hang = true } }

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        sleepy = { sleep = 60 }
        slow_verify = { write = { "x.txt" = "x\\n" } }

        [[task]]
        id = "hang"
        agent = "hanger"

        [[task]]
        id = "sleepy"
        agent = "fake"
        timeout = "1s"

        [[task]]
        id = "slow_verify"
        agent = "fake"
        timeout = "1s"
        verify = "sleep 60"
        """,
    )
    run = run_plan(plan)

    # Then: each ended by its timeout, before what it ran could end by itself (the sleeps' 60 s)
    assert run.states() == {"hang": "failed", "sleepy": "failed", "slow_verify": "failed"}
    for task_id in ("hang", "sleepy", "slow_verify"):
        [attempt] = run.task(task_id)["attempts"]
        assert attempt["failure"] == "timeout", (task_id, attempt)
        assert attempt["duration_s"] < 60.0


def test_processes_an_agent_leaves_behind_are_ended(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that starts a background child and a setsid daemon ignoring SIGTERM,
    # then exits 0; and one that starts a background child, then hangs past its timeout
    # (each tagged with an argument of its own: pids from inside a pid namespace mean nothing)
    tag = f"leftover-{uuid.uuid4().hex}"
    child = f"""\
    sh -c 'touch "$1"; sleep 60; :' {tag}-child-$ORCHARDIST_TASK "$SYNC/child-$ORCHARDIST_TASK" &
    wait_for test -e "$SYNC/child-$ORCHARDIST_TASK"
    """
    daemon = f"""\
    setsid sh -c 'trap "" TERM; touch "$1"; sleep 60; :' {tag}-daemon-exits "$SYNC/daemon" &
    wait_for test -e "$SYNC/daemon"
    """
    command = shell_scripts(exits=child + daemon, hangs=child + "    sleep 60\n")
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "exits"
        allow_empty = true

        [[task]]
        id = "hangs"
        timeout = "10s"  # time enough, however loaded the machine, to start its children
        """,
    )

    run = run_plan(plan)

    assert run.states() == {"exits": "done", "hangs": "failed"}
    assert {p.name for p in sync.iterdir()} >= {"child-exits", "child-hangs", "daemon"}
    for name in ("child-exits", "daemon-exits", "child-hangs"):
        assert not running_with_arg(f"{tag}-{name}"), f"{name} outlived its attempt"


# -- many attempts at once --------------------------------------------------------------------


def test_many_attempts_starting_and_ending_at_once_never_trip_over_each_other(
    repo: Path, run_plan: RunPlan
) -> None:
    tasks = "".join(f'\n[[task]]\nid = "t{n:02}"\n' for n in range(32))
    plan = write_plan(
        repo,
        '[run]\nmax_parallel = 32\n\n[agents.sh]\nkind = "shell"\n'
        'command = "echo {task} > {task}.txt"\n' + tasks,
    )

    # Unserialised `git worktree add` and `prune` made some of these fail as infra errors
    # ("could not open .git/worktrees/<id>/locked"), mostly as a run starts.
    run = run_plan(plan)

    problems = [
        f"{t['id']}.{a['n']}: {a['detail']}"
        for t in run.doc["tasks"]
        for a in t["attempts"]
        if a["failure"] is not None
    ]
    assert problems == []
    assert run.state is RunState.DONE
    assert len(run.commits()) == 32


# -- regressions -------------------------------------------------------------------------------


def test_closing_a_cancel_token_twice_never_closes_a_reused_descriptor() -> None:
    # A job thread closes its token and the garbage collector closes it again; by then the fd
    # numbers may belong to a git subprocess's pipes on another thread ("Bad file descriptor").
    token = CancelToken()
    token.close()
    read_fd, write_fd = os.pipe()  # the lowest free numbers: very likely the token's old ones
    try:
        token.close()
        del token
        gc.collect()
        os.fstat(read_fd)
        os.fstat(write_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- removal off the critical path -------------------------------------------------------------


def test_an_attempt_folder_is_removed_after_its_outcome_is_heard_and_before_close_returns(
    tmp_path: Path,
) -> None:
    # Given: a job whose agent writes a file, on an executor of its own
    repo = Repo(make_repo(tmp_path / "repo", {"README.md": "hello\n"}))
    executor = LocalExecutor(
        repo, tmp_path / "state", guard_checkout=False, workspace=tmp_path / "work"
    )
    profile = AgentProfile("sh", "shell", options={"command": "echo done > done.txt"})
    job = AttemptJob(
        id="a.1",
        run_id="run1",
        task_id="a",
        attempt=1,
        candidate=0,
        base_commit=repo.rev_parse("HEAD"),
        title="a",
        prompt="do a",
        profile=profile,
        verify=("test -f done.txt",),
        workdir=".",
        timeout_s=120.0,
        message="a\n",
        marker=new_marker(),
    )
    paths = executor.layout.attempt(job.run_id, job.id)
    heard: list[tuple[AttemptState, bool]] = []
    ended = threading.Event()

    def notify(message: Phase | Outcome) -> None:
        if isinstance(message, Outcome):
            heard.append((message.state, (paths.tree / "done.txt").exists()))
            ended.set()

    # When: it runs and the executor is closed
    executor.submit(job, notify)
    assert ended.wait(120.0), "the job never reported"
    executor.close()

    # Then: its folder was still there when the outcome was heard (the removal comes after,
    # off the scheduler's path), and close() returned only once it was gone
    assert heard == [(AttemptState.PASSED, True)]
    assert not paths.root.exists()
    assert not executor.layout.run_folder("run1").exists()
