"""Scheduling end to end, through the public API, with real repositories and agent processes.

Agents are the in-package scripted fake or per-task shell scripts. Where two attempts must
overlap, the agents wait for each other through files outside the worktree, or for a file to
reach the run branch; the tests themselves never sleep.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchardist import RunState, Workspace
from orchardist.cli import main
from orchardist.engine.hooks import Hook, Hooks
from orchardist.state.eventlog import Event
from support import Finished, git, make_repo, running_with_arg, toml_str, write_plan

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


def trailers(repo: Path, commit: str) -> dict[str, str]:
    out = git(repo, "log", "-1", "--format=%(trailers:only,unfold)", commit)
    return dict(line.split(": ", 1) for line in out.splitlines() if line)


def spans(sync: Path) -> dict[str, tuple[float, float]]:
    """``task -> (start, end)`` as agents running the ``SPAN`` script wrote them."""
    found = {}
    for path in sync.glob("span-*"):
        start, end = map(float, path.read_text().split())
        found[path.name.removeprefix("span-")] = (start, end)
    return found


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in points:  # at equal times an end (-1) sorts before a start (+1)
        now += step
        best = max(best, now)
    return best


SPAN = """\
start=$(date +%s.%N)
sleep 0.3
echo "$start $(date +%s.%N)" > "$SYNC/span-$ORCHARDIST_TASK"
echo "$ORCHARDIST_TASK" > "$ORCHARDIST_TASK.txt"
"""


# -- dependencies ----------------------------------------------------------------------------


def test_a_task_starts_from_the_tip_with_its_dependencies_and_without_work_in_flight(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: "child" needs "base"'s file, while the unrelated "slow" is still at work:
    # slow writes its file only after child's agent has looked around.
    command = shell_scripts(
        child="""\
        ls -A > "$SYNC/child-saw.txt"
        test -f base.txt
        test ! -f slow.txt
        echo child > child.txt
        touch "$SYNC/child-done"
        """,
        slow="""\
        wait_for test -e "$SYNC/child-done"
        echo slow > slow.txt
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 3

        [agents.fake]
        kind = "scripted"
        script = {{ base = {{ write = {{ "base.txt" = "base\\n" }} }} }}

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "slow"
        agent = "sh"

        [[task]]
        id = "base"
        agent = "fake"

        [[task]]
        id = "child"
        agent = "sh"
        depends_on = ["base"]
        verify = "test -f base.txt && test -f child.txt"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: child saw base's merged file and nothing of slow's
    assert run.state is RunState.DONE, run.doc
    saw = (sync / "child-saw.txt").read_text().split()
    assert "base.txt" in saw
    assert "slow.txt" not in saw
    assert run.task("child")["attempts"][0]["base"] == run.task("base")["commit"]
    assert run.task("slow")["attempts"][0]["base"] == run.run.base_commit
    assert {"base.txt", "child.txt", "slow.txt"} <= run.tree()


def test_every_done_task_is_one_commit_titled_and_trailered(repo: Path, run_plan: RunPlan) -> None:
    plan = write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        a = { write = { "a.txt" = "a\\n" } }
        b = { write = { "b.txt" = "b\\n" } }
        c = { write = { "c/deep/c.txt" = "c\\n" } }

        [[task]]
        id = "a"
        title = "Add the letter A"

        [[task]]
        id = "b"
        title = "Add B, after A"
        depends_on = ["a"]

        [[task]]
        id = "c"
        title = "Add C"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    commits = run.commits()
    assert len(commits) == 3
    assert git(run.root, "rev-list", "--merges", f"{run.run.base_commit}..{run.branch}") == ""
    titles = {"a": "Add the letter A", "b": "Add B, after A", "c": "Add C"}
    for task_id, title in titles.items():
        commit = run.task(task_id)["commit"]
        assert commit in commits
        assert git(run.root, "log", "-1", "--format=%s", commit) == title
        assert trailers(run.root, commit) == {
            "Orchardist-Task": task_id,
            "Orchardist-Attempt": "1",
            "Orchardist-Agent": "fake",
            "Orchardist-Run": run.run.id,
        }
    assert commits.index(run.task("a")["commit"]) < commits.index(run.task("b")["commit"])
    assert run.tree() == {"README.md", ".gitignore", "a.txt", "b.txt", "c/deep/c.txt"}
    assert git(run.root, "rev-parse", run.branch) == commits[-1]


# -- failure -----------------------------------------------------------------------------------


def test_a_failing_task_blocks_its_dependents_and_the_rest_completes(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(
        repo,
        """
        [run]
        retry_backoff = "10ms"  # keep the test fast

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        bad = { print = "boom", exit = 3 }
        "*" = { append = { "log.txt" = "x\\n" } }

        [[task]]
        id = "bad"
        retries = 1

        [[task]]
        id = "mid"
        depends_on = ["bad"]

        [[task]]
        id = "leaf"
        depends_on = ["mid", "free"]

        [[task]]
        id = "free"

        [[task]]
        id = "after_free"
        depends_on = ["free"]
        """,
    )

    code = main(["run", str(plan)])

    assert code == 1
    ws = Workspace.open(repo)
    try:
        [run] = ws.store.runs()
        tasks = {t.task_id: t for t in ws.store.tasks(run.id)}
        attempts = ws.store.attempts(run.id)
    finally:
        ws.store.close()
    assert run.state is RunState.FAILED
    assert {t: r.state.value for t, r in tasks.items()} == {
        "bad": "failed",
        "mid": "blocked",
        "leaf": "blocked",
        "free": "done",
        "after_free": "done",
    }
    assert "dependency bad failed" in tasks["mid"].reason
    assert "bad" in tasks["leaf"].reason
    bad = [a for a in attempts if a.task_id == "bad"]
    assert [(a.state.value, a.failure and a.failure.value, a.exit_code) for a in bad] == [
        ("failed", "agent_error", 3),
        ("failed", "agent_error", 3),
    ]
    assert not [a for a in attempts if a.task_id in ("mid", "leaf")]
    titles = git(repo, "log", "--format=%s", f"{run.base_commit}..{run.branch}").split()
    assert sorted(titles) == ["after_free", "free"]
    assert "bad" in capsys.readouterr().out


# -- retries -----------------------------------------------------------------------------------


def test_a_retry_after_failed_verify_is_told_why_and_passes(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that writes its attempt number, and a check that only accepts 2
    command = shell_scripts(
        fix="""\
        cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/prompt-$ORCHARDIST_ATTEMPT.md"
        echo "$ORCHARDIST_ATTEMPT" > attempt.txt
        """
    )
    check = 'grep -qx 2 attempt.txt || {{ echo "CHECK-SAYS: got $(cat attempt.txt)"; exit 1; }}'
    plan = write_plan(
        repo,
        f"""
        [run]
        retry_backoff = "10ms"  # keep the test fast

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "fix"
        title = "Make attempt.txt say 2"
        prompt = "Write 2 into attempt.txt."
        retries = 1
        verify = {toml_str(check)}
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    attempts = run.task("fix")["attempts"]
    assert [(a["n"], a["state"], a["failure"]) for a in attempts] == [
        (1, "failed", "verify_failed"),
        (2, "merged", None),
    ]
    assert attempts[0]["exit_code"] == 1
    first = (sync / "prompt-1.md").read_text()
    second = (sync / "prompt-2.md").read_text()
    assert first.strip() == "Write 2 into attempt.txt."
    assert second.startswith("Write 2 into attempt.txt.")
    assert "CHECK-SAYS: got 1" in second
    assert "grep -qx 2 attempt.txt" in second
    assert run.read("attempt.txt") == "2"
    assert trailers(run.root, run.task("fix")["commit"])["Orchardist-Attempt"] == "2"
    assert len(run.commits()) == 1


# -- merging -----------------------------------------------------------------------------------


def test_a_patch_on_a_moved_tip_is_verified_merged_three_ways_and_lands_without_a_second_run(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: two independent tasks from the same base; "late" finishes only once "early" landed;
    # every verify run leaves the tree it saw in a file outside the repository
    record = f"{sync}/verify-$ORCHARDIST_TASK.txt"
    command = shell_scripts(
        early="echo early > early.txt\n",
        late="""\
        wait_for on_branch early.txt
        echo late > late.txt
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2
        verify = {toml_str(f'(echo "$ORCHARDIST_WORKTREE"; ls; echo ---) >> "{record}"')}

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "early"

        [[task]]
        id = "late"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    early, late = run.task("early"), run.task("late")
    assert early["attempts"][0]["base"] == late["attempts"][0]["base"] == run.run.base_commit
    assert len(late["attempts"]) == 1
    # linear history, late's commit on top of early's
    assert run.commits() == [early["commit"], late["commit"]]
    assert git(run.root, "log", "-1", "--format=%P", late["commit"]) == early["commit"]
    assert {"early.txt", "late.txt"} <= run.tree()
    # late's attempt was verified once, on the merged tree (its patch on the moved tip), in a
    # fresh tree of its own; that very tree landed, with no second verify run at the merge
    trees = [b.split() for b in (sync / "verify-late.txt").read_text().split("---") if b.strip()]
    assert len(trees) == 1
    assert {"early.txt", "late.txt"} <= set(trees[0])
    assert trees[0][0] != str(repo)
    assert [e.data["state"] for e in run.events("merge", "late")] == ["merged"]
    assert [e.data["state"] for e in run.events("merge", "early")] == ["merged"]


def test_a_patch_verified_on_a_head_that_does_not_land_is_verified_again_before_it_lands(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: "first" fails verify alone (first.txt without second.txt); "second" ends its
    # agent while first is verified, and first's verification waits until second's started
    record = f"{sync}/verify-$ORCHARDIST_TASK.txt"
    verify = f"""(echo "$ORCHARDIST_WORKTREE"; ls; echo ---) >> "{record}"
    if [ "$ORCHARDIST_TASK" = first ]; then
      i=0; until [ -e "{sync}/verify-second.txt" ] || [ $i -ge 400 ]; do
        sleep 0.025; i=$((i + 1)); done
    fi
    [ ! -e first.txt ] || [ -e second.txt ]"""
    command = shell_scripts(
        first="echo first > first.txt\n",
        second="""\
        wait_for test -e "$SYNC/verify-first.txt"
        echo second > second.txt
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2
        verify = {toml_str(verify)}

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "first"

        [[task]]
        id = "second"
        """,
    )

    run = run_plan(plan)

    # Then: second was verified first on first's patch and its own (which passed there)...
    assert run.states() == {"first": "failed", "second": "done"}, run.doc
    trees = [b.split() for b in (sync / "verify-second.txt").read_text().split("---") if b.strip()]
    assert {"first.txt", "second.txt"} <= set(trees[0])
    # ...and, first never landing, verified again on the tree that lands, which holds no first
    assert len(trees) == 2 and "first.txt" not in trees[1] and "second.txt" in trees[1]
    assert [e.data["state"] for e in run.events("merge", "second")] == ["verifying", "merged"]
    assert "first.txt" not in run.tree() and "second.txt" in run.tree()


def test_a_conflicting_patch_is_rerun_from_the_new_tip_without_counting_a_failure(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: both write shared.txt; "second" overwrites it on its first attempt (after "first"
    # landed), and appends on its next one
    command = shell_scripts(
        first="printf 'from first\\n' > shared.txt\n",
        second="""\
        if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then
          wait_for on_branch shared.txt
          printf 'from second\\n' > shared.txt
        else
          printf 'from second\\n' >> shared.txt
        fi
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "first"

        [[task]]
        id = "second"
        retries = 0
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    second = run.task("second")
    assert len(run.task("first")["attempts"]) == 1
    assert len(second["attempts"]) == 2
    assert second["attempts"][1]["base"] == run.task("first")["commit"]
    conflicts = [e for e in run.events("merge", "second") if e.data["state"] == "conflict"]
    assert [(e.attempt, e.data.get("paths")) for e in conflicts] == [(1, ["shared.txt"])]
    [record] = [t for t in run.ws.store.tasks(run.run.id) if t.task_id == "second"]
    assert record.failures == 0
    assert run.read("shared.txt") == "from first\nfrom second"
    assert run.commits() == [run.task("first")["commit"], second["commit"]]


def test_a_merged_tree_that_fails_verify_is_rerun_from_the_new_tip(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: "late" passes on its own base, but its first patch breaks the check once "early"
    # is next to it; its re-run (from the tip holding early.txt) gets it right
    command = shell_scripts(
        early="echo early > early.txt\n",
        late="""\
        cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/prompt-$ORCHARDIST_ATTEMPT.md"
        if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then
          wait_for on_branch early.txt
          echo v1 > late.txt
        else
          echo v2 > late.txt
        fi
        """,
    )
    check = (
        "if [ -f early.txt ]; then grep -q v2 late.txt"
        ' || {{ echo "MERGED-CHECK: next to early.txt, late.txt must say v2"; exit 1; }}; fi'
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "early"

        [[task]]
        id = "late"
        retries = 0
        verify = {toml_str(check)}
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    late = run.task("late")
    assert [a["n"] for a in late["attempts"]] == [1, 2]
    assert late["attempts"][1]["base"] == run.task("early")["commit"]
    # its first attempt was verified on the tip holding early.txt and failed there, then passed
    # on its own base: the queue blamed that tree without verifying it again, and re-ran it
    merges = [(e.attempt, e.data["state"]) for e in run.events("merge", "late")]
    assert merges == [(1, "failed"), (2, "merged")]
    assert "MERGED-CHECK" in (sync / "prompt-2.md").read_text()
    assert run.read("late.txt") == "v2"
    assert run.commits() == [run.task("early")["commit"], late["commit"]]


# -- concurrency -------------------------------------------------------------------------------


def test_run_max_parallel_is_respected_and_attempts_overlap(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    command = shell_scripts(**{t: SPAN for t in ("t1", "t2", "t3", "t4", "t5")})
    tasks = "".join(f'\n[[task]]\nid = "{t}"\n' for t in ("t1", "t2", "t3", "t4", "t5"))
    plan = write_plan(
        repo,
        f'[run]\nmax_parallel = 2\n[agents.sh]\nkind = "shell"\ncommand = {toml_str(command)}\n'
        + tasks,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    found = spans(sync)
    assert len(found) == 5
    assert max_overlap(list(found.values())) == 2


# A profile's max_parallel beside other profiles: on the inline executor, in
# test_scheduler_fakes.py (here it relied on 0.3 s sleeps overlapping; failed under load).


def test_execute_max_parallel_overrides_the_plan(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    command = shell_scripts(**{t: SPAN for t in ("t1", "t2", "t3")})
    tasks = "".join(f'\n[[task]]\nid = "{t}"\n' for t in ("t1", "t2", "t3"))
    plan = write_plan(
        repo,
        f'[run]\nmax_parallel = 3\n[agents.sh]\nkind = "shell"\ncommand = {toml_str(command)}\n'
        + tasks,
    )

    run = run_plan(plan, max_parallel=1)

    assert run.state is RunState.DONE, run.doc
    assert max_overlap(list(spans(sync).values())) == 1


# -- the user's checkout -----------------------------------------------------------------------


def checkout_state(repo: Path) -> dict[str, str]:
    """Everything about the user's checkout that a run must leave alone."""
    return {
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "index": git(repo, "ls-files", "--stage"),
        "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "tracked.txt": (repo / "tracked.txt").read_text(),
        "notes.txt": (repo / "notes.txt").read_text(),
    }


def test_the_users_checkout_is_never_touched(
    tmp_path: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a checkout with an unstaged edit, a staged file and an untracked file
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n", "tracked.txt": "committed\n"})
    (repo / "tracked.txt").write_text("the user's unsaved work\n")
    (repo / "staged.txt").write_text("staged by the user\n")
    git(repo, "add", "staged.txt")
    (repo / "notes.txt").write_text("untracked notes\n")
    command = shell_scripts(
        edit="""\
        cp tracked.txt "$SYNC/seen-$ORCHARDIST_RUN.txt"
        echo "orchardist's version" > tracked.txt
        echo "agent notes" > notes.txt
        rm README.md
        """,
        broken="echo half-done > tracked.txt; exit 1\n",
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "edit"

        [[task]]
        id = "broken"
        """,
    )
    before = checkout_state(repo)

    for _ in range(2):
        # When
        run = run_plan(plan)

        # Then
        assert run.states() == {"edit": "done", "broken": "failed"}
        assert checkout_state(repo) == before
        assert git(repo, "worktree", "list", "--porcelain").splitlines()[0] == f"worktree {repo}"
        assert len(git(repo, "worktree", "list").splitlines()) == 1
        assert (sync / f"seen-{run.run.id}.txt").read_text() == "committed\n"
        assert run.read("tracked.txt") == "orchardist's version"
        assert "staged.txt" not in run.tree()
    branches = git(repo, "branch", "--format=%(refname:short)").splitlines()
    assert branches[0] == "main"
    assert len(branches) == 3 and all(b.startswith("orchardist/") for b in branches[1:])


# -- git identity ------------------------------------------------------------------------------


@pytest.mark.parametrize("configured", [False, True], ids=["no-identity", "user-identity"])
def test_commits_work_without_a_git_identity(
    repo: Path, run_plan: RunPlan, monkeypatch: pytest.MonkeyPatch, configured: bool
) -> None:
    # Given: git knows no user (an empty global config, and no guessing from the host)
    if not configured:
        (Path.home() / ".gitconfig").write_text("")
        git(repo, "config", "user.useConfigOnly", "true")
        for role in ("AUTHOR", "COMMITTER"):
            monkeypatch.delenv(f"GIT_{role}_NAME", raising=False)
            monkeypatch.delenv(f"GIT_{role}_EMAIL", raising=False)
        monkeypatch.delenv("EMAIL", raising=False)
        ident = subprocess.run(["git", "var", "GIT_AUTHOR_IDENT"], cwd=repo, capture_output=True)
        assert ident.returncode != 0  # precondition: a plain `git commit` would fail here
    plan = write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        script = { "*" = { write = { "new.txt" = "new\\n" } } }

        [[task]]
        id = "one"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    who = git(repo, "log", "-1", "--format=%an|%cn", run.branch)
    assert who == ("Test User|Test User" if configured else "orchardist|orchardist")
    if not configured:
        unset = subprocess.run(["git", "config", "user.name"], cwd=repo, capture_output=True)
        assert unset.returncode == 1  # orchardist did not write an identity into the config


# -- order, stopping, reported usage -----------------------------------------------------------


def test_ready_tasks_start_longest_path_first_then_by_priority_then_plan_order(
    repo: Path, run_plan: RunPlan
) -> None:
    plan = write_plan(
        repo,
        """
        [run]
        max_parallel = 1

        [agents.quick]
        kind = "shell"
        command = 'echo "$ORCHARDIST_TASK" > "$ORCHARDIST_TASK.txt"'

        [[task]]
        id = "w"

        [[task]]
        id = "x"

        [[task]]
        id = "y"
        depends_on = ["x"]

        [[task]]
        id = "z"
        depends_on = ["y"]

        [[task]]
        id = "p"
        priority = 5

        [[task]]
        id = "big"
        estimate = 5
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    started = [e.task_id for e in run.events("attempt") if e.data.get("state") == "running"]
    # big: weighted path 5; x: path 3; y: 2; then p, w, z tie at 1 and p has priority
    assert started == ["big", "x", "y", "p", "w", "z"]


def test_a_stopped_run_ends_its_attempts_and_leaves_nothing_running(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: "quick" lands only once "stuck" is surely running; the run is stopped right then
    # (stuck's sleeper is found by an argument of its own: a pid from inside a pid namespace
    # means nothing here)
    tag = f"stuck-{uuid.uuid4().hex}"
    command = shell_scripts(
        stuck=f"""\
        sh -c 'sleep 60; :' {tag} &
        echo $! > "$SYNC/stuck.pid"
        wait
        """,
        quick="""\
        wait_for test -s "$SYNC/stuck.pid"
        echo quick > quick.txt
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "stuck"

        [[task]]
        id = "quick"
        """,
    )
    schedulers: list[Any] = []

    class StopAfterQuickLands(Hook):
        def on_event(self, event: Event) -> None:
            if event.kind == "merge" and event.data.get("state") == "merged":
                schedulers[0].stop("test says stop")

    run = run_plan(plan, hooks=Hooks([StopAfterQuickLands()]), on_scheduler=schedulers.append)

    assert run.state is RunState.INTERRUPTED, run.doc
    assert run.doc["state"] == "interrupted"
    assert run.task("quick")["state"] == "done"
    stuck = run.task("stuck")
    assert stuck["state"] != "done"
    assert [a["state"] for a in stuck["attempts"]] in (["interrupted"], ["cancelled"])
    assert (sync / "stuck.pid").read_text().strip()  # it did start
    assert not running_with_arg(tag), "the stuck agent outlived the stop"
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_usage_an_agent_reports_reaches_the_status(repo: Path, run_plan: RunPlan) -> None:
    plan = write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        [agents.fake.script.one]
        output = { cost_usd = 0.25, input_tokens = 100, output_tokens = 7 }
        write = { "one.txt" = "1" }
        [agents.fake.script.two]
        output = { cost_usd = 0.5 }
        write = { "two.txt" = "2" }

        [[task]]
        id = "one"

        [[task]]
        id = "two"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    [one] = run.task("one")["attempts"]
    assert (one["cost_usd"], one["input_tokens"], one["output_tokens"]) == (0.25, 100, 7)
    assert run.doc["totals"]["cost_usd"] == pytest.approx(0.75)
