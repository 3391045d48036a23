"""A scan the cache answers whole (scan.hit): one git process and the status, no scanner, no
version, no folder, almost nothing imported; the same output, events and exit code as the
full scan; and no answer at all (the full scan runs) as soon as anything its keys were made of
changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scan_support import invocations
from test_scan_engine import commit_change, todo_plan
from test_scan_version import asked, version_tool

from orchardist.cli import main as full_scan
from orchardist.git.env import FIXED_CONFIG, config_env, git_env
from orchardist.git.repo import Repo
from orchardist.scan import hit
from orchardist.scan.engine import scan_root
from run_support import ORCHARDIST, orchardist
from support import make_repo

# what a cache hit may import: these of orchardist's, and none of these of Python's
HIT_MODULES = {
    "orchardist",
    "orchardist.__main__",
    "orchardist.git",
    "orchardist.git.fixed",
    "orchardist.git.which",
    "orchardist.scan",
    "orchardist.scan.hit",
    "orchardist.scan.toolstamp",
}
NOT_ON_A_HIT = {"typing", "pathlib", "argparse", "dataclasses", "json", "subprocess", "hashlib"}
SCAN_ID = re.compile(r"scan-\d{8}-\d{6}-[0-9a-f]{6}")


def run(repo: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``orchardist scan scan.toml --json ARGS`` in its own process (a new interpreter with
    ``env``, whose PATH may name another git; else a fork of this one); its --json summary."""
    argv = [*ORCHARDIST, "scan", "scan.toml", "--json", *args]
    out = (
        orchardist(repo, *argv[len(ORCHARDIST) :])
        if env is None
        else subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, check=False)
    )
    assert out.returncode in (0, 1), out.stderr
    summary: dict[str, Any] = json.loads(out.stdout)
    return summary


@pytest.fixture
def scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """Six files with a TODO each, scanned once (the cache and the memo filled) by a scanner
    that logs its runs and has a version command that marks each time it is asked; the
    repository (also the working folder), the scanner's log and the version's marker."""
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(6)})
    tool, marker = version_tool(tmp_path, "1.0")
    extra = f'version = {json.dumps(str(tool))}\nenv = ["TODO_LEVEL"]'
    _plan, log = todo_plan(repo, tmp_path, extra=extra)
    assert run(repo)["scanners"][0]["misses"] == 6
    monkeypatch.chdir(repo)
    return repo, log, marker


def test_a_hit_runs_two_git_processes_and_no_scanner_version_or_folder(tmp_path: Path) -> None:
    # Given a scan whose every git process is logged, run once to fill the cache
    repo = make_repo(tmp_path / "repo", {f"src/m{i}.py": f"# TODO: {i}\n" for i in range(6)})
    tool, marker = version_tool(tmp_path, "1.0")
    _plan, log = todo_plan(repo, tmp_path, extra=f"version = {json.dumps(str(tool))}")
    spy, gits = tmp_path / "spy", tmp_path / "git.log"
    spy.mkdir()
    (spy / "git").write_text(f'#!/bin/sh\necho "$*" >> {gits}\nexec {shutil.which("git")} "$@"\n')
    (spy / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{spy}:{os.environ['PATH']}"}
    run(repo, env=env)
    shutil.rmtree(scan_root(Repo(repo)))
    gits.unlink()
    runs, asks = len(invocations(log)), asked(marker)

    # When the same commit is scanned again
    summary = run(repo, env=env)

    # Then the cache answered it with one git process for the repository and the commit and
    # one for the status, and nothing else ran: no scanner, no version, no scratch folder
    assert summary["scanners"][0]["hits"] == 6 and summary["findings"] == 6
    commands = [
        line.split()[2 if line.startswith("-C") else 0] for line in gits.read_text().splitlines()
    ]
    assert sorted(commands) == ["rev-parse", "status"]
    assert len(invocations(log)) == runs and asked(marker) == asks
    assert not scan_root(Repo(repo)).exists()


def test_a_hit_imports_only_the_hit_path(scanned: tuple[Path, Path, Path], tmp_path: Path) -> None:
    # Given a filled cache; when a scan of the same commit runs in a new interpreter
    repo, _log, _marker = scanned
    modules = tmp_path / "modules.txt"
    code = (
        "import atexit, sys\n"
        "sys.argv = ['orchardist', 'scan', 'scan.toml', '--json', '-o', 'out.sarif']\n"
        # at exit, which a function registered there makes the ordinary one (__main__._end)
        f"noted = lambda: open({str(modules)!r}, 'w').write(' '.join(sorted(sys.modules)))\n"
        "atexit.register(noted)\n"
        "from orchardist.__main__ import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)

    # Then it was answered (every file a hit) having imported the hit path alone
    assert json.loads(out.stdout)["scanners"][0]["hits"] == 6, out.stderr
    loaded = set(modules.read_text().split())
    assert {m for m in loaded if m.split(".")[0] == "orchardist"} == HIT_MODULES
    assert loaded & NOT_ON_A_HIT == set()


ARGVS = [
    [],
    ["--stats"],
    ["--json", "-o", "./out.sarif"],
    ["--format", "json", "--fail-on", "note"],
    ["--format", "sarif", "--stats", "--fail-on=warning"],
    ["--format=table", "-o", "out.txt", "--json", "--scanner", "todo"],
]


@pytest.mark.parametrize("args", ARGVS, ids=" ".join)
def test_a_hit_prints_writes_logs_and_exits_as_the_full_scan(
    scanned: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    # Given a filled cache, the same scan by the full scan, then answered by its memo
    repo = scanned[0]
    full = _outcome(repo, capsys, lambda: full_scan(["scan", "scan.toml", *args]))
    answered = _outcome(repo, capsys, lambda: hit.answer(["scan.toml", *args]))

    # Then the memo answered, with the same exit code, output, files and events
    assert answered[0] is not None
    assert answered == full


def _outcome(repo: Path, capsys: pytest.CaptureFixture[str], scan: Callable[[], int | None]) -> Any:
    """A scan's exit code, stdout, stderr, files written and events (scan ids left out)."""
    for name in ("out.sarif", "out.txt"):
        (repo / name).unlink(missing_ok=True)
    code = scan()
    out, err = capsys.readouterr()
    files = {p.name: p.read_text() for p in (repo / "out.sarif", repo / "out.txt") if p.exists()}
    db = sqlite3.connect(repo / ".git" / "orchardist" / "state.db")
    last = db.execute("select run_id from events order by seq desc limit 1").fetchone()[0]
    rows = db.execute("select kind, task_id, attempt, data from events where run_id = ?", (last,))
    events = [(k, t, a, json.loads(d)) for k, t, a, d in rows]
    db.close()
    return code, SCAN_ID.sub("ID", out), err, files, events


def _new_commit(repo: Path) -> None:
    commit_change(repo, "src/m0.py", "# TODO: changed\n")


def _tool_upgraded(repo: Path) -> None:
    version_tool(repo.parent, "2.0")


def _config_file(repo: Path) -> None:
    (repo / ".orchardist.toml").write_text("# the repository's profiles\n")


def _plan_edited(repo: Path) -> None:
    with (repo / "scan.toml").open("a") as plan:
        plan.write("# edited\n")


def _entry_forgotten(repo: Path) -> None:
    db = sqlite3.connect(repo / ".git" / "orchardist" / "state.db")
    with db:  # one file's findings (the longest values are files', not versions or memos)
        db.execute(
            "delete from scan_cache where key = (select key from scan_cache "
            "where scanner = 'todo' and value like '%findings%' limit 1)"
        )
    db.close()


CHANGES: dict[str, tuple[Callable[[Path], None], int]] = {  # and the files scanned then
    "a new commit": (_new_commit, 1),
    "the tool upgraded": (_tool_upgraded, 6),
    "the repository's config file": (_config_file, 0),
    "the plan edited": (_plan_edited, 0),
    "a cache entry forgotten": (_entry_forgotten, 1),
}


@pytest.mark.parametrize("change", CHANGES)
def test_the_memo_answers_nothing_once_what_it_stands_for_changed(
    scanned: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], change: str
) -> None:
    # Given a scan the memo answers
    repo, log, _marker = scanned
    assert hit.answer(["scan.toml", "--json"]) == 0
    capsys.readouterr()

    # When something its keys were made of changes, then it answers nothing and says nothing
    make, rescanned = CHANGES[change]
    make(repo)
    assert hit.answer(["scan.toml", "--json"]) is None
    assert capsys.readouterr() == ("", "")

    # and the full scan scans what changed
    runs = len(invocations(log))
    assert run(repo)["scanners"][0]["misses"] == rescanned
    assert len(invocations(log)) == runs + (rescanned > 0)


def test_the_memo_answers_nothing_when_a_variable_the_scanner_reads_changed(
    scanned: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a scan the memo answers, of a scanner whose cache keys read TODO_LEVEL
    assert hit.answer(["scan.toml", "-o", "out.sarif"]) == 0

    # When TODO_LEVEL is set, then the memo answers nothing: the full scan must run
    monkeypatch.setenv("TODO_LEVEL", "high")
    assert hit.answer(["scan.toml", "-o", "out.sarif"]) is None


@pytest.mark.parametrize(
    "args",
    [["--no-cache"], ["--fix"], ["--max-parallel", "2"], ["-h"], ["--stat"], ["--format", "xml"]],
    ids=" ".join,
)
def test_options_the_hit_path_does_not_know_go_to_the_full_scan(
    scanned: tuple[Path, Path, Path], args: list[str]
) -> None:
    assert hit.answer(["scan.toml", *args]) is None


def test_a_hit_writes_into_a_fifo_in_place(scanned: tuple[Path, Path, Path]) -> None:
    # Given a filled cache and a FIFO as the output, with a reader
    repo = scanned[0]
    fifo = repo.parent / "findings.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()

    # When the memo answers into it
    code = hit.answer(["scan.toml", "-o", str(fifo)])
    reader.join()

    # Then the SARIF went through the FIFO, which is still one (never replaced by a file)
    assert code == 0
    assert len(json.loads(got[0])["runs"][0]["results"]) == 6
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_memo_it_cannot_read_goes_to_the_full_scan(scanned: tuple[Path, Path, Path]) -> None:
    # Given a memo whose bytes are not a memo (another version's, or damaged)
    repo = scanned[0]
    db = sqlite3.connect(repo / ".git" / "orchardist" / "state.db")
    with db:
        db.execute("update scan_cache set value = x'00ff' where key like 'scan-memo %'")
    db.close()

    # When the same commit is scanned, then the memo answers nothing, with no traceback
    assert hit.answer(["scan.toml", "--json"]) is None

    # and the full scan answers from the cache, and leaves a memo that answers again
    assert run(repo)["scanners"][0]["hits"] == 6
    assert hit.answer(["scan.toml", "-o", "out.sarif"]) == 0


def test_the_hit_path_runs_git_as_orchardist_does(tmp_path: Path) -> None:
    # Given orchardist's own git environment for a repository (carried settings aside)
    repo = make_repo(tmp_path / "repo")
    ours = git_env(repo, identity=False)

    # Then the hit path's git gets the same fixed settings and the same quiet environment
    theirs = hit._Child.environment()
    for name in ("GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "LC_ALL", "GIT_CONFIG_NOSYSTEM"):
        assert theirs[name] == ours[name]
    assert {k: v for k, v in theirs.items() if k.startswith("GIT_CONFIG_")} == {
        k: v for k, v in config_env(FIXED_CONFIG).items()
    } | {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
