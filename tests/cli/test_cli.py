"""The command line: ``orchardist.cli.main([...])`` in real repositories, as a user calls it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchardist.cli import main
from shared_run_support import isolated
from support import alive, git, make_repo, write_plan

BROKEN = """
[agents.fake]
kind = "scripted"

[[task]]
id = "a"
depends_on = ["b"]

[[task]]
id = "b"
depends_on = ["a"]

[[task]]
id = "c"
depends_on = ["ghost"]

[[task]]
id = "d"
agent = "nobody"

[[task]]
id = "e"
retires = 2
"""

GOOD = """
[agents.sh]
kind = "shell"
command = "echo hello from the agent {task} && echo hi > {task}.txt"

[[task]]
id = "hello"
title = "Say hello"
verify = "echo checked by verify"

[[task]]
id = "after"
depends_on = ["hello"]
"""


# The module's finished run: its repository, `run --json`'s exit code and printed document
Shared = tuple[Path, int, dict[str, Any]]
# One task: enough for a run that lists (half the work of GOOD's two)
ONE_TASK = GOOD[: GOOD.index('\n[[task]]\nid = "after"')] + "\n"


@pytest.fixture
def in_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository, as the current directory."""
    monkeypatch.chdir(repo)
    return repo


@pytest.fixture(scope="module")
def finished(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Shared]:
    """A repository where ``orchardist run plan.toml --json`` ran the GOOD plan to its end: its
    exit code and the status document it printed. Made once for the tests that only read it."""
    with isolated(tmp_path_factory), pytest.MonkeyPatch.context() as patch:
        repo = make_repo(
            tmp_path_factory.mktemp("shared") / "repo",
            {"README.md": "hello\n", ".gitignore": "__pycache__/\n.pytest_cache/\n"},
        )
        write_plan(repo, GOOD)
        patch.chdir(repo)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["run", "plan.toml", "--json"])
        yield repo, code, json.loads(printed.getvalue())


@pytest.fixture
def ran_good(finished: Shared, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The finished run's document, its repository the current directory."""
    repo, _, doc = finished
    monkeypatch.chdir(repo)
    return doc


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Exit code and the JSON document printed on stdout."""
    code = main(list(argv))
    return code, json.loads(capsys.readouterr().out)


# -- validate ----------------------------------------------------------------------------------


def test_validate_reports_every_problem_at_once(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(in_repo, BROKEN)

    code = main(["validate", "plan.toml"])

    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in out + err
    lines = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert len(lines) == 4, err
    assert all(line.startswith("plan.toml: task '") for line in lines), err
    assert any(re.search(r"task 'a': depends_on: .*a -> b -> a", line) for line in lines), err
    assert any("task 'c': depends_on:" in line and "'ghost'" in line for line in lines), err
    assert any("task 'd': agent:" in line and "'nobody'" in line for line in lines), err
    assert any("task 'e': retires:" in line and "'retries'" in line for line in lines), err


def test_validate_json_lists_located_problems(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(in_repo, BROKEN)

    code, doc = run_json(capsys, "validate", "--json", "plan.toml")

    assert code == 2
    assert doc["valid"] is False
    located = {(p["task"], p["field"]) for p in doc["problems"]}
    assert located == {("a", "depends_on"), ("c", "depends_on"), ("d", "agent"), ("e", "retires")}
    assert all(p["file"] == "plan.toml" and p["message"] for p in doc["problems"])


def test_validate_accepts_a_good_plan(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plan(in_repo, GOOD)

    assert main(["validate", "plan.toml"]) == 0
    assert "ok" in capsys.readouterr().out
    code, doc = run_json(capsys, "validate", "--json", "plan.toml")
    assert code == 0
    assert doc["valid"] is True
    assert doc["tasks"] == 2


def test_run_refuses_a_broken_plan_and_creates_nothing(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(in_repo, BROKEN)
    refs = git(in_repo, "for-each-ref")

    code = main(["run", "plan.toml"])

    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in out + err
    assert "a -> b -> a" in err and "'ghost'" in err and "'nobody'" in err and "retires" in err
    assert git(in_repo, "for-each-ref") == refs
    assert git(in_repo, "worktree", "list").count("\n") == 0
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_missing_plan_is_a_usage_error(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "nope.toml"])

    err = capsys.readouterr().err
    assert code == 2
    assert "nope.toml" in err
    assert "Traceback" not in err


# -- run and its reports -----------------------------------------------------------------------


def test_run_json_prints_the_status_document(finished: Shared) -> None:
    # Given / When: `run plan.toml --json` of the GOOD plan (the module's run)
    repo, code, doc = finished

    assert code == 0
    assert doc["state"] == "done"
    assert doc["branch"] == f"orchardist/{doc['run']}"
    assert git(repo, "rev-parse", doc["branch"]) == doc["tasks"][-1]["commit"]
    assert [t["id"] for t in doc["tasks"]] == ["hello", "after"]
    assert all(t["state"] == "done" for t in doc["tasks"])


def test_status_json_describes_tasks_and_attempts(
    ran_good: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_json(capsys, "status", "--json")

    assert code == 0
    assert {"run", "state", "branch", "tasks"} <= set(doc)
    assert doc["state"] == "done"
    for task in doc["tasks"]:
        assert {"id", "state", "commit", "attempts"} <= set(task)
        assert task["state"] == "done"
        assert re.fullmatch(r"[0-9a-f]{40}", task["commit"])
        [attempt] = task["attempts"]
        assert {"n", "candidate", "state", "exit_code", "duration_s"} <= set(attempt)
        assert attempt["n"] == 1
        assert attempt["candidate"] == 0
        assert attempt["exit_code"] == 0
        assert isinstance(attempt["duration_s"], float) and attempt["duration_s"] >= 0
    # the same document by full id and by prefix, from elsewhere with -C
    assert run_json(capsys, "status", doc["run"], "--json", "-C", str(Path.cwd()))[1] == doc
    assert run_json(capsys, "status", doc["run"][:-2], "--json")[1]["run"] == doc["run"]


def test_status_text_names_the_branch_and_tasks(
    ran_good: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == 0

    out = capsys.readouterr().out
    assert "orchardist/" in out
    assert re.search(r"hello\s+done", out)
    assert re.search(r"after\s+done", out)


def test_runs_lists_runs_newest_first(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plan(in_repo, ONE_TASK)
    assert main(["run", "plan.toml", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["run"]
    assert main(["run", "plan.toml", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["run"]

    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    code, rows = run_json(capsys, "runs", "--json")

    assert first in out and second in out
    assert out.index(second) < out.index(first)
    assert code == 0
    assert [r["run"] for r in rows] == [second, first]
    assert all(r["state"] == "done" for r in rows)


def test_logs_prints_the_agents_output(
    ran_good: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", ran_good["run"], "hello"]) == 0

    out = capsys.readouterr().out
    assert "hello from the agent" in out
    assert "checked by verify" in out


READ_ONLY = ("status", "runs", "events", "logs", "show")
LOOP_MODULES = (
    "engine.scheduler",
    "plan.loading",
    "engine.merge",
    "executors.local",
    "agents",
    "pipelines.expand",
)


# Each command line of argv[1] (JSON) in a child forked from an interpreter that has imported
# only the command line's entry point, as a fresh one does before it reads its arguments: one
# interpreter's start for them all, each command's imports its own. Prints [code, modules] each.
FORKED_COMMANDS = """
import contextlib, io, json, os, sys, traceback
from orchardist.cli import main
failed = 0
for line in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(line)
            print(json.dumps([code, sorted(sys.modules)]), flush=True)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    failed |= os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(failed)
"""


def test_commands_that_read_a_run_start_without_the_plan_models_or_the_loop(
    ran_good: dict[str, Any],
) -> None:
    # Given a finished run
    doc = ran_good
    lines = [[command] if command == "runs" else [command, doc["run"]] for command in READ_ONLY]
    lines = [[*line, "hello"] if line[0] in ("logs", "show") else line for line in lines]
    # When each command that only reads it runs in an interpreter of its own
    done = subprocess.run(
        [sys.executable, "-c", FORKED_COMMANDS, json.dumps(lines)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(answer) for answer in done.stdout.splitlines()]
    assert len(answers) == len(READ_ONLY), done.stdout
    for command, (code, modules) in zip(READ_ONLY, answers, strict=True):
        # Then it works without importing the plan's models, the agents or the run loop
        assert code == 0, command
        assert not [m for m in LOOP_MODULES if f"orchardist.{m}" in modules], command


def test_run_exits_1_when_a_task_fails(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plan(
        in_repo,
        """
        [agents.fake]
        kind = "scripted"
        script = { "*" = { print = "this agent always fails", exit = 1 } }

        [[task]]
        id = "doomed"
        """,
    )

    code, doc = run_json(capsys, "run", "plan.toml", "--json")

    assert code == 1
    assert doc["state"] == "failed"
    assert doc["tasks"][0]["state"] == "failed"
    assert main(["logs", doc["run"], "doomed"]) == 0
    assert "this agent always fails" in capsys.readouterr().out


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "no-such-run"], "no-such-run"),
        (["logs", "no-such-run", "hello"], "no-such-run"),
        (["logs", "{run}", "no-such-task"], "no-such-task"),
    ],
    ids=["status-unknown-run", "logs-unknown-run", "logs-unknown-task"],
)
def test_unknown_runs_and_tasks_are_usage_errors(
    ran_good: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main([a.replace("{run}", ran_good["run"]) for a in argv])

    out, err = capsys.readouterr()
    assert code == 2
    assert message in err
    assert err.startswith("error: ")
    assert "Traceback" not in out + err


def test_status_without_runs_says_so(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status"])

    err = capsys.readouterr().err
    assert code == 2
    assert "no runs" in err


def test_status_outside_a_repository_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()

    code = main(["status", "-C", str(outside)])

    assert code == 2
    assert "not inside a git repository" in capsys.readouterr().err


def test_bad_arguments_exit_2(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["run", "plan.toml", "--max-parallel", "0"])
    assert exc.value.code == 2


def test_run_uses_the_plans_base_and_branch_and_refuses_an_existing_branch(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given: a tag as the base, then a later commit on main, and a fixed branch name
    first = git(in_repo, "rev-parse", "HEAD")
    git(in_repo, "tag", "v1")
    (in_repo / "later.txt").write_text("later\n")
    git(in_repo, "add", "later.txt")
    git(in_repo, "commit", "-qm", "later")
    write_plan(
        in_repo,
        """
        [run]
        base = "v1"
        branch = "work/fixed-{run}-x"

        [agents.fake]
        kind = "scripted"
        script = { "*" = { write = { "done.txt" = "done\\n" } } }

        [[task]]
        id = "one"
        """,
    )

    code, doc = run_json(capsys, "run", "plan.toml", "--json")

    assert code == 0
    assert doc["branch"] == f"work/fixed-{doc['run']}-x"
    assert git(in_repo, "rev-parse", f"{doc['branch']}^") == first
    assert "later.txt" not in git(in_repo, "ls-tree", "--name-only", doc["branch"])

    # When the branch name has no {run}, a second run would reuse it: refused, nothing created
    write_plan(
        in_repo,
        """
        [run]
        branch = "work/fixed"

        [agents.fake]
        kind = "scripted"

        [[task]]
        id = "one"
        """,
    )
    git(in_repo, "branch", "work/fixed")
    code = main(["run", "plan.toml"])
    err = capsys.readouterr().err
    assert code == 2
    assert "work/fixed" in err and "already exists" in err
    code, rows = run_json(capsys, "runs", "--json")
    assert [r["run"] for r in rows] == [doc["run"]]


def test_run_refuses_a_base_that_names_no_commit(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(
        in_repo,
        """
        [run]
        base = "no-such-ref"

        [agents.fake]
        kind = "scripted"

        [[task]]
        id = "one"
        """,
    )
    refs = git(in_repo, "for-each-ref")

    code = main(["run", "plan.toml"])

    err = capsys.readouterr().err
    assert code == 2
    assert "no-such-ref" in err and "run.base" in err
    assert git(in_repo, "for-each-ref") == refs


def test_logs_can_show_one_attempt(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plan(
        in_repo,
        """
        [run]
        retry_backoff = "10ms"  # keep the test fast

        [agents.fake]
        kind = "scripted"
        [[agents.fake.script.flaky]]
        print = "first try"
        exit = 1
        [[agents.fake.script.flaky]]
        print = "second try"
        write = { "f.txt" = "f" }

        [[task]]
        id = "flaky"
        retries = 1
        """,
    )
    code, doc = run_json(capsys, "run", "plan.toml", "--json")
    assert code == 0

    assert main(["logs", doc["run"], "flaky"]) == 0
    both = capsys.readouterr().out
    assert main(["logs", doc["run"], "flaky", "--attempt", "2"]) == 0
    second = capsys.readouterr().out

    assert "first try" in both and "second try" in both
    assert both.index("first try") < both.index("second try")
    assert "second try" in second and "first try" not in second


def test_a_yaml_plan_outside_the_repository_names_its_repo(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given: a YAML plan next to (not inside) the repository, with a prompt file beside it
    (tmp_path / "prompt.md").write_text("the prompt from a file\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "run:\n"
        "  repo: repo\n"
        "agents:\n"
        "  sh:\n"
        "    kind: shell\n"
        '    command: "cp {prompt_file} {task}.txt"\n'
        "task:\n"
        "  - id: one\n"
        "    prompt_file: prompt.md\n"
        "  - id: two\n"
        "    title: copy one\n"  # its agent reads {prompt_file}: an empty prompt is refused
        "    depends_on: [one]\n"
        '    verify: "test -f one.txt"\n'
    )

    code, doc = run_json(capsys, "run", str(plan), "--json", "--max-parallel", "1")

    assert code == 0
    assert doc["state"] == "done"
    assert git(repo, "show", f"{doc['branch']}:one.txt") == "the prompt from a file"
    assert "two.txt" in git(repo, "ls-tree", "--name-only", doc["branch"])
    assert run_json(capsys, "runs", "--json", "-C", str(repo))[1][0]["run"] == doc["run"]


def test_ctrl_c_stops_the_run_cleanly_with_exit_130(
    in_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given: one agent that hangs, and one that presses Ctrl-C (SIGINT to this process) once
    # the other is surely running (without the sandbox, which forbids signalling orchardist)
    sync = tmp_path / "sync"
    sync.mkdir()
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "hang.sh").write_text(f'echo $$ > "{sync}/hang.pid"\nexec sleep 60\n')
    (folder / "ctrlc.sh").write_text(
        f'until [ -s "{sync}/hang.pid" ]; do sleep 0.02; done\n'
        f"kill -INT {os.getpid()}\n"
        "exec sleep 60\n"
    )
    write_plan(
        in_repo,
        f"""
        [run]
        max_parallel = 2
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = "sh {folder}/{{task}}.sh"

        [[task]]
        id = "hang"

        [[task]]
        id = "ctrlc"
        """,
    )

    code, doc = run_json(capsys, "run", "plan.toml", "--json")

    assert code == 130
    assert doc["state"] == "interrupted"
    assert all(t["state"] != "done" for t in doc["tasks"])
    pid = int((sync / "hang.pid").read_text())
    assert not alive(pid), f"the hanging agent (pid {pid}) outlived the interrupt"
    assert len(git(in_repo, "worktree", "list").splitlines()) == 1
