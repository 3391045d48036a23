"""``orchardist fix`` and ``orchardist debug``: one pipeline task from the command line and the
config files' profiles, run like any plan."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from orchardist import load_plan
from orchardist.config import user_config
from run_support import orchardist as run_cli
from support import git

FIXER = """
[agents.fixer]
kind = "shell"
command = "echo fixed > fixed.txt"
"""
SECOND = """
[agents.second]
kind = "shell"
command = "echo second > fixed.txt"
"""


@pytest.fixture(autouse=True)
def _no_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def orchardist(
    repo: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(repo, *args, stdin=stdin, timeout_s=300)


def configure(repo: Path, text: str) -> None:
    (repo / ".orchardist.toml").write_text(text)


def oneshot_plans(repo: Path) -> list[Path]:
    folder = repo / ".git" / "orchardist" / "oneshot"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def shown_task(repo: Path, text: str) -> dict[str, Any]:
    """The task of a plan printed by --dry-run, as written; the plan validates."""
    (repo / "shown.toml").write_text(text)
    load_plan(repo / "shown.toml")
    [task] = tomllib.loads(text)["task"]
    assert isinstance(task, dict)
    return task


def test_fix_runs_the_report_with_the_configured_profile_and_lands_it(repo: Path) -> None:
    # Given: one profile in the repository's config file
    configure(repo, FIXER)

    # When
    out = orchardist(repo, "fix", "fixed.txt is missing", "--verify", "test -f fixed.txt")

    # Then: a run like `run`'s, its id printed, the fix on the run branch
    assert out.returncode == 0, out.stderr
    [plan] = oneshot_plans(repo)
    run_id = git(repo, "branch", "--list", "orchardist/*").split()[-1].removeprefix("orchardist/")
    assert f"run {run_id}: done" in out.stdout
    assert git(repo, "show", f"orchardist/{run_id}:fixed.txt") == "fixed"
    assert f"plan: {plan}" in out.stderr
    # the plan kept is a real plan: the report is its prompt, the pipeline is fix
    task = load_plan(plan).task("fix")
    assert (task.pipeline, task.prompt, task.agent) == ("fix", "fixed.txt is missing", "fixer")
    assert task.verify == ("test -f fixed.txt",)
    # and status finds the run
    status = orchardist(repo, "status", run_id, "--json")
    assert json.loads(status.stdout)["plan"] == str(plan)


def test_fix_json_prints_the_final_status_document(repo: Path) -> None:
    user = user_config()
    user.parent.mkdir(parents=True)
    user.write_text(FIXER)  # the user's config this time

    out = orchardist(repo, "fix", "broken", "--verify", "test -f fixed.txt", "--json")

    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["state"] == "done" and doc["run"] in doc["branch"]
    plan = Path(doc["plan"])
    assert plan.parent == repo / ".git" / "orchardist" / "oneshot" and "-fix-" in plan.name


def test_a_report_can_come_from_stdin(repo: Path) -> None:
    configure(repo, FIXER)
    report = 'line one\nline two with "quotes", a tab\t, a backslash \\ and é\n'

    out = orchardist(repo, "debug", "-", "--dry-run", stdin=report)

    assert out.returncode == 0, out.stderr
    task = shown_task(repo, out.stdout)
    assert task["prompt"] == report and task["title"] == "Fix: line one"
    assert oneshot_plans(repo) == []  # a dry run writes nothing


def test_the_plan_carries_agents_candidates_check_stages_and_audit(repo: Path) -> None:
    configure(repo, FIXER + SECOND)

    out = orchardist(
        repo,
        "debug",
        "parse_date accepts Feb 30",
        "--agent",
        "fixer",
        "--agent",
        "second",
        "--candidates",
        "3",
        "--check",
        "python -m pytest -q tests/test_dates.py",
        "--stage",
        "localize=second",
        "--stage",
        "reproduce=fixer,second",
        "--no-audit",
        "--retries",
        "2",
        "--timeout",
        "20m",
        "--dry-run",
    )

    assert out.returncode == 0, out.stderr
    task = shown_task(repo, out.stdout)
    assert task["pipeline"] == "debug" and task["agent"] == ["fixer", "second"]
    assert (task["candidates"], task["retries"], task["timeout"]) == (3, 2, "20m")
    assert task["check"] == "python -m pytest -q tests/test_dates.py"
    assert task["verify"] == "auto"  # no --verify: the tests of the changed files
    assert task["stages"] == {
        "audit": False,
        "localize": {"agent": "second"},
        "reproduce": {"agent": ["fixer", "second"]},
    }


def test_verify_none_opts_out(repo: Path) -> None:
    configure(repo, FIXER)
    out = orchardist(repo, "fix", "x", "--verify", "none", "--dry-run")
    assert shown_task(repo, out.stdout)["verify"] == "none"
    assert load_plan(repo / "shown.toml").task("fix").verify == ()


@pytest.mark.parametrize(
    ("config", "args", "says"),
    [
        ("", ["fix", "x"], "no agent profile is configured"),
        (FIXER, ["fix", "x", "--agent", "ghost"], "unknown agent profile 'ghost'"),
        (FIXER + SECOND, ["debug", "x"], "choose with --agent"),
        (FIXER, ["fix", "   "], "the bug report is empty"),
        (FIXER, ["fix", "x", "--candidates", "0"], "--candidates must be at least 1"),
        (FIXER, ["fix", "x", "--stage", "polish=fixer"], "unknown stage"),
        (FIXER, ["fix", "x", "--stage", "localize"], "expected NAME=PROFILE"),
        (FIXER, ["fix", "x", "--stage", "fix=ghost"], "unknown agent profile 'ghost'"),
        (FIXER, ["fix", "x", "--stage", "audit=fixer", "--no-audit"], "contradict"),
        (FIXER, ["fix", "x", "--timeout", "soon"], "--timeout"),
        (FIXER, ["fix", "x", "--verify", "none", "--verify", "true"], "--verify none"),
        (FIXER, ["fix", "x", "--check", " "], "--check needs a command"),
        ('[agents.bad]\nkind = "telepathy"\n', ["fix", "x"], ".orchardist.toml: agents.bad.kind"),
        ('[agents.a]\nkind = "aider"\n', ["debug", "x"], "--stage reproduce=PROFILE"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message_and_writes_nothing(
    repo: Path, config: str, args: list[str], says: str
) -> None:
    configure(repo, config)

    out = orchardist(repo, *args)

    assert out.returncode == 2, out.stderr
    assert says in out.stderr
    assert "Traceback" not in out.stderr
    assert oneshot_plans(repo) == []
    assert git(repo, "branch", "--list", "orchardist/*") == ""


def test_outside_a_repository_is_a_usage_error(tmp_path: Path) -> None:
    out = orchardist(tmp_path, "fix", "x")
    assert out.returncode == 2 and "not inside a git repository" in out.stderr


def test_help_names_the_options_and_the_config_files(repo: Path) -> None:
    for command in ("fix", "debug"):
        out = orchardist(repo, command, "--help")
        assert out.returncode == 0
        for word in ("--check", "--agent", "--candidates", "--verify", ".orchardist.toml"):
            assert word in out.stdout


def test_the_fix_commit_says_what_it_fixes_not_the_reports_first_line(repo: Path) -> None:
    # Given a report that is a Python traceback, and a verify with literal braces as typed
    configure(repo, FIXER)
    report = (
        "Traceback (most recent call last):\n"
        '  File "app.py", line 3, in <module>\n'
        "    parse_date('2024-02-30')\n"
        "ValueError: day is out of range for month\n"
    )
    out = orchardist(repo, "fix", report, "--verify", "test -f fixed.txt && echo '{}'")
    assert out.returncode == 0, out.stdout + out.stderr
    # Then the landed commit's subject is the exception, with no stage name appended
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    subject = git(repo, "log", "-1", "--format=%s", branch)
    assert subject == "Fix: ValueError: day is out of range for month"
