"""What the commands that only read cost to start: the modules they import, bounded so that an
import creeping onto their path fails here, and a parser built for the chosen command alone that
parses, prints and refuses exactly as the whole one does."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_cli_inputs import orchardist

from orchardist.cli import main
from orchardist.cli.parsing import COMMANDS, build, parse
from orchardist.cli.plain import plain
from realtools import require
from shared_run_support import finished_run, isolated
from support import NOTING_DATACLASSES

# Layers a command that reads a run's record or a plan has no use for: the loop, where attempts
# run, the agents, pipelines, the sandbox, verification, scanners, the dashboard.
DRIVING = ("engine", "executors", "agents", "pipelines", "confine", "verify", "scan", "web")
PLANS = ("plan", "specs", "config")

IMPORTED = (
    NOTING_DATACLASSES
    + """
import atexit, io, json, sys, contextlib
from orchardist.__main__ import main  # as the console script starts
# told at exit, which a function registered there makes the ordinary one (see __main__._end)
ended = []
atexit.register(lambda: print(json.dumps([*ended, sorted(sys.modules), made])))
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        ended.append(main())
    except SystemExit as exc:
        ended.append(exc.code)
"""
)


@functools.cache
def loaded(repo: Path, *argv: str) -> tuple[int, set[str], list[str]]:
    """The exit code of ``orchardist ARGV`` in a fresh interpreter, every module it imported
    (the standard library's too), and the dataclasses it made: each costs 0.6-2 ms of
    CPU to make (its methods are compiled from source), a fifth of ``validate``'s time.

    Asked once per repository and command line: the tests of what one command imported and
    of what it made read the same interpreter's answer (a repository is never shared by a
    test that changes it)."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED, *argv], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    code, modules, made = json.loads(done.stdout)
    return code, set(modules), made


def imported(repo: Path, *argv: str) -> tuple[int, set[str]]:
    """The exit code of ``orchardist ARGV`` in a fresh interpreter, and the orchardist modules
    it imported."""
    code, modules, _ = loaded(repo, *argv)
    return code, {m for m in modules if m.split(".")[0] == "orchardist"}


def under(modules: set[str], layers: Sequence[str]) -> set[str]:
    return {m for m in modules if m.split(".")[1:2] and m.split(".")[1] in layers}


PLAN = (
    '[agents.sh]\nkind = "shell"\ncommand = "echo x > {task}.txt"\n'
    '[[task]]\nid = "a"\nverify = "none"\n'
)


@pytest.fixture
def ran(repo: Path) -> Path:
    """A repository with one finished run of a one-task plan, for a test that changes it."""
    (repo / "plan.toml").write_text(PLAN)
    assert orchardist(repo, "run", "plan.toml", "-q").returncode == 0
    return repo


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A repository with one finished run of the same plan, made once for the tests that only
    read it."""
    with isolated(tmp_path_factory), finished_run(tmp_path_factory, PLAN) as done:
        yield done.root


def test_status_and_runs_import_nothing_that_drives_a_run_or_reads_a_plan(
    finished: Path,
) -> None:
    # Given a repository with a finished run
    for command in ("runs", "status", "status --json"):
        # When a command that reads its record runs
        code, modules = imported(finished, *command.split())

        # Then it worked, and no module of the loop, the sandbox or the plan was imported
        assert code == 0, command
        assert under(modules, DRIVING + PLANS) == set(), command
        assert "orchardist.runs.start" in modules  # (it did read the run)
        # and no other command's module either
        assert "orchardist.cli.running" not in modules
        assert "orchardist.cli.plans" not in modules


def test_status_and_runs_make_only_the_records_they_read(finished: Path) -> None:
    for command in ("runs", "status", "status --json"):
        # When a command that reads a run's record runs
        code, modules, made = loaded(finished, *command.split())

        # Then it made the store's records and few more: no thread pool (nor the logging it
        # imports) for removing trees it never removes
        assert code == 0, command
        assert "orchardist.state.records.AttemptRecord" in made  # (it did make the records)
        assert len(made) <= 12, (command, made)
        assert {"concurrent.futures", "logging", "orchardist.safeio"} & modules == set(), command
        # nor shutil, with the compression modules it imports (~7 M instructions): the store
        # is found, read and closed without removing or copying a file
        assert {"shutil", "bz2", "lzma"} & modules == set(), command


def test_help_imports_no_command_and_still_lists_every_one(repo: Path) -> None:
    # When orchardist --help runs
    code, modules = imported(repo, "--help")

    # Then only the parser's own modules were imported
    assert code == 0
    assert modules <= {
        "orchardist",
        "orchardist.__main__",
        "orchardist.cli",
        "orchardist.cli.plain",
        "orchardist.cli.options",
        "orchardist.cli.parsing",
        "orchardist.errors",
        "orchardist.terminal",
    }
    # and every command is listed with its help line, as the whole parser lists them
    assert orchardist(repo, "--help").stdout == _printed(build(main), ["--help"])[1]


def test_validate_imports_the_plan_but_nothing_that_drives_a_run(finished: Path) -> None:
    code, modules, _ = loaded(finished, "validate", "plan.toml")

    assert code == 0
    assert "orchardist.plan.loading" in modules
    # (a plan may list scanners: this one lists none)
    assert under(modules, ("engine", "web", "verify", "scan")) == set()
    assert {"orchardist.state.store", "orchardist.runs.start"} & modules == set()
    # of the agents, only the kind the plan names (shell) and what it runs with; no pipeline
    # module for a plan without pipelines; of the executors, the confinement its checks use
    agents = {"orchardist.agents", "orchardist.agents.shell"}
    assert under(modules, ("agents",)) == agents
    assert under(modules, ("pipelines",)) == set()
    # of the executors, none: the confinement its checks use is the sandbox's
    assert under(modules, ("executors",)) == set()
    assert "orchardist.confine.confinement" in modules
    # nor the store's records (an agent's profile lives apart from them), Landlock (nor the
    # ctypes it and the mounts load), nor what snapshots, fingerprints, writes objects or
    # removes trees: each costs milliseconds of a 100 ms budget
    assert {
        "orchardist.state.records",
        "orchardist.confine.landlock",
        "orchardist.git.snapshots",
        "orchardist.git.fingerprint",
        "orchardist.git.treehash",
        "orchardist.safeio",
        "ctypes",
    } & modules == set()
    # nor the ranks and ready set only a run schedules with (a plan's cycles are checked
    # without them), nor the heap they use
    assert {"orchardist.plan.graph", "heapq"} & modules == set()


def test_validate_makes_the_plans_records_and_not_the_run_machinerys(finished: Path) -> None:
    # When a plan of shell agents is validated
    code, modules, made = loaded(finished, "validate", "plan.toml")

    # Then the plan's records were made, not the executors' jobs, the process machinery's
    # requests, an index file's entries nor a thread pool's
    assert code == 0
    assert "orchardist.specs.Plan" in made  # (it did load the plan)
    assert not [m for m in made if m.startswith(("orchardist.executors", "orchardist.git.index"))]
    assert "orchardist.confine.procs" not in modules
    assert {"concurrent.futures", "logging"} & modules == set()
    # nor shutil, with the compression modules it imports (~7 M instructions): git, the
    # agents' programs and bwrap are found on PATH by git.which
    assert {"shutil", "bz2", "lzma"} & modules == set()
    # nor the store's records: the plan's agent profiles are not among them
    assert not [m for m in made if m.startswith("orchardist.state.records.")]
    # nor what an attempt gets and returns (the agents are only looked up), how one of its
    # processes is confined (nothing starts), a merge's outcome (the repository is only read)
    # or a ready task's rank (nothing is scheduled)
    unused = ("AgentContext", "AgentResult", "Spec", "RepoView", "MergeResult", "Rank")
    assert not [m for m in made if m.rsplit(".", 1)[1] in unused], made
    # nor what an agent reports spending (no agent runs), a pipeline stage's overrides (the
    # plan has no pipeline task), an attempt's folders nor a pristine checkout for overlays (no
    # attempt is made), nor what looking for bwrap found (its commands need no second look),
    # nor a refusal (none of its commands is refused)
    shunned = ("Usage", "StageSpec", "AttemptPaths", "Pristine", "_Pristine", "Probe", "Refusal")
    assert not [m for m in made if m.rsplit(".", 1)[1] in shunned], made
    assert len(made) <= 10, made


def test_a_quiet_run_does_not_import_the_display_it_does_not_show(repo: Path) -> None:
    # Given a plan (no run before it: --fresh would start a new one anyway)
    (repo / "plan.toml").write_text(PLAN)
    # When a run is driven with -q (as scripts and the merge-train benchmark do)
    code, modules = imported(repo, "run", "plan.toml", "-q", "--fresh")

    # Then it ran, without the live table's module (nor rich, which only it imports)
    assert code == 0
    assert "orchardist.engine.scheduler" in modules  # (it did drive a run)
    assert "orchardist.runs.display" not in modules


# What a plain line of a command that reads and ends at once does without: the command line's
# parser (argparse, the gettext it imports, the parsers built: ~8 ms of a 100 ms budget)
PARSER = {"argparse", "gettext", "orchardist.cli.parsing"}


def test_plain_lines_of_validate_runs_and_status_import_no_argument_parser(
    finished: Path,
) -> None:
    # Given a repository with a finished run and its plan
    for command in ("validate plan.toml", "validate --json plan.toml", "runs", "status --json"):
        # When a plain line of a command that reads runs as the console script starts it
        code, modules, _ = loaded(finished, *command.split())

        # Then it worked without the command line's parser
        assert code == 0, command
        assert PARSER & modules == set(), command

    # while a line with an option is read by the parser (which the count above would see)
    code, modules, _ = loaded(finished, "runs", "-C", ".")
    assert code == 0
    assert modules >= PARSER


BAD_PLAN = '[[task]]\nid = "a"\nagent = "nobody"\nverify = "none"\n'
READ_PLAINLY = [
    ["validate", "plan.toml"],
    ["validate", "plan.toml", "--json"],
    ["validate", "--json", "bad.toml"],
    ["validate", "bad.toml"],
    ["validate", "missing.toml"],
    ["runs"],
    ["runs", "--json"],
    ["status"],
    ["status", "--json"],
    ["status", "RUN"],
    ["status", "--json", "nope"],
]
LEFT_TO_THE_PARSER = [
    ["validate"],
    ["validate", "--help"],
    ["validate", "plan.toml", "-q"],
    ["validate", "--js", "plan.toml"],
    ["validate", "plan.toml", "bad.toml"],
    ["validate", "plan.toml", "--json", "--json"],
    ["validate", ""],
    ["validate", "-"],
    ["runs", "extra"],
    ["runs", "-C", "."],
    ["status", "-w"],
    ["status", "RUN", "other"],
    ["status", "--json", "--help"],
    ["run", "plan.toml"],
    [],
]


def test_a_plain_line_runs_as_the_command_line_runs_it_and_any_other_is_left_to_it(
    ran: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a repository with a finished run, its plan, and a plan naming no agent it has
    (ran / "bad.toml").write_text(BAD_PLAN)
    monkeypatch.chdir(ran)
    run_id = json.loads(orchardist(ran, "runs", "--json").stdout)[0]["run"]

    def outcome(code: int | None) -> tuple[int | None, str, str]:
        out, err = capsys.readouterr()
        return code, out, err

    for line in READ_PLAINLY:
        line = [run_id[:8] if word == "RUN" else word for word in line]
        # When a plain line is run without the command line's parser, then through it
        alone, whole = outcome(plain(line)), outcome(main(line))

        # Then both exit with the same code and print the same
        assert alone == whole, line
        assert alone[0] is not None and (alone[1] or alone[2]), line
    # and every other line is left to the parser, nothing done or printed
    for line in LEFT_TO_THE_PARSER:
        assert outcome(plain(line)) == (None, "", ""), line


COLLECTED = """
import atexit, gc, json, runpy, sys
passes = []  # each pass of the cyclic collector, by its generation
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
seen, sys.argv = sys.argv[1], ["orchardist", *sys.argv[2:]]
atexit.register(lambda: open(seen, "w").write(json.dumps([passes, gc.isenabled()])))
runpy.run_module("orchardist", run_name="__main__")
"""


def collected(repo: Path, tmp: Path, *argv: str) -> tuple[list[int], bool]:
    """The passes the cyclic collector made while ``orchardist ARGV`` ran as the console
    script does, and whether it was on at the end."""
    seen = tmp / "collected.json"
    done = subprocess.run(
        [sys.executable, "-c", COLLECTED, str(seen), *argv], cwd=repo, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    passes, enabled = json.loads(seen.read_text())
    return passes, enabled


def test_commands_that_read_and_end_at_once_make_no_collector_pass(
    ran: Path, tmp_path: Path
) -> None:
    # When commands that read and end at once run (their start-up allocates only what lives
    # until they exit: ~30 passes that found nothing to free were 6-8 ms of validate's)
    for command in ("validate plan.toml", "runs", "--help"):
        passes, enabled = collected(ran, tmp_path, *command.split())

        # Then the collector made no pass once orchardist's entry point ran (the interpreter's
        # start and the package's import before it may make one or two), and stayed off
        assert len(passes) <= 2 and not enabled, (command, passes)

    # and a command that may run for hours has it back once its modules are in
    passes, enabled = collected(ran, tmp_path, "run", "plan.toml", "-q", "--fresh")
    assert enabled and passes, passes


TORN_DOWN = """
import os, runpy, sys
class Finalized:  # freed, and its finalizer run, only by the interpreter's teardown
    def __del__(self, mkdir=os.mkdir, marker=sys.argv[1]):
        mkdir(marker)
kept = Finalized()
sys.argv = ["orchardist", *sys.argv[2:]]
runpy.run_module("orchardist", run_name="__main__")
"""


def ended(
    repo: Path, tmp: Path, *argv: str, **run: Any
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """``orchardist ARGV`` run as the console script runs it, its output block-buffered as in
    any pipe (PYTHONUNBUFFERED unset); and whether the interpreter's teardown ran (an object it
    frees made its marker)."""
    marker = tmp / "torn-down"
    shutil.rmtree(marker, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", TORN_DOWN, str(marker), *argv], cwd=repo, env=env, text=True, **run
    )
    return done, marker.exists()


def test_commands_that_read_end_without_the_teardown_their_output_whole_their_store_closed(
    ran: Path, tmp_path: Path
) -> None:
    # Given a repository with a finished run, its store's WAL checkpointed (as a reader's
    # close does: the run's process, a fork of the test's, ended without closing it)
    store = ran / ".git" / "orchardist" / "state.db"
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.execute("select count(*) from runs").fetchall()
    for command in ("validate plan.toml", "runs --json", "status", "status --json", "--help"):
        # When a command that reads and ends at once runs, its output into a pipe
        done, torn_down = ended(ran, tmp_path, *command.split(), capture_output=True)
        left = [p.name for p in store.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]

        # Then it ended without the interpreter's teardown (~22 M instructions of validate's
        # ~285 M), having flushed all it wrote: the same as where the test's own process ends it
        assert not torn_down, command
        expected = orchardist(ran, *command.split())
        assert (done.returncode, done.stdout, done.stderr) == (
            expected.returncode,
            expected.stdout,
            expected.stderr,
        ), command
        assert done.stdout.strip(), command
        # and the store it read was closed before: no -wal nor -shm left beside it
        assert left == [], command

    # while one with a function registered at exit (logging's, with -v) ends the ordinary way,
    # which runs it and tears down (the proof that the marker above would have been made)
    done, torn_down = ended(ran, tmp_path, "-v", "runs", capture_output=True)
    assert done.returncode == 0 and done.stdout.startswith("RUN")
    assert torn_down


def test_a_command_whose_reader_left_ends_quietly(ran: Path, tmp_path: Path) -> None:
    # Given a pipe whose reader has left (``orchardist runs | head -1``, head gone)
    read, write = os.pipe()
    os.close(read)
    try:
        for command in ("runs", "status", "validate plan.toml", "--help"):
            # When a command that reads writes its lines into it, block-buffered
            done, _ = ended(ran, tmp_path, *command.split(), stdout=write, stderr=subprocess.PIPE)

            # Then it ends as a reader leaving mid-command has it end: quietly, exit 0 (not 120
            # with "Exception ignored ... BrokenPipeError", the interpreter's last flush failing)
            assert done.returncode == 0, (command, done.stderr)
            assert "BrokenPipeError" not in done.stderr, command
    finally:
        os.close(write)

    # and one started with its output closed (``orchardist runs >&-``) ends as before: exit 0
    closed = ["sh", "-c", 'exec "$0" -m orchardist runs >&-', sys.executable]
    done = subprocess.run(closed, cwd=ran, stderr=subprocess.PIPE, text=True)
    assert (done.returncode, done.stderr) == (0, "")


def git_commands(repo: Path, tmp: Path, *argv: str) -> list[str]:
    """The git commands ``orchardist ARGV`` ran, each told by a git on ``PATH`` that notes its
    arguments in a file before it runs the real one (the proof that it ran)."""
    shim, log = tmp / "shim", tmp / "git.log"
    shim.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "orchardist", *argv], cwd=repo, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines() if log.exists() else []


def test_reading_a_run_takes_one_git_command(ran: Path, tmp_path: Path) -> None:
    # status and runs find the store with one rev-parse (runs asked twice: whether there is
    # one, then where); setting up orchardist's git for the repository took five more
    assert len(git_commands(ran, tmp_path, "status")) == 1
    assert len(git_commands(ran, tmp_path, "runs")) == 1
    assert git_commands(ran, tmp_path, "--help") == []
    # validate finds the repository, sets up orchardist's git without the identity it would
    # commit with (nothing is committed), and asks each thing of git once; that the default
    # branch pattern makes a valid branch name it knows without asking; where the repository
    # is, its facts and the base in one rev-parse; the user's safe.directory and excludes file
    # not (the user owns the repository, and validate lists no untracked file); the changes
    ran_by_validate = git_commands(ran, tmp_path, "validate", "plan.toml")
    assert len(ran_by_validate) == len(set(ran_by_validate)) <= 2, ran_by_validate
    assert not [c for c in ran_by_validate if c.startswith(("var ", "check-ref-format"))]
    assert not [c for c in ran_by_validate if c.startswith("config ")], ran_by_validate

    # a branch pattern of the plan's own is asked of git, and a bad one refused
    plan = ran / "plan.toml"
    plan.write_text('[run]\nbranch = "mine/{run}"\n' + plan.read_text())
    bad = ran / "bad.toml"
    bad.write_text('[run]\nbranch = "mine..{run}"\n' + plan.read_text().split("\n", 2)[2])
    assert "check-ref-format --branch mine/20260101-000000-0000" in git_commands(
        ran, tmp_path, "validate", "plan.toml"
    )
    done = orchardist(ran, "validate", "bad.toml")
    assert done.returncode == 2
    assert "run.branch: 'mine..{run}' is not a valid branch name" in done.stderr


def test_validate_asks_for_the_users_trust_where_another_user_owns_the_repository(
    ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a repository another user owns, which the user trusts in their safe.directory
    require(os.geteuid() == 0, "giving a repository to another user needs root")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[safe]\n\tdirectory = {ran}\n")
    subprocess.run(["chown", "-R", "nobody", str(ran)], check=True)
    monkeypatch.setenv("HOME", str(home))

    # When it is validated
    ran_by_validate = git_commands(ran, tmp_path, "validate", "plan.toml")

    # Then git, refused without the user's settings, was asked again with them, and said ok
    opened = [n for n, c in enumerate(ran_by_validate) if c.startswith("rev-parse --path")]
    asked = [n for n, c in enumerate(ran_by_validate) if c.startswith("config ")]
    assert len(opened) == 2 and opened[0] < asked[0] < opened[1], ran_by_validate
    assert ran_by_validate[-1].startswith("status "), ran_by_validate


LINES = [
    [],
    ["--help"],
    ["--version"],
    ["runs"],
    ["runs", "--json", "-C", "x"],
    ["-q", "status", "r1", "--json"],
    ["-C", "somewhere", "status", "-w"],
    ["-qC", "somewhere", "runs"],
    ["-Csomewhere", "runs"],
    ["-v", "-v", "logs", "r", "t", "--attempt", "2"],
    ["status", "--help"],
    ["status", "--bogus"],
    ["runs", "extra"],
    ["validate"],
    ["validate", "plan.toml", "--json"],
    ["runz"],
    ["--", "runs"],
    ["-C"],
    ["fix", "report", "--agent", "a", "--agent", "b", "--dry-run"],
    ["debug", "--help"],
    ["scan", "--scanner", "ruff"],
    ["completion", "fish"],
    ["run", "plan.toml", "--max-parallel", "0"],
    ["--no-color", "gc", "--older-than", "3d"],
]


@pytest.mark.parametrize("argv", LINES, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_the_parser_of_one_command_parses_prints_and_refuses_as_the_whole_one(
    argv: list[str],
) -> None:
    # Given a command line, parsed by the parser of every command
    whole = _printed(build(main), argv)

    # When it is parsed as orchardist does, building only what the line needs
    def lazily(line: list[str]) -> argparse.Namespace:
        return parse(main, line)[1]

    # Then the outcome, the namespace and what is printed are the same
    assert _outcome(lazily, argv) == _outcome(build(main).parse_args, argv)
    assert _printed(lazily, argv) == whole


def test_every_command_is_in_the_table_with_the_help_line_its_parser_has() -> None:
    (sub,) = [a for a in build(main)._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {action.dest: action.help for action in sub._choices_actions}
    assert listed == {name: summary for name, (_, summary) in COMMANDS.items()}
    assert list(sub.choices) == list(COMMANDS)


def _printed(parse_args: object, argv: list[str]) -> tuple[object, str, str]:
    """The exit code (None: parsed) and what parsing printed on stdout and stderr."""
    if isinstance(parse_args, argparse.ArgumentParser):
        parse_args = parse_args.parse_args
    out, err = io.StringIO(), io.StringIO()
    code: object = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parse_args(argv)  # type: ignore[operator]
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _outcome(parse_args: object, argv: list[str]) -> object:
    """The namespace parsed (its function by name), or how parsing exited."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            args = parse_args(argv)  # type: ignore[operator]
        except SystemExit as exc:
            return ("exit", exc.code)
    shown = dict(vars(args))
    func = shown.pop("func", None)
    name = getattr(func, "func", func)
    shown["func"] = getattr(name, "__qualname__", None)
    if "pipeline" in shown:
        shown["func_main"] = "partial"
    return shown
