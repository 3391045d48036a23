"""Bad inputs through the command line: each is refused with a located message and exit 2,
prints no traceback, and leaves nothing behind (no state directory, no branch).

The table here is the one in the closing note of issue 10 (notes/cli-inputs.md). Its ~150 bad
plans go through ``orchardist.cli.main`` in this process (what the console script calls: an
exception escaping it fails the test as a traceback would); the rest of the file, and one plan
of the table, go through the real console entry point in a process of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchardist.cli import main
from run_support import orchardist as run_cli
from support import git

AGENT = '[agents.bot]\nkind = "shell"\ncommand = "true"\n'


def task(body: str, agent: str = AGENT) -> str:
    """A plan of one agent profile and one task with ``body`` lines."""
    return agent + "[[task]]\n" + textwrap.dedent(body)


def orchardist(cwd: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, in ``cwd``, without a terminal."""
    return run_cli(cwd, *argv, stdin=stdin)


def in_process(
    cwd: Path, *argv: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """``orchardist.cli.main(argv)`` in ``cwd``, its output as a finished process's."""
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["orchardist", *argv], code, out, err)


# (name, plan text, what stderr must say). Every one: exit 2 from validate and from run.
PLANS: list[tuple[str, str, str]] = [
    # task ids: git ref-name rules and a length cap
    ("id .", task('id = "."\n'), "id: must not start with '.'"),
    ("id ..", task('id = ".."\n'), "id: must not start with '.'"),
    ("id a..b", task('id = "a..b"\n'), "id: must not contain '..'"),
    ("id .hidden", task('id = ".hidden"\n'), "id: must not start with '.'"),
    ("id of 300 chars", task(f'id = "{"x" * 300}"\n'), "id: at most 64 characters"),
    ("id of 65 chars", task(f'id = "{"y" * 65}"\n'), "at most 64 characters (this one has 65)"),
    ("id -x", task('id = "-x"\n'), "must not start with '.' or '-'"),
    ("id x.lock", task('id = "x.lock"\n'), "must not end with '.' or '.lock'"),
    ("id end.", task('id = "end."\n'), "must not end with '.' or '.lock'"),
    ("id a/b", task('id = "a/b"\n'), "id: required, and must match"),
    ("id a b", task('id = "a b"\n'), "id: required, and must match"),
    ("id empty", task('id = ""\n'), "id: required, and must match"),
    ("id @{", task('id = "@{"\n'), "id: required, and must match"),
    ("id non-ASCII", task('id = "tâche"\n'), "id: required, and must match"),
    ("id a number", task("id = 7\n"), "'#1': id: required, and must match"),
    ("id missing", task('prompt = "x"\n'), "'#1': id: required"),
    # durations: positive, finite, at most 366 days
    (
        "deadline 99999999999d",
        '[run]\ndeadline = "99999999999d"\n' + task('id = "t"\n'),
        "run.deadline: bad duration '99999999999d': at most 366d",
    ),
    (
        "launch_interval 1e308",
        task('id = "t"\n', AGENT + "launch_interval = 1e308\n"),
        "agents.bot.launch_interval: a duration must be at most 366d",
    ),
    ("timeout 1e308", task('id = "t"\ntimeout = 1e308\n'), "timeout: a duration must be at most"),
    ("timeout 367d", task('id = "t"\ntimeout = "367d"\n'), "timeout: bad duration '367d'"),
    ("timeout nan", task('id = "t"\ntimeout = nan\n'), "timeout: a duration must be positive"),
    ("timeout -inf", task('id = "t"\ntimeout = -inf\n'), "timeout: a duration must be positive"),
    ("timeout 0", task('id = "t"\ntimeout = 0\n'), "timeout: a duration must be positive"),
    ("timeout -5s", task('id = "t"\ntimeout = "-5s"\n'), "timeout: bad duration '-5s'"),
    ("timeout 5 minutes", task('id = "t"\ntimeout = "5 minutes"\n'), "timeout: bad duration"),
    ("timeout true", task('id = "t"\ntimeout = true\n'), "timeout: expected a duration"),
    (
        "retry_backoff 1e400",
        "[run]\nretry_backoff = 1e400\n" + task('id = "t"\n'),
        "run.retry_backoff: a duration must be positive and finite",
    ),
    (
        "cooldown 400d",
        task('id = "t"\n', AGENT + 'cooldown = "400d"\n'),
        "agents.bot.cooldown: bad duration '400d'",
    ),
    # numbers: finite and in range
    ("max_cost_usd nan", task('id = "t"\nmax_cost_usd = nan\n'), "expected a finite number"),
    ("max_cost_usd inf", task('id = "t"\nmax_cost_usd = inf\n'), "expected a finite number"),
    (
        "run max_cost_usd -1",
        "[run]\nmax_cost_usd = -1\n" + task('id = "t"\n'),
        "run.max_cost_usd: expected a positive number",
    ),
    ("estimate inf", task('id = "t"\nestimate = inf\n'), "estimate: expected a positive number"),
    ("estimate -1", task('id = "t"\nestimate = -1\n'), "estimate: expected a positive number"),
    ("max_patch_mb inf", "[run]\nmax_patch_mb = inf\n" + task('id = "t"\n'), "finite number"),
    ("max_parallel 0", "[run]\nmax_parallel = 0\n" + task('id = "t"\n'), "whole number ≥ 1"),
    ("max_parallel 1.5", "[run]\nmax_parallel = 1.5\n" + task('id = "t"\n'), "whole number ≥ 1"),
    ("retries -1", task('id = "t"\nretries = -1\n'), "retries: expected a whole number ≥ 0"),
    ("retries true", task('id = "t"\nretries = true\n'), "retries: expected a whole number ≥ 0"),
    ("candidates 0", task('id = "t"\ncandidates = 0\n'), "candidates: expected a whole number"),
    ("priority high", task('id = "t"\npriority = "high"\n'), "priority: expected an integer"),
    # paths: relative, inside the repository
    ("workdir /tmp/x", task('id = "t"\nworkdir = "/tmp/x"\n'), "workdir: must be a path relative"),
    ("workdir ../..", task('id = "t"\nworkdir = "../.."\n'), "workdir: '../..' leaves the repo"),
    ("workdir a/../../b", task('id = "t"\nworkdir = "a/../../b"\n'), "leaves the repository"),
    (
        "run workdir /",
        '[run]\nworkdir = "/"\n' + task('id = "t"\n'),
        "run.workdir: must be a path relative",
    ),
    ("prompt_file missing", task('id = "t"\nprompt_file = "nope.md"\n'), "cannot read 'nope.md'"),
    ("run.repo elsewhere", '[run]\nrepo = "/"\n' + task('id = "t"\n'), "is not inside a git"),
    # NUL bytes anywhere
    ("NUL in prompt", task('id = "t"\nprompt = "a\\u0000b"\n'), "prompt: contains a NUL byte"),
    ("NUL in title", task('id = "t"\ntitle = "a\\u0000b"\n'), "title: contains a NUL byte"),
    (
        "NUL in command",
        task('id = "t"\n', '[agents.bot]\nkind = "shell"\ncommand = "true\\u0000"\n'),
        "agents.bot.command: contains a NUL byte",
    ),
    ("NUL in verify", task('id = "t"\nverify = ["a\\u0000"]\n'), "verify[0]: contains a NUL"),
    # placeholders
    (
        "{attempt} in verify",
        task('id = "t"\nverify = "echo {attempt}"\n'),
        "verify: {attempt} is only filled in agent commands",
    ),
    (
        "{worktree} in check",
        task('id = "t"\ncheck = "ls {worktree}"\n'),
        "check: {worktree} is only filled in agent commands",
    ),
    (
        "{run} in run.verify",
        '[run]\nverify = "echo {run}"\n' + task('id = "t"\n'),
        "run.verify: {run} is only filled in agent commands",
    ),
    (
        "{task} in regression",
        '[run]\nregression = "echo {task}"\n' + task('id = "t"\n'),
        "run.regression: {task} is not filled in regression commands",
    ),
    (
        "{bogus} in an agent command",
        task('id = "t"\n', '[agents.bot]\nkind = "shell"\ncommand = "do {bogus}"\n'),
        "unknown placeholder {bogus}",
    ),
    (
        "unbalanced brace in an agent command",
        task('id = "t"\n', '[agents.bot]\nkind = "shell"\ncommand = "do {"\n'),
        "bad placeholder syntax",
    ),
    # structure
    (
        "tasks = [...] with [[task]]",
        'tasks = [{id = "x"}]\n' + task('id = "t"\n'),
        "tasks: give [[task]] tables or tasks = [...], not both",
    ),
    ("no tasks", AGENT, "the plan has no tasks"),
    ("unknown key", task('id = "t"\nretires = 2\n'), "unknown key 'retires'; did you mean"),
    ("dependency cycle", task('id = "t"\ndepends_on = ["t"]\n'), "dependency cycle: t -> t"),
    ("bad TOML", 'id = "t\n', "invalid TOML"),
    ("select bogus", task('id = "t"\nselect = "best"\n'), "select: expected one of"),
    ("unknown agent kind", '[agents.bot]\nkind = "martian"\n[[task]]\nid = "t"\n', "unknown kind"),
]

YAML_PLANS: list[tuple[str, str, str]] = [
    (
        "YAML duplicate key",
        "agents:\n  bot: {kind: shell, command: 'true'}\ntask:\n  - id: a\n    id: b\n",
        "invalid YAML: duplicate key 'id'",
    ),
    (
        "YAML duplicate table",
        "agents:\n  bot: {kind: shell, command: 'true'}\nagents: {}\ntask: [{id: a}]\n",
        "duplicate key 'agents'",
    ),
    ("YAML top-level list", "- id: a\n", "a plan must be a table/mapping at the top level"),
    (
        "YAML id: yes (a boolean)",
        "agents:\n  bot: {kind: shell, command: 'true'}\ntask:\n  - id: yes\n",
        "id: required, and must match",
    ),
    ("YAML tab indent", "task:\n\t- id: a\n", "invalid YAML"),
    (
        "YAML NUL escape",
        'agents:\n  bot: {kind: shell, command: "true"}\ntask:\n  - {id: a, prompt: "x\\0"}\n',
        "task[0].prompt: contains a NUL byte",
    ),
]


def assert_refused_cleanly(repo: Path, out: subprocess.CompletedProcess[str], says: str) -> None:
    """Exit 2, the message, no traceback, nothing left in the repository."""
    assert out.returncode == 2, out.stderr
    assert says in out.stderr
    assert "Traceback" not in out.stderr
    assert not (repo / ".git" / "orchardist").exists()
    assert git(repo, "branch", "--list", "orchardist/*") == ""


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize(("text", "says"), [c[1:] for c in PLANS], ids=[c[0] for c in PLANS])
def test_a_bad_plan_is_refused_by_validate_and_run_alike(
    repo: Path,
    command: str,
    text: str,
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (repo / "plan.toml").write_text(text)
    out = in_process(repo, command, "plan.toml", capsys=capsys, monkeypatch=monkeypatch)
    assert_refused_cleanly(repo, out, says)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_plan_is_refused_by_the_console_entry_point_too(repo: Path, command: str) -> None:
    _, text, says = next(c for c in PLANS if c[0] == "id a..b")
    (repo / "plan.toml").write_text(text)
    assert_refused_cleanly(repo, orchardist(repo, command, "plan.toml"), says)


@pytest.mark.parametrize(
    ("text", "says"), [c[1:] for c in YAML_PLANS], ids=[c[0] for c in YAML_PLANS]
)
def test_a_bad_yaml_plan_is_refused_with_its_reason(
    repo: Path, text: str, says: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    (repo / "plan.yaml").write_text(text)
    out = in_process(repo, "validate", "plan.yaml", capsys=capsys, monkeypatch=monkeypatch)
    assert_refused_cleanly(repo, out, says)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'[[task]]\nid = "caf\xe9"\n', "plan is not UTF-8 text"),
        (b"\xff\xfe[\x00[\x00", "plan is not UTF-8 text"),
        (b'\xef\xbb\xbf[[task]]\nid = "t"\n', "invalid TOML"),
    ],
    ids=["Latin-1 plan", "UTF-16 plan", "UTF-8 BOM"],
)
def test_a_plan_in_another_encoding_is_refused(repo: Path, data: bytes, says: str) -> None:
    (repo / "plan.toml").write_bytes(data)
    assert_refused_cleanly(repo, orchardist(repo, "validate", "plan.toml"), says)


# -- checks against the repository: the same in validate and run --------------------------------

GOOD = AGENT + '[[task]]\nid = "t"\nverify = "true"\n'


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize(
    ("run_table", "says"),
    [
        ('base = "nope"', "run.base: 'nope' does not name a commit"),
        ('branch = "a..b"', "run.branch: 'a..b' is not a valid branch name"),
        ('branch = "x/{run}.lock"', "is not a valid branch name"),
        ('branch = "main"', "run.branch: branch 'main' already exists"),
    ],
    ids=["base names no commit", "branch a..b", "branch ending .lock", "branch exists"],
)
def test_a_plan_this_repository_cannot_run_is_refused_by_validate_and_run_alike(
    repo: Path, command: str, run_table: str, says: str
) -> None:
    (repo / "plan.toml").write_text(f"[run]\n{run_table}\n" + GOOD)
    assert_refused_cleanly(repo, orchardist(repo, command, "plan.toml"), says)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_repository_without_commits_is_refused(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "plan.toml").write_text(GOOD)
    out = orchardist(empty, command, "plan.toml")
    assert out.returncode == 2
    assert "run.base:" in out.stderr and "has no commits yet" in out.stderr
    assert not (empty / ".git" / "orchardist").exists()


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_missing_agent_cli_is_refused_before_any_run_exists(
    repo: Path, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a PATH of git alone (wherever a claude CLI is installed, it is not on it)
    task = '[[task]]\nid = "t"\nprompt = "p"\n'
    (repo / "plan.toml").write_text('[agents.ai]\nkind = "claude"\n' + task)
    only_git = tmp_path / "bin"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(only_git))
    # When / Then
    out = orchardist(repo, command, "plan.toml")
    assert_refused_cleanly(repo, out, "agents.ai: `claude` not found on PATH")


def test_validate_warns_of_a_dirty_checkout_and_of_a_plan_without_verify(repo: Path) -> None:
    (repo / "README.md").write_text("edited\n")
    (repo / "plan.toml").write_text(AGENT + '[[task]]\nid = "t"\n')
    out = orchardist(repo, "validate", "plan.toml")
    assert out.returncode == 0, out.stderr
    assert "warning: your checkout has 1 uncommitted change(s)" in out.stderr
    assert "warning: no task has a verify command or a check" in out.stderr


# -- commands that only read create nothing ------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["status"], 2, "no runs yet in this repository"),
        (["status", "nope"], 2, "no runs yet in this repository"),
        (["runs"], 0, "no runs yet"),
        (["gc", "--dry-run"], 0, "would remove 0.0 MB"),
        (["gc"], 0, "removed 0.0 MB"),
        (["logs", "nope", "t"], 2, "no runs yet in this repository"),
        (["show", "nope", "t"], 2, "no runs yet in this repository"),
        (["events", "nope"], 2, "no runs yet in this repository"),
        (["resume"], 2, "no runs yet in this repository"),
        (["retry", "nope"], 2, "no runs yet in this repository"),
        (["cancel", "nope"], 2, "no runs yet in this repository"),
        (["gc", "--older-than", "10y"], 2, "--older-than: bad duration '10y'"),
        (["validate", "missing.toml"], 2, "cannot read plan"),
        (["run", "missing.toml"], 2, "cannot read plan"),
        (["run", "plan.toml", "--max-parallel", "0"], 2, "must be at least 1"),
        (["resume", "--max-cost-usd", "nan"], 2, "must be a positive number"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_command_that_only_reads_creates_no_state(
    repo: Path, argv: list[str], code: int, says: str
) -> None:
    out = orchardist(repo, *argv)
    assert out.returncode == code, out.stderr
    assert says in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert not (repo / ".git" / "orchardist").exists()


# -- runs nobody drives --------------------------------------------------------------------------


@pytest.fixture
def abandoned(repo: Path) -> str:
    """A run created and then left, as after ``kill -9`` of its orchardist."""
    from orchardist import Workspace, create_run, load_plan

    (repo / "plan.toml").write_text(GOOD)
    ws = Workspace.open(repo)
    return create_run(ws, load_plan(repo / "plan.toml")).id


def test_a_run_nobody_drives_is_shown_dead_not_running(repo: Path, abandoned: str) -> None:
    status = orchardist(repo, "status", abandoned)
    assert f"run {abandoned}: dead" in status.stdout
    assert f"`orchardist resume {abandoned}` continues it" in status.stdout
    listed = orchardist(repo, "runs").stdout.splitlines()
    assert listed[0].split()[:4] == ["RUN", "STATE", "DONE", "STARTED"]
    assert listed[1].split()[:3] == [abandoned, "dead", "0/1"]


def test_resume_with_a_deadline_already_passed_launches_nothing(repo: Path, abandoned: str) -> None:
    out = orchardist(repo, "resume", abandoned, "--deadline", "1ms")
    assert out.returncode == 2
    assert "--deadline 1ms has already passed" in out.stderr
    assert not list((repo / ".git" / "orchardist").glob("**/*.log"))
    assert '"attempts": []' in orchardist(repo, "status", abandoned, "--json").stdout


def test_ctrl_d_at_the_resume_prompt_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from orchardist.cli import drive
    from orchardist.errors import UsageError

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # input() meets end of file
    with pytest.raises(UsageError, match=r"no answer: pass --resume .* or --fresh"):
        drive.confirm("resume it?")


def test_a_run_whose_lock_is_held_is_running_and_dead_once_it_is_released(
    repo: Path, abandoned: str
) -> None:
    from orchardist import Workspace
    from orchardist.runs.start import run_lock

    ws = Workspace.open(repo)
    with run_lock(ws, abandoned):
        # Given a live orchestrator (this process holds the run's lock)
        assert f"run {abandoned}: running" in orchardist(repo, "status", abandoned).stdout
        assert orchardist(repo, "runs").stdout.splitlines()[1].split()[1] == "running"
    # When nobody holds it any more, it is dead
    assert f"run {abandoned}: dead" in orchardist(repo, "status", abandoned).stdout
