"""What a scan costs besides the scanner: a cache hit starts no process and writes no scratch
folder; without the cache no version is asked (no key is ever used); missed files go to one
process until there are enough of them to share (MIN_BATCH_FILES each), and one process needs
no thread pool."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from scan_support import PYTHON, invocations, logging_scanner
from test_scan_engine import scan, todo_plan
from test_scan_version import asked, version_tool

from orchardist.cli import main
from orchardist.git.repo import Repo
from orchardist.scan.cli import plain_scan
from orchardist.scan.engine import MIN_BATCH_FILES, scan_root
from run_support import orchardist
from support import NOTING_DATACLASSES, make_repo, write_plan


def test_a_cache_hit_starts_no_scanner_asks_no_version_and_exports_no_tree(
    tmp_path: Path,
) -> None:
    # Given a scan that ran the scanner and its version command in a scratch folder
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(6)})
    tool, marker = version_tool(tmp_path, "1.0")
    plan, log = todo_plan(repo, tmp_path, extra=f"version = {json.dumps(str(tool))}")
    first = orchardist(repo, "scan", str(plan), "--json")
    assert json.loads(first.stdout)["scanners"][0]["misses"] == 6, first.stderr
    scans = scan_root(Repo(repo))
    assert scans.is_dir() and invocations(log) and asked(marker) == 1
    shutil.rmtree(scans)
    runs = len(invocations(log))

    # When the same commit is scanned again
    again = orchardist(repo, "scan", str(plan), "--json")

    # Then every file came from the cache: no scanner process, no version asked, and no
    # scratch folder was made (no export, nothing to remove)
    summary = json.loads(again.stdout)
    assert summary["scanners"][0]["hits"] == 6 and summary["findings"] == 6, again.stderr
    assert len(invocations(log)) == runs
    assert asked(marker) == 1
    assert not scans.exists()


def test_without_the_cache_the_version_is_never_asked(tmp_path: Path) -> None:
    # Given a scanner with a version command, scanned twice with --no-cache
    repo = make_repo(tmp_path / "repo", {"src/m.py": "# TODO: one\n"})
    tool, marker = version_tool(tmp_path, "1.0")
    plan, log = todo_plan(repo, tmp_path, extra=f"version = {json.dumps(str(tool))}")
    for _ in range(2):
        out = orchardist(repo, "scan", str(plan), "--json", "--no-cache")
        assert json.loads(out.stdout)["findings"] == 1, out.stderr

    # Then the scanner ran each time, and its version (a cache key part) was never asked
    assert len(invocations(log)) == 2
    assert asked(marker) == 0


def batched_repo(folder: Path, files: int) -> tuple[Path, Path]:
    """A repository of ``files`` files with a TODO each, and a logging scanner's plan."""
    folder.mkdir()
    repo = make_repo(folder / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(files)})
    return todo_plan(repo, folder)


def test_missed_files_share_processes_only_by_whole_batches(tmp_path: Path) -> None:
    # Given one file short of two batches' worth, and two processes allowed
    plan, log = batched_repo(tmp_path / "short", 2 * MIN_BATCH_FILES - 1)

    # When they are scanned, then one process scanned them all
    result = scan(plan)
    assert [len(files) for files in invocations(log)] == [2 * MIN_BATCH_FILES - 1]
    assert result.reports[0].invocations == 1 and len(result.merged) == 2 * MIN_BATCH_FILES - 1

    # and two batches' worth are shared by the two processes
    plan, log = batched_repo(tmp_path / "two", 2 * MIN_BATCH_FILES)
    scan(plan)
    assert sorted(len(files) for files in invocations(log)) == [MIN_BATCH_FILES] * 2


# What a first scan needs besides the scan's own modules: the plan's loader, the store, the
# sandbox. Not the command line's parser (a plain scan's line is read by scan.hit), the agents'
# package (no scanner here is an agent), nor the memo (nothing is cached without the cache);
# nor the run, task and attempt records and their rows (the store logs the scan's events and
# reads no run), nor a process Spec (a scanner is confined by Landlock alone, not bwrap).
NOT_ON_A_FIRST_SCAN = {"argparse", "orchardist.cli", "orchardist.agents", "orchardist.scan.memo"}
NOT_ON_A_FIRST_SCAN |= {"orchardist.state.records", "orchardist.state.tables"}
NOT_ON_A_FIRST_SCAN |= {"orchardist.confine.spec"}
# nor an attempt's usage nor the run counts read back: the store writes no attempt and reads no run
NOT_ON_A_FIRST_SCAN |= {"orchardist.state.usage", "orchardist.state.runcounts"}
GIT_ON_A_FIRST_SCAN = ("--show-toplevel", "status", "ls-tree", "read-tree")
GIT_ON_A_FIRST_SCAN += ("checkout-index", "diff")


def test_a_first_scan_imports_no_command_line_run_records_nor_pool_and_runs_six_git_commands(
    tmp_path: Path,
) -> None:
    # Given files too few to share processes, scanned without the cache, git on PATH a shim
    # that notes each command it ran
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(6)})
    plan, log = todo_plan(repo, tmp_path)
    shim, ran = tmp_path / "shim", tmp_path / "git.log"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> {ran}\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}

    # When the scan runs in a new interpreter, its imports listed
    argv = [sys.executable, "-X", "importtime", "-m", "orchardist", "scan", str(plan)]
    done = subprocess.run(
        [*argv, "--json", "--no-cache"], cwd=repo, env=env, capture_output=True, text=True
    )

    # Then the scanner ran and reported, with none of the command line's modules, the agents',
    # the memo's, the run records' or the bwrap confinement's imported
    assert json.loads(done.stdout)["findings"] == 6, done.stderr
    assert len(invocations(log)) == 1
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "orchardist.scan.engine" in imported
    assert imported & NOT_ON_A_FIRST_SCAN == set()
    assert not [m for m in imported if m.startswith(("orchardist.cli.", "orchardist.agents."))]
    # nor a thread pool (nor the logging it brings): the one scanner process's job ran on the
    # scan's own thread
    assert "concurrent.futures" not in imported
    assert "logging" not in imported
    # and git ran six commands, none twice: the plan's repository found and set up with the
    # base resolved (one rev-parse), the checkout's status, the commit's files, the export
    # (its index, its files) and its check
    commands = ran.read_text().splitlines()
    named = [next((w for w in c.split() if w in GIT_ON_A_FIRST_SCAN), c) for c in commands]
    assert sorted(named) == sorted(GIT_ON_A_FIRST_SCAN), commands


# What git status notes, run by a git shim: whether the scanner's process exists (its command
# line names the FIFO it waits on); then it lets the scanner go on, and waits for its answer.
STATUS_GATE = """\
import os, sys
here = sys.argv[1]
mark = os.path.join(here, "to-scanner").encode()
def shows(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return mark in cmdline.read()
    except OSError:  # (gone meanwhile)
        return False
pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
running = any(shows(p) for p in pids)
with open(os.path.join(here, "status.txt"), "w") as said:
    said.write("scanner running" if running else "no scanner")
with open(os.path.join(here, "to-scanner"), "w") as gate:
    gate.write("go\\n")
with open(os.path.join(here, "to-status")) as gate:
    gate.read()
"""


# Modules a scan needs only once its scanner ran, seen from outside by their C libraries mapped
# in the scan's process: SQLite (the store's) and lzma and bz2 (shutil's, which removes the
# scratch copy; it used to be imported to find git and bwrap on PATH)
LATER_LIBRARIES = ("_sqlite3", "_lzma", "_bz2")


def gated_scan(repo: Path, here: Path) -> tuple[Path, dict[str, str]]:
    """A plan whose scanner first waits for the scan's git status (through FIFOs in ``here``),
    notes whether the store exists then and which of ``LATER_LIBRARIES`` the scan's process
    has loaded, and lets git status end; git's environment."""
    for fifo in ("to-scanner", "to-status"):
        os.mkfifo(here / fifo)
    (here / "gate.py").write_text(STATUS_GATE)
    shim = here / "git"
    shim.write_text(
        f'#!/bin/sh\ncase " $* " in *" status "*) {PYTHON} {here / "gate.py"} {here} ;; esac\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    shim.chmod(0o755)
    store = repo / ".git" / "orchardist" / "state.db"
    noted, loaded = here / "store.txt", here / "loaded.txt"
    command, _log = logging_scanner(here)
    gate = (
        f"read go < {here / 'to-scanner'}; "
        f"if test -e {store}; then echo opened > {noted}; else echo unopened > {noted}; fi; "
        f"for lib in {' '.join(LATER_LIBRARIES)}; do "
        f'grep -q "/$lib[.]" /proc/$PPID/maps && echo $lib; done > {loaded}; '
        f"echo done > {here / 'to-status'}; {command} {{files}}"
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false  # the scanner writes what it saw outside its tree
        [scanners.todo]
        command = {json.dumps(gate)}
        format = "json"
        include = ["**/*.py"]
        timeout = "60s"  # (waiting for a git status that never came: failed, not hung)
        """,
        name="scan.toml",
    )
    return plan, {**os.environ, "PATH": f"{here}{os.pathsep}{os.environ['PATH']}"}


def test_a_first_scan_asks_git_status_and_opens_its_store_while_its_scanner_runs(
    tmp_path: Path,
) -> None:
    # Given a repository never scanned (no store yet), and a scanner that waits for the scan's
    # git status, which notes whether the scanner's process runs, then notes whether the
    # store exists, before git status may end
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(3)})
    here = tmp_path / "gate"
    here.mkdir()
    plan, env = gated_scan(repo, here)

    # When it is scanned without the cache
    argv = [sys.executable, "-m", "orchardist", "scan", str(plan), "--json", "--no-cache"]
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)

    # Then it found what is there; git status was asked once the scanner's process ran, and
    # the store was not yet open when the scanner ran (the scan's start is logged meanwhile,
    # not before: neither is on the path to the scanner's start), nor SQLite, lzma or bz2
    # loaded
    assert json.loads(done.stdout)["findings"] == 3, done.stderr
    assert (here / "status.txt").read_text() == "scanner running"
    assert (here / "store.txt").read_text() == "unopened\n"
    assert (here / "loaded.txt").read_text() == ""
    # and the scan's start and end are in its log all the same, the start first
    with sqlite3.connect(repo / ".git" / "orchardist" / "state.db") as db:
        rows = db.execute("select kind, data from events order by seq").fetchall()
    states = [json.loads(data).get("state") for kind, data in rows if kind == "scan"]
    assert states == ["started", "finished"]


def test_a_store_that_cannot_be_opened_ends_the_scan_and_the_scanner_it_started(
    tmp_path: Path,
) -> None:
    # Given a scan whose store cannot be opened (a folder where its file goes), and a scanner
    # that hands its pid to the scan's git status (a git shim reading a FIFO), then sleeps
    repo = make_repo(tmp_path / "repo", {"src/m.py": "# TODO: one\n"})
    (repo / ".git" / "orchardist" / "state.db").mkdir(parents=True)
    here = tmp_path / "gate"
    here.mkdir()
    os.mkfifo(here / "pid")
    shim = here / "git"
    shim.write_text(
        f'#!/bin/sh\ncase " $* " in *" status "*) '
        f"timeout 60 cat {here / 'pid'} > {here / 'pid.txt'} ;; esac\n"
        f'exec {shutil.which("git")} "$@"\n'
    )
    shim.chmod(0o755)
    sleeper = f": {{files}}; echo $$ > {here / 'pid'}; exec sleep 600"
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false  # the scanner writes outside its tree
        [scanners.todo]
        command = {json.dumps(sleeper)}
        format = "json"
        include = ["**/*.py"]
        """,
        name="scan.toml",
    )
    env = {**os.environ, "PATH": f"{here}{os.pathsep}{os.environ['PATH']}"}

    # When it is scanned without the cache (the store opened while the scanner runs)
    argv = [sys.executable, "-m", "orchardist", "scan", str(plan), "--no-cache"]
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)

    # Then the scan failed with the store's error, at once, and the scanner it had started
    # (it ran: its pid was handed over) is gone, not left sleeping
    assert done.returncode == 1 and "cannot open the store" in done.stderr, done.stderr
    handed = (here / "pid.txt").read_text()
    assert handed.strip(), "the scanner never started"
    assert not Path(f"/proc/{int(handed)}").exists()


def test_a_first_scan_leaves_what_its_start_up_loaded_out_of_the_collectors_passes(
    tmp_path: Path,
) -> None:
    # Given a scan run in a new interpreter that says, as it exits, how many objects the
    # cyclic collector was told to skip (gc.freeze) and how many it examined in its passes
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(3)})
    plan, _log = todo_plan(repo, tmp_path)
    said = tmp_path / "gc.json"
    program = (
        "import atexit, gc, json, runpy, sys\n"
        "seen = [0]\n"
        "gc.callbacks.append(lambda phase, info: phase == 'stop' or seen.__setitem__(0, seen[0]"
        " + sum(len(gc.get_objects(g)) for g in range(info['generation'] + 1))))\n"
        f"atexit.register(lambda: open({str(said)!r}, 'w').write(json.dumps("
        "[gc.get_freeze_count(), seen[0]])))\n"
        f"sys.argv = ['orchardist', 'scan', {str(plan)!r}, '--json', '--no-cache']\n"
        "runpy.run_module('orchardist', run_name='__main__')\n"
    )

    # When it scans
    done = subprocess.run([sys.executable, "-c", program], cwd=repo, capture_output=True, text=True)

    # Then it found what is there, and the modules and records its start-up loaded (tens of
    # thousands of objects, all alive until it exits) were frozen, so that its collections
    # examined fewer objects than that, not all of them again in each pass
    assert json.loads(done.stdout)["findings"] == 3, done.stderr
    frozen, examined = json.loads(said.read_text())
    assert frozen > 10_000
    assert examined < frozen


MADE = (
    NOTING_DATACLASSES
    + """
import atexit, runpy, sys
sys.argv = ["orchardist", *sys.argv[1:]]
# at exit, which a function registered there makes the ordinary one (__main__._end)
atexit.register(lambda: print("\\n".join(made), file=sys.stderr))
runpy.run_module("orchardist", run_name="__main__")
"""
)


def test_a_first_scan_makes_no_record_of_runs_attempts_or_their_counts(tmp_path: Path) -> None:
    # Given a scan without the cache, in a new interpreter that notes each dataclass made
    # (each costs about a millisecond: its methods are compiled from source)
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(3)})
    plan, _log = todo_plan(repo, tmp_path)
    argv = [sys.executable, "-c", MADE, "scan", str(plan), "--json", "--no-cache"]

    # When it scans
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True)

    # Then it found what is there, and made neither an attempt's usage nor a run's counts
    # (the store it logs to writes no attempt and reads no run), 17 dataclasses in all: the
    # records it reads and writes (the engine's job and tally are not dataclasses)
    assert json.loads(done.stdout)["findings"] == 3, done.stderr
    made = [line for line in done.stderr.splitlines() if line.startswith("orchardist.")]
    assert not [m for m in made if m.endswith((".Usage", ".RunCounts"))], made
    assert 0 < len(made) <= 17, made  # (none noted: the noting itself broke)


PLAIN_LINES = [
    ["scan.toml", "--no-cache", "--json"],
    ["scan.toml", "--no-cache", "--max-parallel", "2", "--format", "table", "--stats"],
    ["scan.toml", "--no-cache", "-o", "out.sarif", "--fail-on=note"],
    ["--no-cache", "--scanner", "nope", "scan.toml"],
    ["missing.toml", "--no-cache"],
    ["scan.toml", "--no-cache", "--base", "no-such-ref"],
]


@pytest.mark.parametrize("line", PLAIN_LINES, ids=" ".join)
def test_a_plain_scan_line_is_run_as_the_whole_command_line_runs_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    line: list[str],
) -> None:
    # Given a repository and its scan plan, worked in
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(3)})
    todo_plan(repo, tmp_path)
    monkeypatch.chdir(repo)

    # When the line is run without the command line's parser, then through it
    def outcome(code: int | None) -> tuple[int | None, str, str, str | None]:
        out, err = capsys.readouterr()
        written = repo / "out.sarif"
        text = written.read_text() if written.exists() else None
        written.unlink(missing_ok=True)
        return code, re.sub(r"scan-[0-9-]+-[0-9a-f]{6}", "ID", out), err, text

    plain = outcome(plain_scan(line))
    whole = outcome(main(["scan", *line]))

    # Then both exit, print and write the same
    assert plain == whole
    assert plain[0] is not None


@pytest.mark.parametrize(
    "line",
    [["scan.toml", "--base", "-x"], ["scan.toml", "--fix"], ["--max-parallel", "0"], ["-h"]],
    ids=" ".join,
)
def test_a_line_the_plain_scan_does_not_read_is_left_to_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert plain_scan(line) is None
