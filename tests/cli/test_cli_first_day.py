"""What a new user hit on the first day (issue 32): commands that crashed with a traceback, runs
that started when they should not, data a command overwrote, and messages that misled. Each test
drives the real command line on a real repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_inputs import assert_refused_cleanly, in_process, orchardist

from realtools import require
from support import git

AGENT = '[agents.bot]\nkind = "shell"\ncommand = "echo {task} > {task}.txt"\n'
ONE_TASK = AGENT + '[[task]]\nid = "a"\nprompt = "make a"\nverify = "test -f a.txt"\n'


def no_state(repo: Path) -> bool:
    """Nothing was created: no state folder, no run branch."""
    return not (repo / ".git" / "orchardist").exists() and not git(
        repo, "branch", "--list", "orchardist/*"
    )


# -- tracebacks and runs that should never start ------------------------------------------------


def test_run_with_the_ray_executor_but_no_ray_installed_says_how_to_install_it(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine where `import ray` fails
    (repo / "plan.toml").write_text(ONE_TASK)
    monkeypatch.setitem(sys.modules, "ray", None)
    # When the plan is run on Ray
    out = in_process(
        repo, "run", "plan.toml", "--executor", "ray", capsys=capsys, monkeypatch=monkeypatch
    )
    # Then it is a usage error saying how to get Ray, and nothing was created
    assert out.returncode == 2, out.stderr
    assert "pip install 'orchardist[ray]'" in out.stderr
    assert no_state(repo)


@pytest.mark.parametrize(("port", "says"), [("99999", "0 to 65535"), ("http", "a port number")])
def test_serve_on_a_port_that_cannot_exist_is_a_usage_error(
    repo: Path, port: str, says: str
) -> None:
    out = orchardist(repo, "serve", "--port", port)
    assert out.returncode == 2
    assert "--port: " in out.stderr and says in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("form", ["dot", "mermaid"])
def test_run_asked_for_a_drawing_without_dry_run_draws_or_runs_nothing(
    repo: Path, form: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "plan.toml").write_text(ONE_TASK)
    out = in_process(repo, "run", "plan.toml", "--format", form, capsys=capsys,
                     monkeypatch=monkeypatch)  # fmt: skip
    assert out.returncode == 2
    assert f"--format {form} draws the graph: it needs --dry-run" in out.stderr
    assert no_state(repo)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--only", "a", "--skip", "a"], "(--only and --skip both name a)"),
        (["--only", "b", "--skip", "a"], "leave no task of"),
    ],
    ids=["the same task", "a task's dependency"],
)
def test_run_whose_only_and_skip_leave_nothing_creates_no_run(
    repo: Path,
    argv: list[str],
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given b depends on a
    (repo / "plan.toml").write_text(ONE_TASK + '[[task]]\nid = "b"\ndepends_on = ["a"]\n')
    out = in_process(repo, "run", "plan.toml", *argv, capsys=capsys, monkeypatch=monkeypatch)
    assert out.returncode == 2, out.stdout
    assert "--only and --skip leave no task" in out.stderr and says in out.stderr
    assert no_state(repo)


SHELL = '[agents.bot]\nkind = "shell"\ncommand = "true"\n'
CLAUDE = '[agents.ai]\nkind = "claude"\ncommand = "true"\n'

# (name, plan text, what stderr must say): each refused by validate and run alike, exit 2.
NEVER_START: list[tuple[str, str, str]] = [
    (
        "workdir that is no folder",
        SHELL + '[[task]]\nid = "t"\nworkdir = "nope"\n',
        "task 't': workdir: 'nope' is not a folder in HEAD of",
    ),
    (
        "run.workdir that is no folder",
        '[run]\nworkdir = "nope/sub"\n' + SHELL + '[[task]]\nid = "t"\n',
        "run.workdir: 'nope/sub' is not a folder in HEAD",
    ),
    (
        "fallback on itself",
        SHELL + 'fallback = "bot"\n[[task]]\nid = "t"\n',
        "agents.bot.fallback: a profile cannot be its own fallback",
    ),
    (
        "retries 1e18",
        SHELL + '[[task]]\nid = "t"\nretries = 1000000000000000000\n',
        "task 't': retries: at most 100",
    ),
    (
        "stage retries 101",
        SHELL + '[[task]]\nid = "t"\npipeline = "fix"\nstages.fix.retries = 101\n',
        "stages.fix.retries: at most 100",
    ),
    (
        "no prompt nor title for an agent that reads one",
        CLAUDE + '[[task]]\nid = "t"\n',
        "task 't': prompt: required: give prompt, prompt_file or title",
    ),
    (
        "empty prompt for a shell command reading {prompt_file}",
        '[agents.bot]\nkind = "shell"\ncommand = "cat {prompt_file}"\n[[task]]\nid = "t"\n'
        'prompt = ""\n',
        "(agent 'bot' would be sent an empty prompt)",
    ),
    (
        "unknown placeholder in verify",
        SHELL + '[[task]]\nid = "t"\nverify = "test -f {nosuch}"\n',
        "task 't': verify: unknown placeholder {nosuch}; known: {task} (write {{ and }}",
    ),
    (
        "unknown placeholder in run.verify",
        '[run]\nverify = "echo ${HOME}"\n' + SHELL + '[[task]]\nid = "t"\n',
        "run.verify: unknown placeholder {HOME}",
    ),
    (
        "single brace in check",
        SHELL + '[[task]]\nid = "t"\ncheck = "f() { true; }; f"\n',
        "check: unknown placeholder { true; }",
    ),
    (
        "unknown placeholder in regression",
        '[run]\nregression = "echo {nosuch}"\n' + SHELL + '[[task]]\nid = "t"\n',
        "run.regression: unknown placeholder {nosuch}; known: none",
    ),
]


# Runs of the plans with 10^18 retries would not end on a main that accepted them: validate only.
REFUSALS = [
    pytest.param(command, text, says, id=f"{name}-{command}")
    for name, text, says in NEVER_START
    for command in ("validate", "run")
    if command == "validate" or "retries" not in name
]


@pytest.mark.parametrize(("command", "text", "says"), REFUSALS)
def test_a_plan_whose_run_could_never_succeed_is_refused_by_validate_and_run(
    repo: Path,
    command: str,
    text: str,
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (repo / "plan.toml").write_text(text)
    monkeypatch.setenv("PATH", f"{repo}:{os.environ['PATH']}")  # a `claude` that is found
    (repo / "claude").write_text("#!/bin/sh\n")
    (repo / "claude").chmod(0o755)
    out = in_process(repo, command, "plan.toml", capsys=capsys, monkeypatch=monkeypatch)
    assert_refused_cleanly(repo, out, says)


def test_a_workdir_a_dependency_may_create_is_only_a_warning(repo: Path) -> None:
    (repo / "plan.toml").write_text(
        SHELL + '[[task]]\nid = "mk"\n[[task]]\nid = "t"\nworkdir = "new"\ndepends_on = ["mk"]\n'
    )
    out = orchardist(repo, "validate", "plan.toml")
    assert out.returncode == 0, out.stderr
    assert "task 't': workdir: 'new' is not a folder in HEAD" in out.stderr
    assert "a task it depends on must create it" in out.stderr


def test_literal_braces_are_written_the_same_in_agent_and_verify_commands(repo: Path) -> None:
    # Given an agent that writes a file named {a}.txt and a verify that looks for it, both
    # spelling the literal braces {{ and }}
    (repo / "plan.toml").write_text(
        '[agents.bot]\nkind = "shell"\ncommand = "echo x > {{{task}}}.txt"\n'
        '[[task]]\nid = "a"\nprompt = "p"\nverify = "test -f {{{task}}}.txt"\n'
    )
    # When it runs, the verify command finds the agent's file: both read braces alike
    out = orchardist(repo, "run", "plan.toml", "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    assert git(repo, "show", f"{branch}:{{a}}.txt").strip() == "x"


# -- messages -------------------------------------------------------------------------------------


@pytest.fixture
def created(repo: Path) -> str:
    """A run of plan.toml created and never driven (as after kill -9 of its orchardist)."""
    from orchardist import Workspace, create_run, load_plan

    (repo / "plan.toml").write_text(ONE_TASK)
    return create_run(Workspace.open(repo), load_plan(repo / "plan.toml")).id


def test_stats_answers_no_runs_yet_like_runs_and_a_mistyped_plan_is_an_error(
    repo: Path, tmp_path: Path
) -> None:
    # Given a repository without runs, stats says so as `runs` does, and creates nothing
    empty = orchardist(repo, "stats")
    assert (empty.returncode, empty.stdout) == (0, "no runs yet\n")
    assert no_state(repo)
    # Given runs of plan.toml, a --plan that names no file and no run is a usage error
    from orchardist import Workspace, create_run, load_plan

    (repo / "plan.toml").write_text(ONE_TASK)
    create_run(Workspace.open(repo), load_plan(repo / "plan.toml"))
    typo = orchardist(repo, "stats", "--plan", "pla.toml")
    assert typo.returncode == 2
    assert "--plan: pla.toml is not a plan file, and no run here was of it" in typo.stderr
    assert orchardist(repo, "stats", "--plan", "plan.toml").returncode == 0


@pytest.mark.parametrize("age", ["0", "now"])
def test_gc_older_than_zero_removes_every_finished_run_now(repo: Path, age: str) -> None:
    # Given a run that just finished, with its logs
    (repo / "plan.toml").write_text(ONE_TASK)
    assert orchardist(repo, "run", "plan.toml", "-q").returncode == 0
    logs = repo / ".git" / "orchardist" / "logs"
    assert any(logs.iterdir())
    # When gc is told to keep nothing older than now
    out = orchardist(repo, "gc", "--older-than", age)
    # Then the run's logs are gone (the store keeps its history)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("removed run ")
    assert not any(logs.iterdir())


def test_dash_c_before_the_command_works_from_that_folder_as_git_c_does(
    repo: Path, created: str
) -> None:
    # Given a run in repo, and orchardist started in repo's parent folder
    out = orchardist(repo.parent, "-C", repo.name, "status")
    assert out.returncode == 0, out.stderr
    assert f"run {created}: dead" in out.stdout
    # A plan path after the command is then relative to that folder too
    dry = orchardist(repo.parent, "-C", repo.name, "run", "plan.toml", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    missing = orchardist(repo.parent, "-C", "nope", "status")
    assert missing.returncode == 2
    assert "error: -C nope: No such file or directory" in missing.stderr


def test_a_killed_run_is_called_dead_by_run_and_retry_as_status_calls_it(
    repo: Path, created: str
) -> None:
    # Given a run whose orchardist died (status says dead)
    assert f"run {created}: dead" in orchardist(repo, "status").stdout
    # When the plan is run again without a terminal, or the run retried
    again = orchardist(repo, "run", "plan.toml")
    retried = orchardist(repo, "retry", created)
    # Then both call it dead too, and say what to do
    assert again.returncode == 2
    assert f"run {created} of this plan is dead: pass --resume" in again.stderr
    assert retried.returncode == 2
    assert f"run {created} is dead: retry re-runs" in retried.stderr
    assert f"continue this one with `orchardist resume {created}`" in retried.stderr


def test_retry_of_a_run_that_ended_done_says_there_is_nothing_to_retry(repo: Path) -> None:
    (repo / "plan.toml").write_text(ONE_TASK)
    assert orchardist(repo, "run", "plan.toml", "-q").returncode == 0
    out = orchardist(repo, "retry")
    assert out.returncode == 2
    assert "is done: every task ended done or skipped; nothing to retry" in out.stderr
    assert "use nothing" not in out.stderr


def test_show_runs_and_validate_read_as_sentences(repo: Path) -> None:
    # Given a run whose one task failed its verify
    (repo / "plan.toml").write_text(ONE_TASK.replace("test -f a.txt", "false"))
    assert orchardist(repo, "run", "plan.toml", "-q").returncode == 1
    # runs puts BRANCH and PLAN over their columns
    header, row = orchardist(repo, "runs").stdout.splitlines()[:2]
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    assert header.index("BRANCH") == row.index(branch)
    assert header.index("PLAN") == row.index(str(repo / "plan.toml"))
    # show names the state once, not "failed failed failed"
    first = orchardist(repo, "show", row.split()[0], "a").stdout.splitlines()[0]
    assert first.endswith("(bot): failed"), first
    # validate and graph count in the singular when there is one
    assert "(1 task, 1 agent profile)" in orchardist(repo, "validate", "plan.toml").stdout
    assert orchardist(repo, "graph", "plan.toml").stdout.startswith("1 task; launch order")


def test_pytest_exits_4_and_5_are_named_with_where_commands_run(repo: Path) -> None:
    # Given verify commands where pytest finds no tests (5) and a path it cannot use (4)
    (repo / "plan.toml").write_text(
        AGENT
        + '[[task]]\nid = "none"\nprompt = "p"\nverify = "python -m pytest -q"\n'
        + '[[task]]\nid = "typo"\nprompt = "p"\nverify = "python -m pytest -q tests/nope.py"\n'
    )
    out = orchardist(repo, "run", "plan.toml", "-q")
    # Then each failure says what pytest's code means, and where the command ran
    assert out.returncode == 1
    assert "exit 5: pytest collected no tests: is the path right?" in out.stdout
    assert "exit 4: pytest's usage error: a path or option it could not use" in out.stdout
    assert "by default the plan's folder" in out.stdout
    assert "with no failing test to explain it" not in out.stdout


def test_bash_completion_completes_run_ids_and_task_ids_from_the_repository(
    repo: Path, created: str, tmp_path: Path
) -> None:
    # Given the bash completion script, and a repository with one run of task a
    script = tmp_path / "orchardist.bash"
    script.write_text(orchardist(repo, "completion", "bash").stdout)
    said = '_orchardist; echo "$COMP_CWORD:${COMPREPLY[*]}"'
    probe = f"""
    source {script}
    COMP_WORDS=(orchardist status ""); COMP_CWORD=2; {said}
    COMP_WORDS=(orchardist logs {created[:8]} ""); COMP_CWORD=3; {said}
    COMP_WORDS=(orchardist show -C . {created} ""); COMP_CWORD=5; {said}
    COMP_WORDS=(orchardist retry {created} a ""); COMP_CWORD=4; {said}
    COMP_WORDS=(orchardist cancel {created} ""); COMP_CWORD=3; {said}
    """
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # this checkout's orchardist
    done = subprocess.run(
        ["bash", "-c", probe],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
    )
    # Then the run's id completes where a run goes, its task where a task goes
    assert done.stdout.splitlines() == [f"2:{created}", "3:a", "5:a", "4:a", "3:"], done.stderr


def test_completing_ids_where_there_are_no_runs_prints_nothing_and_creates_nothing(
    repo: Path,
) -> None:
    for argv in (["run"], ["task", "nope"], ["task"]):
        out = orchardist(repo, "__complete", *argv)
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert no_state(repo)


def this_orchardist() -> dict[str, str]:
    """The environment with this checkout's ``orchardist`` first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def test_fish_completion_completes_run_ids_then_task_ids(repo: Path, created: str) -> None:
    require(shutil.which("fish") is not None, "fish is not installed")
    script = repo.parent / "orchardist.fish"
    script.write_text(orchardist(repo, "completion", "fish").stdout)
    probe = (
        f"source {script}; complete -C'orchardist logs '; complete -C'orchardist show {created} '"
    )
    done = subprocess.run(
        ["fish", "--no-config", "-c", probe], cwd=repo, capture_output=True, text=True,
        env=this_orchardist(),
    )  # fmt: skip
    assert done.stdout.split() == [created, "a"], done.stderr


def test_zsh_completion_offers_run_ids_then_task_ids(repo: Path, created: str) -> None:
    require(shutil.which("zsh") is not None, "zsh is not installed")
    script = repo.parent / "orchardist.zsh"
    script.write_text(orchardist(repo, "completion", "zsh").stdout)
    # compadd stands in for zsh's completion widget: it prints what it was offered
    probe = (
        f"autoload -U compinit; compinit -u -D; source {script}; "
        f'compadd() {{ print -r -- "$@" }}; _orchardist_runs; line=({created}); _orchardist_tasks'
    )
    done = subprocess.run(
        ["zsh", "-fc", probe], cwd=repo, capture_output=True, text=True, env=this_orchardist()
    )
    assert done.stdout.splitlines() == [f"-- {created}", "-- a"], done.stderr


def test_the_progress_names_the_agent_an_attempt_runs_on_and_counts_tries_not_candidates() -> None:
    import io

    from rich.console import Console

    from orchardist.runs.display import LiveTable
    from orchardist.specs import Plan, RunConfig, TaskSpec
    from orchardist.state.agentrecords import AgentProfile
    from orchardist.state.eventlog import Event
    from orchardist.state.events import Kind
    from orchardist.state.report import describe

    profiles = {"bot": AgentProfile("bot", "shell", fallback="spare"), "spare": AgentProfile(
        "spare", "shell")}  # fmt: skip
    plan = Plan(
        Path("p"), Path("."), RunConfig(), profiles, (TaskSpec("t", "t", "", "bot", 0),), ""
    )
    table = LiveTable(plan, Console(file=io.StringIO(), width=100), "run")

    def started(n: int, candidate: int, agent: str) -> Event:
        data = {"state": "running", "agent": agent, "candidate": candidate}
        return Event("r", Kind.ATTEMPT, float(n), "t", n, data)

    try:
        # Given a first try of 3 candidates on bot
        for n in range(3):
            table.on_event(started(n + 1, n, "bot"))
        first = table.rows["t"]
        assert (first["round"], first["candidates"]) == (1, 3)
        drawn = io.StringIO()
        Console(file=drawn, width=120).print(table._render())
        assert "1 (3 candidates)" in drawn.getvalue()
        # When the second try starts on the fallback profile
        retry = started(4, 0, "spare")
        table.on_event(retry)
        drawn = io.StringIO()
        Console(file=drawn, width=100).print(table._render())
    finally:
        table.close()
    # Then the line and the table name the fallback, and the table says try 2, not 4
    assert describe(retry) == "  t attempt 4: running on spare"
    row = next(line for line in drawn.getvalue().splitlines() if line.lstrip().startswith("t "))
    assert [cell.strip() for cell in row.split("│")][:4] == ["t", "spare", "pending", "2"]
