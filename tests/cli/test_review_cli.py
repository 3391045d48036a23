"""Review gates through the real CLI: a reviewed task's verified patch waits for a person;
``orchardist review`` approves, asks for changes or rejects, while the orchestrator runs and
while none does (then ``resume``); a decision is acted on once, even across a kill -9."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist import Workspace
from run_support import (
    Gate,
    has_run,
    leftovers,
    only_run,
    orchardist,
    status,
    task_trailers,
    wait_until,
)
from support import git, toml_str, write_plan

Launch = Callable[..., subprocess.Popen[bytes]]
Scripts = Callable[..., str]

# ``a`` is reviewed: its first attempt writes three lines, later ones (after a change request)
# need the reviewed patch in their worktree and add a fourth; each leaves its prompt in $SYNC.
A_SH = """
if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then
  printf 'one\\ntwo\\nthree\\n' > a.txt
else
  grep -q three a.txt || exit 7
  echo four >> a.txt
fi
cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/a-prompt-$ORCHARDIST_ATTEMPT"
"""
# ``slow`` keeps the orchestrator busy until the test opens the gate $SYNC/release (60 s at
# most; ``release``)
SLOW_SH = """
flock -s -w 60 "$SYNC/release" true || exit 9
echo slow > slow.txt
"""


def plan(repo: Path, command: str, tasks: str = "", verify_a: str = "test -f a.txt") -> None:
    """``a`` (reviewed) and ``b`` after it; ``c`` on its own; more ``tasks`` if given."""
    write_plan(
        repo,
        f"""
        [run]
        review = "human"

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "a"
        agent = "sh"
        prompt = "write a.txt"
        verify = {toml_str(verify_a)}

        [[task]]
        id = "b"
        agent = "sh"
        prompt = "write b.txt"
        depends_on = ["a"]
        review = "auto"
        verify = "test -f b.txt"

        [[task]]
        id = "c"
        agent = "sh"
        prompt = "write c.txt"
        review = "auto"
        verify = "test -f c.txt"
        {tasks}
        """,
        commit=True,
    )


SLOW_TASK = """
        [[task]]
        id = "slow"
        agent = "sh"
        prompt = "wait"
        review = "auto"
        verify = "test -f slow.txt"
"""


def scripts(shell_scripts: Scripts, **more: str) -> str:
    bodies = {
        "a": A_SH,
        "b": "echo b > b.txt",
        "c": "echo c > c.txt",
        "slow": SLOW_SH,
        **more,
    }
    return shell_scripts(**bodies)


@pytest.fixture
def release(sync: Path) -> Iterator[Gate]:
    """The gate ``slow`` waits at, shut until the test opens it."""
    with Gate(sync / "release") as gate:
        yield gate


def states(doc: dict[str, Any]) -> dict[str, str]:
    return {t["id"]: t["state"] for t in doc["tasks"]}


def review_events(repo: Path, run_id: str, state: str) -> list[dict[str, Any]]:
    ws = Workspace.open(repo)
    try:
        found = [e for e in ws.store.events(run_id) if e.kind == "review"]
        return [dict(e.data) for e in found if e.data.get("state") == state]
    finally:
        ws.store.close()


def ran_to_review(repo: Path) -> str:
    """Run the plan with no orchestrator left: it ends awaiting review, exit 3."""
    done = orchardist(repo, "run", "plan.toml")
    assert done.returncode == 3, done.stdout + done.stderr
    run_id = only_run(repo)
    doc = status(repo, run_id)
    assert doc["state"] == "awaiting_review"
    assert states(doc) == {"a": "awaiting_review", "b": "pending", "c": "done"}
    assert f"review a: review_requested (orchardist review {run_id} a)" in done.stdout
    assert f"orchardist review {run_id}\n" in done.stdout  # the summary's next step
    return run_id


def review(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = orchardist(repo, "review", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


# -- with no orchestrator: decide, then resume ----------------------------------------------


def test_a_reviewed_task_waits_and_the_run_ends_awaiting_review_until_approved_and_resumed(
    repo: Path, shell_scripts: Scripts
) -> None:
    # Given: a run whose reviewed task passed; the task that depends on it waits, the other merged
    plan(repo, scripts(shell_scripts))
    run_id = ran_to_review(repo)
    doc = status(repo, run_id)
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["c"]
    assert leftovers(repo, run_id) == []
    (listed_run,) = orchardist(repo, "runs").stdout.splitlines()[1:]
    assert listed_run.split()[:2] == [run_id, "awaiting_review"]
    assert "a                    awaiting_review" in orchardist(repo, "status").stdout

    # When: the listing, the diff, then an approval with no orchestrator running
    listed = json.loads(review(repo, "--json").stdout)
    diff = review(repo, run_id, "a", "--diff")
    approved = review(repo, run_id[:12], "a", "--approve", "-m", "looks right")

    # Then: it lists the task with its agent and diff stat, prints the diff, records who
    assert [(p["run_id"], p["task_id"], p["agent"]) for p in listed] == [(run_id, "a", "sh")]
    assert (listed[0]["title"], listed[0]["decided"]) == ("a", "")
    assert listed[0]["diffstat"] == "1 file changed, 3 insertions(+)"
    assert "test -f a.txt" in listed[0]["verify"]
    assert "+two" in diff.stdout
    assert approved.returncode == 0, approved.stderr
    assert f"`orchardist resume {run_id}` acts on it" in approved.stdout
    (waiting,) = json.loads(review(repo, "--json").stdout)
    assert (waiting["decided"], waiting["since"]) == (
        f"approve by {getpass.getuser()}",
        listed[0]["since"],
    )
    assert "decided: approve by" in review(repo).stdout
    (decided,) = review_events(repo, run_id, "decided")
    assert (decided["verdict"], decided["who"], decided["text"]) == (
        "approve",
        getpass.getuser(),
        "looks right",
    )

    # When: the run is resumed, it merges a, then b runs
    resumed = orchardist(repo, "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    assert states(doc) == {"a": "done", "b": "done", "c": "done"}
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["c", "a", "b"]
    assert len(review_events(repo, run_id, "applied")) == 1
    assert review(repo, run_id).stdout.strip() == "nothing awaits review"


def test_a_rejection_fails_the_task_with_its_reason_and_blocks_its_dependents(
    repo: Path, shell_scripts: Scripts
) -> None:
    plan(repo, scripts(shell_scripts))
    run_id = ran_to_review(repo)

    rejected = review(repo, run_id, "a", "--reject", "-m", "wrong approach")
    resumed = orchardist(repo, "resume", run_id)

    assert rejected.returncode == 0, rejected.stderr
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    assert states(doc) == {"a": "failed", "b": "blocked", "c": "done"}
    reasons = {t["id"]: t["reason"] for t in doc["tasks"]}
    assert reasons["a"] == f"rejected by {getpass.getuser()}: wrong approach"
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["c"]


def test_a_change_request_runs_the_agent_again_from_its_patch_told_the_text_and_quoted_line(
    repo: Path, sync: Path, shell_scripts: Scripts
) -> None:
    # Given: a run awaiting review of a's three lines
    plan(repo, scripts(shell_scripts))
    run_id = ran_to_review(repo)

    # When: changes are asked for, with a comment on line 2, and the run is resumed
    asked = review(
        repo,
        run_id,
        "a",
        "--changes",
        "Add a fourth line.",
        "--line",
        "a.txt:2",
        "is this the second line?",
    )
    assert asked.returncode == 0, asked.stderr
    resumed = orchardist(repo, "resume", run_id)

    # Then: the second attempt's prompt holds the request, the quoted line and the old diff;
    # it started from the reviewed patch (its script needs a.txt), and comes back to review
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    prompt = (sync / "a-prompt-2").read_text()
    assert "Add a fourth line." in prompt
    assert "is this the second line?" in prompt
    assert "> 2 | two" in prompt
    assert "+three" in prompt
    assert not (sync / "a-prompt-3").exists()
    assert states(status(repo, run_id))["a"] == "awaiting_review"
    assert "+four" in review(repo, run_id, "a", "--diff").stdout

    # And: once approved, the branch has all four lines from one commit of a
    review(repo, run_id, "a", "--approve")
    assert orchardist(repo, "resume", run_id).returncode == 0
    doc = status(repo, run_id)
    assert git(repo, "show", f"{doc['branch']}:a.txt").split() == ["one", "two", "three", "four"]
    assert task_trailers(repo, doc["base"], doc["branch"]) == ["c", "a", "b"]


def test_a_reviewed_patch_that_no_longer_applies_leaves_the_change_request_its_diff(
    repo: Path, sync: Path, shell_scripts: Scripts
) -> None:
    # Given: c, merged while a awaited review, wrote its own a.txt: a's patch conflicts now
    second = """
    if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then printf 'one\\ntwo\\nthree\\n' > a.txt; exit 0; fi
    if [ "$(cat a.txt)" = c ] && grep -q '^+three' "$ORCHARDIST_PROMPT_FILE"; then
      touch "$SYNC/from-the-tip-with-the-diff"
    fi
    printf 'one\\ntwo\\nthree\\nfour\\n' > a.txt
    """
    plan(repo, scripts(shell_scripts, a=second, c="echo c > c.txt; echo c > a.txt"))
    run_id = ran_to_review(repo)

    # When: changes are asked for
    review(repo, run_id, "a", "--changes", "Add four.")
    resumed = orchardist(repo, "resume", run_id)

    # Then: the new attempt started from the run branch, its prompt holding the old diff
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert (sync / "from-the-tip-with-the-diff").exists()


def test_decisions_that_cannot_be_taken_are_usage_errors_that_change_nothing(
    repo: Path, shell_scripts: Scripts
) -> None:
    plan(repo, scripts(shell_scripts))
    run_id = ran_to_review(repo)

    cases = {
        ("c", "--approve"): "task 'c' is done, not awaiting review",
        ("ghost", "--approve"): "has no task 'ghost'",
        ("a", "--changes", "x", "--line", "b.txt:1", "y"): "the patch changes no file 'b.txt'",
        ("a", "--changes", "x", "--line", "a.txt:4", "y"): "line out of range (a.txt has 3",
        ("a", "--changes", "x", "--line", "a.txt", "y"): "expected PATH:LINE",
        ("a", "--approve", "--line", "a.txt:1", "y"): "--line goes with --changes",
    }
    for args, message in cases.items():
        done = review(repo, run_id, *args)
        assert (done.returncode, message in done.stderr) == (2, True), (args, done.stderr)
    unknown = review(repo, "nope", "a", "--approve")
    assert unknown.returncode == 2
    assert "no run matches 'nope'" in unknown.stderr
    assert review_events(repo, run_id, "decided") == []

    # a second decision on the same patch is refused too
    assert review(repo, run_id, "a", "--reject").returncode == 0
    twice = review(repo, run_id, "a", "--approve")
    assert twice.returncode == 2
    assert "was decided already (reject by" in twice.stderr


# -- while the orchestrator runs -------------------------------------------------------------


def live_run_at_review(
    repo: Path, sync: Path, launch: Launch
) -> tuple[subprocess.Popen[bytes], str]:
    """A live orchestrator: a awaits review while ``slow`` waits for $SYNC/release."""
    proc = launch("run", "plan.toml")
    wait_until("the run to be recorded", lambda: has_run(repo), timeout_s=60)
    run_id = only_run(repo)
    wait_until(
        "a to await review",
        lambda: states(status(repo, run_id))["a"] == "awaiting_review",
        timeout_s=60,
    )
    assert proc.poll() is None
    return proc, run_id


def test_an_approval_reaches_the_live_orchestrator_which_merges_at_once(
    repo: Path, sync: Path, shell_scripts: Scripts, launch: Launch, release: Gate
) -> None:
    # Given: a live run whose reviewed task awaits review while another task is at work
    plan(repo, scripts(shell_scripts), SLOW_TASK)
    proc, run_id = live_run_at_review(repo, sync, launch)

    # When: it is approved from another process
    approved = review(repo, run_id, "a", "--approve")

    # Then: the same orchestrator merges it (and starts b) while slow still waits
    assert "the orchestrator driving the run acts on it now" in approved.stdout
    wait_until("a to merge", lambda: states(status(repo, run_id))["b"] == "done", timeout_s=60)
    assert proc.poll() is None
    release.open()
    assert proc.wait(timeout=60) == 0
    doc = status(repo, run_id)
    trailers = task_trailers(repo, doc["base"], doc["branch"])
    assert sorted(trailers) == ["a", "b", "c", "slow"]
    applied = {"state": "applied", "verdict": "approve", "who": getpass.getuser()}
    assert review_events(repo, run_id, "applied") == [applied]


def test_a_rejection_reaches_the_live_orchestrator(
    repo: Path, sync: Path, shell_scripts: Scripts, launch: Launch, release: Gate
) -> None:
    plan(repo, scripts(shell_scripts), SLOW_TASK)
    proc, run_id = live_run_at_review(repo, sync, launch)

    review(repo, run_id, "a", "--reject", "-m", "no")

    wait_until("a to fail", lambda: states(status(repo, run_id))["b"] == "blocked", timeout_s=60)
    assert proc.poll() is None
    release.open()
    assert proc.wait(timeout=60) == 1
    assert states(status(repo, run_id)) == {
        "a": "failed",
        "b": "blocked",
        "c": "done",
        "slow": "done",
    }


def test_a_change_request_reaches_the_live_orchestrator_and_comes_back_to_review(
    repo: Path, sync: Path, shell_scripts: Scripts, launch: Launch, release: Gate
) -> None:
    plan(repo, scripts(shell_scripts), SLOW_TASK)
    proc, run_id = live_run_at_review(repo, sync, launch)

    review(repo, run_id, "a", "--changes", "Add four.", "--line", "a.txt:3", "after this")

    wait_until("the second attempt", (sync / "a-prompt-2").exists, timeout_s=60)
    wait_until(
        "a to await review again",
        lambda: [p["attempt"] for p in json.loads(review(repo, "--json").stdout)] == [2],
        timeout_s=60,
    )
    assert proc.poll() is None
    release.open()
    assert proc.wait(timeout=60) == 3  # only the review is left
    prompt = (sync / "a-prompt-2").read_text()
    assert "Add four." in prompt
    assert "three" in prompt.split("after this")[0]


# -- nothing lost, nothing twice: kill -9 while a decision is acted on ------------------------


def test_an_approval_whose_merge_verification_is_killed_is_merged_once_on_resume(
    repo: Path, sync: Path, shell_scripts: Scripts, launch: Launch, release: Gate
) -> None:
    # Given: a's merge onto the moved tip (c landed since a's base) hangs in its verify, once
    once = sync / "merge-verify"
    hang = (
        f"[ ! -f c.txt ] || [ -f {once} ] || {{{{ touch {once}; sleep 600; }}}}"  # {{ }}: a brace
    )
    plan(repo, scripts(shell_scripts), SLOW_TASK, verify_a=f"test -f a.txt && {{{{ {hang}; }}}}")
    proc, run_id = live_run_at_review(repo, sync, launch)
    wait_until("c to merge", lambda: states(status(repo, run_id))["c"] == "done", timeout_s=60)

    # When: approved, and the orchestrator is killed while the merged tree is verified
    review(repo, run_id, "a", "--approve")
    wait_until("the merge's verification", once.exists, timeout_s=60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert states(status(repo, run_id))["a"] == "merging"
    release.open()
    resumed = orchardist(repo, "resume", run_id)

    # Then: the approval was applied once: one commit of a, its one attempt, one applied event
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    assert task_trailers(repo, doc["base"], doc["branch"]).count("a") == 1
    assert [a["state"] for t in doc["tasks"] if t["id"] == "a" for a in t["attempts"]] == ["merged"]
    assert len(review_events(repo, run_id, "applied")) == 1
    assert leftovers(repo, run_id) == []


def test_a_change_request_whose_attempt_is_killed_runs_one_new_attempt_on_resume(
    repo: Path, sync: Path, shell_scripts: Scripts, launch: Launch, release: Gate
) -> None:
    # Given: a's second attempt (the change request's) hangs the first time it runs
    a_sh = A_SH.replace(
        "else\n",
        'else\n  [ "$ORCHARDIST_ATTEMPT" != 2 ] || { touch "$SYNC/a-2"; sleep 600; }\n',
        1,
    )
    plan(repo, scripts(shell_scripts, a=a_sh), SLOW_TASK)
    proc, run_id = live_run_at_review(repo, sync, launch)

    # When: changes are asked for, and the orchestrator is killed while that attempt runs
    review(repo, run_id, "a", "--changes", "Add four.")
    wait_until("the change request's attempt", (sync / "a-2").exists, timeout_s=60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    release.open()
    resumed = orchardist(repo, "resume", run_id)

    # Then: one new attempt ran, told the same request, and a awaits review again
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    doc = status(repo, run_id)
    attempts = [a["state"] for t in doc["tasks"] if t["id"] == "a" for a in t["attempts"]]
    assert attempts == ["passed", "interrupted", "passed"]
    assert "Add four." in (sync / "a-prompt-3").read_text()
    assert len(review_events(repo, run_id, "applied")) == 1
    assert states(doc)["a"] == "awaiting_review"
    assert leftovers(repo, run_id) == []
