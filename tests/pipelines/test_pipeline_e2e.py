"""Debug and fix pipelines end to end: the real CLI, shell agents, real pytest reproductions.

Each stage's agent is a shell script (``{task}.sh``: ``bug.reproduce.sh``, ``bug.sh`` ...), see
pipeline_support.py. The reproductions are pytest runs; the run's verify is the suite's one
assertion run by ``python -c`` (``MEAN_WORKS``), not pytest: none of these tests is about how a
suite's results are judged (tests/verify/ is), a pytest run costs ~0.4 s of CPU, and every
stage's attempt and merge runs the verify.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from orchardist.confine import landlock as sandbox
from pipeline_support import (
    AUDIT_SH,
    BUG,
    FIX_SH,
    LOCALIZE_SH,
    REPRO,
    REPRODUCE_SH,
    add_project,
    repro_exit,
    stage_plan,
    status_json,
    tasks_of,
)
from run_support import leftovers, only_run, orchardist
from support import git, toml_str

MEAN_WORKS = "python -c 'from calc import mean; assert mean([1, 2, 3]) == 2'"  # the suite's test


@pytest.fixture
def project(repo: Path) -> Path:
    """A repository with a buggy ``mean`` and a passing pytest suite."""
    return add_project(repo)


def test_a_debug_pipeline_rejects_an_easy_reproduction_and_lands_the_minimal_fix_with_its_test(
    project: Path, shell_scripts: Callable[..., str], tmp_path: Path
) -> None:
    # Given: a debug task whose first reproduction passes on the base, whose second fails;
    # a localize stage naming calc.py; three fix candidates: wrong, bloated and minimal
    plan = stage_plan(
        project,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "debug"
        candidates = 3
        stages.reproduce.retries = 1
        """,
        verify=MEAN_WORKS,
        **{
            "bug.reproduce": REPRODUCE_SH,
            "bug.audit": AUDIT_SH,
            "bug.localize": LOCALIZE_SH,
            "bug": FIX_SH,
        },
    )

    # When: it runs through the CLI
    ran = orchardist(project, "run", str(plan))

    # Then: the run is done, and status --json shows each stage, its attempts and its handoff
    assert ran.returncode == 0, ran.stdout + ran.stderr
    doc = status_json(project)
    tasks = tasks_of(doc)
    assert doc["state"] == "done"
    repro = tasks["bug.reproduce"]
    assert (repro["stage"], repro["pipeline"]) == ("reproduce", "bug")
    first, second = repro["attempts"]
    assert first["state"] == "failed"
    assert first["detail"].startswith("does_not_reproduce: `python -m pytest -q tests/test_bug.py`")
    assert second["state"] == "merged"
    assert repro["handoff"]["repro_cmd"] == REPRO
    audit = tasks["bug.audit"]
    assert audit["stage"] == "audit"
    assert [a["agent"] for a in audit["attempts"]] == ["auditor"]  # another profile by default
    assert audit["handoff"]["verdict"] == "ok"
    localize = tasks["bug.localize"]
    assert localize["handoff"] == {"files": ["calc.py"], "symbols": ["mean"]}
    fix = tasks["bug"]
    assert fix["stage"] == "fix"
    states = {a["candidate"]: (a["state"], a["failure"]) for a in fix["attempts"]}
    assert states == {0: ("failed", "verify_failed"), 1: ("passed", None), 2: ("merged", None)}
    assert fix["attempts"][1]["selection"].startswith("lost to candidate 2: larger diff")

    # and the minimal fix landed as one commit holding the reproduction test and the fix
    base, branch = doc["base"], doc["branch"]
    commits = git(project, "rev-list", f"{base}..{branch}").split()
    assert len(commits) == 1
    changed = git(project, "diff", "--name-only", base, branch).split()
    assert sorted(changed) == ["calc.py", "tests/test_bug.py"]
    assert "if not xs:" in git(project, "show", f"{branch}:calc.py")
    # and the reproduction fails on the base and passes on the run branch
    test_file = tmp_path / "test_bug.py"
    test_file.write_text(git(project, "show", f"{branch}:tests/test_bug.py") + "\n")
    assert repro_exit(project, base, tmp_path, "on-base", test_file) == 1
    assert repro_exit(project, branch, tmp_path, "on-branch", None) == 0
    assert leftovers(project, only_run(project)) == []


def test_a_fix_pipeline_whose_single_shot_changes_nothing_escalates_to_the_debug_stages(
    project: Path, shell_scripts: Callable[..., str]
) -> None:
    # Given: a fix task whose single shot changes nothing, then a debug pipeline that works
    plan = stage_plan(
        project,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "fix"
        stages.audit = false
        stages.fix.candidates = 1
        """,
        verify=MEAN_WORKS,
        **{
            "bug.shot": """
            [ "$ORCHARDIST_STAGE" = fix ] || exit 3
            echo "I looked at calc.py and found nothing to change"
            """,
            "bug.reproduce": """
            grep -q 'found nothing to change' "$ORCHARDIST_INPUTS" || exit 3
            grep -q 'no_changes' "$ORCHARDIST_PROMPT_FILE" || exit 3
            printf '\\n\\ndef test_empty():\\n    assert mean([]) == 0.0\\n' >> tests/test_calc.py
            printf '{"handoff": {"repro_cmd": "python -m pytest -q tests/test_calc.py"}}' \
              > "$ORCHARDIST_OUTPUT"
            """,
            "bug.localize": LOCALIZE_SH.replace("grep -q '\"audit\"'", "grep -q repro_cmd"),
            # the reproduction extends an existing test file: on the run branch alone the
            # command passes, so the fix's check is judged on the branch plus the reproduction
            "bug": FIX_SH.replace('"$ORCHARDIST_CANDIDATE"', "2")
            .replace("test -f tests/test_bug.py", "grep -q test_empty tests/test_calc.py")
            .replace("'tests/test_bug.py'", "'tests/test_calc.py'"),
        },
    )

    # When: it runs
    ran = orchardist(project, "run", str(plan))

    # Then: the shot is skipped as escalated, the escalation is an event, and the debug
    # stages land the fix with its test
    assert ran.returncode == 0, ran.stdout + ran.stderr
    doc = status_json(project)
    tasks = tasks_of(doc)
    shot = tasks["bug.shot"]
    assert shot["state"] == "skipped"
    assert shot["reason"].startswith("escalated to the debug pipeline: no_changes")
    assert [a["failure"] for a in shot["attempts"]] == ["no_changes"]
    assert "bug.audit" not in tasks
    assert tasks["bug"]["state"] == "done"
    events = orchardist(project, "events")
    assert events.returncode == 0, events.stderr
    escalations = [
        e for e in map(json.loads, events.stdout.splitlines()) if e["kind"] == "escalation"
    ]
    assert len(escalations) == 1, events.stdout
    assert escalations[0]["task"] == "bug"
    assert escalations[0]["data"]["shot"] == "bug.shot"
    assert "found nothing to change" in escalations[0]["data"]["output"]
    changed = git(project, "diff", "--name-only", doc["base"], doc["branch"]).split()
    assert sorted(changed) == ["calc.py", "tests/test_calc.py"]
    assert "check" in tasks["bug"]["attempts"][-1]["detail"]


def test_a_fix_pipeline_whose_single_shot_lands_skips_the_debug_stages(
    project: Path, shell_scripts: Callable[..., str]
) -> None:
    # Given: a fix task with a check, whose single shot fixes the bug
    plan = stage_plan(
        project,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "fix"
        check = "python -c 'from calc import mean; assert mean([]) == 0.0'"

        [[task]]
        id = "after"
        agent = "sh"
        depends_on = ["bug"]
        verify = "none"
        """,
        verify=MEAN_WORKS,
        **{
            "bug.shot": FIX_SH.replace('"$ORCHARDIST_CANDIDATE"', "2")
            .replace("test -f tests/test_bug.py || exit 3", "")
            .replace('grep -q \'"calc.py"\' "$ORCHARDIST_INPUTS" || exit 3', "")
            .replace("grep -q 'tests/test_bug.py' \"$ORCHARDIST_PROMPT_FILE\" || exit 3", ""),
            "after": "echo after > after.txt\n",
        },
    )

    # When: it runs
    ran = orchardist(project, "run", str(plan))

    # Then: the shot landed, the other stages were skipped, the task is done with the shot's
    # commit, and its dependent ran after it
    assert ran.returncode == 0, ran.stdout + ran.stderr
    tasks = tasks_of(status_json(project))
    assert tasks["bug.shot"]["state"] == "done"
    assert tasks["bug.localize"]["state"] == "skipped"
    assert tasks["bug.localize"]["attempts"] == []
    assert tasks["bug"]["state"] == "done"
    shot_commit = tasks["bug.shot"]["commit"]
    assert (
        tasks["bug"]["reason"] == f"landed by its single shot (bug.shot, commit {shot_commit[:12]})"
    )
    assert tasks["bug"]["commit"] is None  # the commit is the shot's: rewinds see one owner
    assert tasks["after"]["state"] == "done"


@pytest.mark.parametrize("confined", [True, False])
def test_a_localize_stage_cannot_change_the_repository(
    project: Path, shell_scripts: Callable[..., str], sync: Path, confined: bool
) -> None:
    # Given: a debug task naming its failing check (no reproduce, no audit), whose localize
    # agent tries to edit calc.py on its first attempt
    plan = stage_plan(
        project,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "debug"
        check = "python -c 'from calc import mean; assert mean([]) == 0.0'"
        stages.localize.retries = 1
        """,
        run="" if confined else "sandbox = false",
        verify=MEAN_WORKS,
        **{
            "bug.localize": """
            if [ "$ORCHARDIST_ATTEMPT" = 1 ] && echo "# sneaky" >> calc.py 2>/dev/null; then
              touch "$SYNC/wrote"
            fi
            printf '{"handoff": {"files": ["calc.py"]}}' > "$ORCHARDIST_OUTPUT"
            """,
            "bug": FIX_SH.replace('"$ORCHARDIST_CANDIDATE"', "2")
            .replace("test -f tests/test_bug.py || exit 3", "")
            .replace("grep -q 'tests/test_bug.py' \"$ORCHARDIST_PROMPT_FILE\" || exit 3", ""),
        },
    )

    # When: it runs
    ran = orchardist(project, "run", str(plan))

    # Then: the write was refused by the sandbox, or the change failed the attempt; either
    # way nothing of it landed, and the fix did
    assert ran.returncode == 0, ran.stdout + ran.stderr
    tasks = tasks_of(status_json(project))
    assert [t for t in tasks if t.startswith("bug.")] == ["bug.localize"]
    first = tasks["bug.localize"]["attempts"][0]
    if confined and sandbox.available():
        assert not (sync / "wrote").exists()
        assert first["state"] == "merged"
    else:
        assert (sync / "wrote").exists()
        assert first["detail"].startswith("localize changed files")
        assert tasks["bug.localize"]["attempts"][1]["state"] == "merged"
    doc = status_json(project)
    assert "sneaky" not in git(project, "show", f"{doc['branch']}:calc.py")


def test_a_landed_shot_replayed_after_a_regression_rewind_keeps_its_pipeline_done(
    project: Path, shell_scripts: Callable[..., str]
) -> None:
    # Given: an unrelated task that breaks the run branch's regression check on its first
    # attempt and lands first, then a fix pipeline whose shot lands; the check runs after both
    plan = stage_plan(
        project,
        shell_scripts,
        f"""
        [[task]]
        id = "bad"
        agent = "sh"
        verify = "none"

        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "fix"
        depends_on = ["bad"]
        check = "python -c 'from calc import mean; assert mean([]) == 0.0'"
        """,
        run='regression = "test ! -f bad.txt"\nregression_every = 2',
        verify=MEAN_WORKS,
        **{
            "bad": """
            if [ "$ORCHARDIST_ATTEMPT" = 1 ]; then echo bad > bad.txt; else echo ok > ok.txt; fi
            """,
            "bug.shot": 'printf "def mean(xs):\\n    return sum(xs) / len(xs) if xs else 0.0\\n"'
            " > calc.py\n",
        },
    )

    # When: it runs (the check fails after both merged, is bisected to bad, which is taken off
    # the branch and re-run, and the shot's commit is replayed on top)
    ran = orchardist(project, "run", str(plan))

    # Then: the run is done, bug is done, and the branch holds bad's re-run and the shot's fix
    assert ran.returncode == 0, ran.stdout + ran.stderr
    doc = status_json(project)
    tasks = tasks_of(doc)
    assert (tasks["bug"]["state"], tasks["bug.shot"]["state"]) == ("done", "done")
    assert [a["state"] for a in tasks["bad"]["attempts"]] == ["failed", "merged"]
    changed = git(project, "diff", "--name-only", doc["base"], doc["branch"]).split()
    assert sorted(changed) == ["calc.py", "ok.txt"]
