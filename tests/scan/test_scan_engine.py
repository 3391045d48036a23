"""The scan engine on real repositories and real scanner processes: cache, scope, read-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scan_support import PYTHON, invocations, logging_scanner, scanned_files, validate_sarif

from orchardist import Workspace
from orchardist.plan.loading import load_plan
from orchardist.runs.gc import collect
from orchardist.scan.engine import Scanner, ScanResult
from orchardist.scan.globs import select_files
from orchardist.state import scancache
from run_support import orchardist
from support import git, make_repo, write_plan


def scan(plan: Path, use_cache: bool = True, base: str = "HEAD") -> ScanResult:
    """Scan through the public API, as ``orchardist scan`` does."""
    loaded = load_plan(plan, require_tasks=False)
    ws = Workspace.open(loaded.repo)
    scanner = Scanner(
        ws.repo,
        ws.store,
        loaded.agents,
        max_parallel=2,
        use_cache=use_cache,
        sandbox=loaded.run.sandbox,
    )
    return scanner.scan(list(loaded.scanners.values()), base)


@pytest.fixture
def todo_repo(tmp_path: Path) -> Path:
    files = {f"src/m{i}.py": f"x = {i}\n# TODO: item {i}\n" for i in range(6)}
    files["docs/notes.md"] = "TODO: not python\n"
    files["tests/test_m.py"] = "# TODO: excluded\n"
    return make_repo(tmp_path / "repo", files)


def todo_plan(repo: Path, tmp: Path, scope: str = "file", extra: str = "") -> tuple[Path, Path]:
    command, log = logging_scanner(tmp)
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false  # the logging scanner writes its log outside its tree
        [scanners.todo]
        command = "{command} {{files}}"
        format = "json"
        scope = "{scope}"
        include = ["**/*.py"]
        exclude = ["tests/**"]
        {extra}
        """,
        name="scan.toml",
    )
    return plan, log


def commit_change(repo: Path, path: str, text: str) -> None:
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-qm", f"change {path}")


def test_a_file_scoped_scanner_runs_on_its_files_and_reports_their_findings(
    todo_repo: Path, tmp_path: Path
) -> None:
    plan, log = todo_plan(todo_repo, tmp_path)
    result = scan(plan)
    assert scanned_files(log) == [f"src/m{i}.py" for i in range(6)]
    (report,) = result.reports
    assert report.error is None and report.misses == 6 and report.hits == 0
    assert sorted((m.finding.path, m.finding.start_line) for m in result.merged) == [
        (f"src/m{i}.py", 2) for i in range(6)
    ]


def test_a_second_scan_of_an_unchanged_tree_runs_no_scanner(
    todo_repo: Path, tmp_path: Path
) -> None:
    # Given: a first scan
    plan, log = todo_plan(todo_repo, tmp_path)
    first = scan(plan)
    runs_before = len(invocations(log))

    # When: scanned again
    second = scan(plan)

    # Then: no process ran, and the findings are the same, fingerprints included
    assert len(invocations(log)) == runs_before
    assert second.reports[0].hits == 6 and second.reports[0].misses == 0
    assert [m.fingerprint for m in second.merged] == [m.fingerprint for m in first.merged]


def test_changing_one_file_rescans_that_file_only(todo_repo: Path, tmp_path: Path) -> None:
    plan, log = todo_plan(todo_repo, tmp_path)
    scan(plan)
    log.unlink()

    commit_change(todo_repo, "src/m3.py", "# TODO: one\n# TODO: two\n")
    result = scan(plan)

    assert invocations(log) == [["src/m3.py"]]
    assert sum(m.finding.path == "src/m3.py" for m in result.merged) == 2
    assert len(result.merged) == 7


def test_a_tree_scoped_scanner_reruns_when_anything_changes(
    todo_repo: Path, tmp_path: Path
) -> None:
    plan, log = todo_plan(todo_repo, tmp_path, scope="tree")
    scan(plan)
    scan(plan)
    assert len(invocations(log)) == 1
    commit_change(todo_repo, "docs/notes.md", "no longer\n")
    scan(plan)
    assert len(invocations(log)) == 2


def test_a_changed_config_file_or_command_invalidates_every_result(
    todo_repo: Path, tmp_path: Path
) -> None:
    # Given: a scanner whose results depend on setup.cfg, scanned once
    plan, log = todo_plan(todo_repo, tmp_path, extra='config = ["setup.cfg"]')
    commit_change(todo_repo, "setup.cfg", "[todo]\n")
    scan(plan)
    log.unlink()

    # When: only the config file changes, every file is scanned again
    commit_change(todo_repo, "setup.cfg", "[todo]\nstrict = 1\n")
    scan(plan)
    assert len(scanned_files(log)) == 6
    log.unlink()

    # When: the command changes (an extra argument), again
    text = plan.read_text().replace("{files}", "--strict {files}")
    plan.write_text(text)
    scan(plan)
    assert "--strict" in scanned_files(log)


def test_no_cache_runs_every_scanner_and_keeps_nothing(todo_repo: Path, tmp_path: Path) -> None:
    plan, log = todo_plan(todo_repo, tmp_path)
    scan(plan, use_cache=False)
    scan(plan, use_cache=False)
    assert len(scanned_files(log)) == 12
    scan(plan)
    assert len(scanned_files(log)) == 18  # nothing was cached by the --no-cache scans


def test_the_scanned_base_can_be_an_older_commit(todo_repo: Path, tmp_path: Path) -> None:
    plan, _ = todo_plan(todo_repo, tmp_path)
    old = git(todo_repo, "rev-parse", "HEAD")
    commit_change(todo_repo, "src/m0.py", "clean\n")
    assert len(scan(plan, base=old).merged) == 6
    assert len(scan(plan).merged) == 5


def test_a_scanner_that_writes_to_its_tree_fails_and_is_not_cached(
    todo_repo: Path, tmp_path: Path
) -> None:
    # Given: a scanner that appends to a file before scanning, and copies out what the file
    # ends with then, and no sandbox (so its write is not refused and only detection can
    # catch it)
    command, _log = logging_scanner(tmp_path)
    seen = tmp_path / "seen.txt"
    vandal = f"chmod u+w src/m1.py; echo evil >> src/m1.py; tail -n 1 src/m1.py >> {seen}"
    plan = write_plan(
        todo_repo,
        f"""
        [run]
        sandbox = false
        [scanners.vandal]
        command = "{vandal}; {command} {{files}}"
        format = "json"
        include = ["src/*.py"]
        """,
        name="scan.toml",
    )
    before = (todo_repo / "src/m1.py").read_text()

    # When: scanned twice
    first = scan(plan)
    second = scan(plan)

    # Then: its write landed in its tree both times, both fail naming the file, the user's
    # checkout is untouched, nothing was cached
    assert seen.read_text() == "evil\nevil\n"
    for result in (first, second):
        assert result.reports[0].error is not None
        assert "src/m1.py" in result.reports[0].error
    assert second.reports[0].hits == 0
    assert (todo_repo / "src/m1.py").read_text() == before
    assert git(todo_repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_scanner_with_unreadable_output_fails_alone(todo_repo: Path, tmp_path: Path) -> None:
    command, _log = logging_scanner(tmp_path)
    plan = write_plan(
        todo_repo,
        f"""
        [scanners.broken]
        command = "echo not json; echo boom >&2; exit 3"
        format = "sarif"
        scope = "tree"
        [scanners.todo]
        command = "{command} {{files}}"
        format = "json"
        include = ["src/*.py"]
        """,
        name="scan.toml",
    )
    result = scan(plan)
    broken, todo = result.reports
    assert broken.error is not None and "exit 3" in broken.error and "boom" in broken.error
    assert todo.error is None and len(result.merged) == 6
    assert scan(plan).reports[0].hits == 0  # a failure is not cached


def test_gc_forgets_scan_results_not_used_for_the_age(todo_repo: Path, tmp_path: Path) -> None:
    plan, log = todo_plan(todo_repo, tmp_path)
    scan(plan)
    ws = Workspace.open(todo_repo)
    assert collect(ws, 3600.0)["scan_results"] == 0
    assert collect(ws, 3600.0, now=9e12, dry_run=True)["scan_results"] == 6
    assert collect(ws, 3600.0, now=9e12)["scan_results"] == 6
    log.unlink()
    scan(plan)
    assert len(scanned_files(log)) == 6


def test_the_cache_is_bounded_and_keeps_what_was_used_last(todo_repo: Path) -> None:
    store = Workspace.open(todo_repo).store
    scancache.put(store, [(f"k{i}", "s", "{}") for i in range(3)], now=1.0, max_entries=3)
    assert list(scancache.get(store, ["k0"], now=2.0)) == ["k0"]
    scancache.put(store, [("k3", "s", "{}")], now=3.0, max_entries=3)
    left = scancache.get(store, [f"k{i}" for i in range(4)], now=4.0)
    assert len(left) == 3 and {"k0", "k3"} <= set(left)


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        (["**/*.py"], [], ["a.py", "pkg/b.py", "pkg/sub/c.py", "tests/t.py"]),
        (["*.py"], ["tests/**"], ["a.py", "pkg/b.py", "pkg/sub/c.py"]),
        (["pkg/*.py"], [], ["pkg/b.py"]),
        (["pkg/**"], ["**/c.py"], ["pkg/b.py", "pkg/data.json"]),
        (["**"], ["*.py"], ["README.md", "pkg/data.json"]),
        (["[ab].py", "README.?d"], [], ["README.md", "a.py", "pkg/b.py"]),
        (["/[ab].py"], [], ["a.py"]),
    ],
)
def test_include_and_exclude_globs(
    include: list[str], exclude: list[str], expected: list[str]
) -> None:
    entries = dict.fromkeys(
        ["a.py", "README.md", "pkg/b.py", "pkg/data.json", "pkg/sub/c.py", "tests/t.py"], "x"
    )
    assert select_files(entries, include, exclude) == expected


# -- the command line --------------------------------------------------------------------------


def test_scan_command_writes_valid_sarif_and_exits_by_fail_on(
    todo_repo: Path, tmp_path: Path
) -> None:
    plan, _ = todo_plan(todo_repo, tmp_path)
    out = tmp_path / "findings.sarif"

    # warnings only: exit 0 with the default --fail-on error, 1 with --fail-on warning
    ok = orchardist(todo_repo, "scan", str(plan), "-o", str(out), "--stats")
    assert ok.returncode == 0, ok.stderr
    assert "6 finding(s) (6 warning)" in ok.stdout
    assert "todo: 6 cached, 0 scanned" not in ok.stdout
    log = json.loads(out.read_text())
    validate_sarif(log)
    assert [run["tool"]["driver"]["name"] for run in log["runs"]] == ["todo"]
    failing = orchardist(todo_repo, "scan", str(plan), "--fail-on", "warning", "--stats")
    assert failing.returncode == 1
    assert "todo: 6 cached, 0 scanned (0 process(es))" in failing.stdout

    summary = json.loads(orchardist(todo_repo, "scan", str(plan), "--json").stdout)
    assert summary["findings"] == 6 and summary["scanners"][0]["hits"] == 6
    as_json = json.loads(orchardist(todo_repo, "scan", str(plan), "--format", "json").stdout)
    assert {f["path"] for f in as_json["findings"]} == {f"src/m{i}.py" for i in range(6)}


def test_scan_base_scans_the_commit_it_names_not_the_plan_s(
    todo_repo: Path, tmp_path: Path
) -> None:
    # Given a plan whose base is HEAD, and a commit on top that adds a seventh TODO
    plan, _ = todo_plan(todo_repo, tmp_path)
    commit_change(todo_repo, "src/m9.py", "# TODO: the newest\n")

    # When it is scanned as the plan says, and at the commit before
    at_head = orchardist(todo_repo, "scan", str(plan), "--json", "--no-cache")
    before = orchardist(todo_repo, "scan", str(plan), "--json", "--no-cache", "--base", "HEAD~1")

    # Then each scan read its own commit
    assert json.loads(at_head.stdout)["findings"] == 7, at_head.stderr
    assert json.loads(before.stdout)["findings"] == 6, before.stderr
    head = git(todo_repo, "rev-parse", "HEAD~1").strip()
    assert json.loads(before.stdout)["base"] == head


def test_scan_command_rejects_bad_input_with_exit_2(todo_repo: Path, tmp_path: Path) -> None:
    plan, _ = todo_plan(todo_repo, tmp_path)
    unknown = orchardist(todo_repo, "scan", str(plan), "--scanner", "nope")
    assert unknown.returncode == 2 and "unknown scanner 'nope' (known: todo)" in unknown.stderr
    bad_base = orchardist(todo_repo, "scan", str(plan), "--base", "no-such-ref")
    assert bad_base.returncode == 2 and "no-such-ref" in bad_base.stderr
    no_agent = orchardist(todo_repo, "scan", str(plan), "--fix", "--agent", "nobody")
    assert no_agent.returncode == 2 and "--fix needs --agent" in no_agent.stderr
    assert not (todo_repo / ".git" / "orchardist").exists()  # exit 2 created nothing
    empty = write_plan(todo_repo, "[run]\nbase = 'HEAD'\n", name="empty.toml")
    none = orchardist(todo_repo, "scan", str(empty))
    assert none.returncode == 2 and "no [scanners.NAME]" in none.stderr
    missing = orchardist(todo_repo, "scan")
    assert missing.returncode == 2 and "no plan given" in missing.stderr


def test_every_problem_of_a_scanner_profile_is_reported_with_its_place(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(
        repo,
        f"""
        [agents.rev]
        kind = "scripted"
        [scanners.a]
        command = "ruff check"
        format = "xml"
        timout = "1m"
        [scanners.b]
        format = "agent"
        agent = "nobody"
        [scanners.c]
        command = "{PYTHON} -m mypy {{files}}"
        fields = {{ rule = "code" }}
        timeout = "soon"
        """,
        name="scan.toml",
    )
    result = orchardist(repo, "scan", str(plan))
    assert result.returncode == 2
    for where in (
        "scanners.a.format: expected one of sarif, json, agent",
        "scanners.a.timout: unknown key 'timout'; did you mean 'timeout'?",
        'scanners.a.command: scope = "file" needs {files} in the command',
        "scanners.b.agent: unknown agent 'nobody' (known: rev)",
        "scanners.b.prompt: required",
        'scanners.c.fields: only a json scanner (format = "json") maps fields',
        "scanners.c.timeout: bad duration 'soon'",
    ):
        assert where in result.stderr, result.stderr
    validated = orchardist(repo, "validate", str(plan))
    assert validated.returncode == 2 and "scanners.b.agent" in validated.stderr


SEEING_SCANNER = """\
import json, os, sys
seen = sorted(os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs)
print(json.dumps([{"rule": "seen", "message": ",".join(seen), "path": p, "start_line": 1}
                  for p in sys.argv[1:]]))
"""


def test_a_file_scoped_scanner_sees_only_its_files_and_config_files(
    todo_repo: Path, tmp_path: Path
) -> None:
    # Only what its cache keys cover is there to read, so no other file can make them stale.
    script = tmp_path / "seeing.py"
    script.write_text(SEEING_SCANNER)
    plan = write_plan(
        todo_repo,
        f"""
        [scanners.seeing]
        command = "{PYTHON} {script} {{files}}"
        format = "json"
        include = ["src/m1.py", "src/m2.py"]
        config = ["docs/*.md"]
        [scanners.whole]
        command = "{PYTHON} {script} src/m1.py"
        format = "json"
        scope = "tree"
        """,
        name="scan.toml",
    )
    seeing, whole = scan(plan).reports
    assert {f.message for f in seeing.findings} == {"docs/notes.md,src/m1.py,src/m2.py"}
    assert len(whole.findings[0].message.split(",")) == 8  # a tree scanner sees everything


def test_each_scan_is_in_the_event_log(todo_repo: Path, tmp_path: Path) -> None:
    plan, _ = todo_plan(todo_repo, tmp_path)
    result = scan(plan)
    events = Workspace.open(todo_repo).store.events(result.scan_id)
    assert [(e.kind, e.task_id, e.data["state"]) for e in events] == [
        ("scan", None, "started"),
        ("scanner", "todo", "done"),
        ("scan", None, "finished"),
    ]
    assert events[1].data["misses"] == 6 and events[2].data["findings"] == 6


def test_ctrl_c_ends_a_scan_and_every_scanner_process_it_started(
    todo_repo: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    # Given: a scan whose scanner records its pid and hangs
    pid_file = tmp_path / "scanner.pid"
    plan = write_plan(
        todo_repo,
        f"""
        [run]
        sandbox = false
        [scanners.hang]
        command = "echo $$ > {pid_file}; exec sleep 600"
        scope = "tree"
        """,
        name="scan.toml",
    )
    cache = tmp_path / "cache"
    # A shell's background job (a CI runner's, say) ignores SIGINT, an ignored signal stays
    # ignored across exec, and Python then installs no Ctrl-C handler: start orchardist with
    # SIGINT as a terminal would give it (a handler here is reset to the default by exec).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchardist", "scan", str(plan)],
            cwd=todo_repo,
            env={**os.environ, "XDG_CACHE_HOME": str(cache)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 60  # normally a second or two
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        scanner_pid = int(pid_file.read_text())

        # When: interrupted
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    # Then: exit 130, the scanner is gone, and so is the scan's export
    assert code == 130
    assert not Path(f"/proc/{scanner_pid}").exists()
    scans = list(cache.glob("orchardist/*/scans/*"))
    assert scans == []
