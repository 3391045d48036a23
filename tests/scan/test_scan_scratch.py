"""A scanner's tree is scratch space: caches work, only a tracked file's change is an error; a
scanner that fails fails the scan; one folder per repository; a dirty checkout is said."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from scan_support import PYTHON, logging_scanner, validate_sarif

from orchardist import Workspace
from orchardist.confine.layout import Layout
from orchardist.confine.paths import workdir_root
from orchardist.git.repo import Repo
from orchardist.plan.loading import load_plan
from orchardist.scan.engine import Scanner, ScanResult
from orchardist.scan.trees import changed_files, export, ls_tree
from realtools import require, require_modules
from run_support import orchardist
from support import git, make_repo, write_plan


def scan(plan: Path) -> ScanResult:
    """Scan through the public API, as ``orchardist scan`` does (sandbox as the plan says)."""
    loaded = load_plan(plan, require_tasks=False)
    ws = Workspace.open(loaded.repo)
    scanner = Scanner(ws.repo, ws.store, loaded.agents, max_parallel=2, sandbox=loaded.run.sandbox)
    return scanner.scan(list(loaded.scanners.values()), "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {f"pkg/m{i}.py": f"import os\n# TODO: item {i}\n" for i in range(3)}
    files["pkg/__init__.py"] = ""
    return make_repo(tmp_path / "repo", files)


def test_a_scanner_writes_its_cache_in_its_tree_and_the_writes_are_discarded(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a scanner that reports only if it could write a cache folder in its tree (and
    # /dev/null)
    command, _log = logging_scanner(tmp_path)
    cache = "mkdir -p .tool_cache && pwd > .tool_cache/where && test -s .tool_cache/where"
    cache += " && echo quiet > /dev/null"  # documented commands redirect there
    plan = write_plan(
        repo,
        f"""
        [scanners.cached]
        command = "{cache} && {command} {{files}}"
        format = "json"
        include = ["pkg/*.py"]
        """,
        name="scan.toml",
    )

    # When: scanned (with the default sandbox)
    result = scan(plan)

    # Then: it succeeded, so its write happened, and nothing of it is left anywhere
    assert result.reports[0].error is None, result.reports[0].error
    assert len(result.merged) == 3
    assert not (repo / ".tool_cache").exists()
    assert git(repo, "status", "--porcelain") == "?? scan.toml"
    leftovers = list(workdir_root().rglob(".tool_cache"))
    assert leftovers == []


def test_ruffs_documented_command_with_its_cache_reports_what_ruff_reports(
    repo: Path, tmp_path: Path
) -> None:
    require_modules("ruff")
    # Given: ruff's own documented command, with its cache (no --no-cache)
    plan = write_plan(
        repo,
        f"""
        [scanners.ruff]
        command = "{PYTHON} -m ruff check --output-format sarif {{files}}"
        include = ["**/*.py"]
        """,
        name="scan.toml",
    )

    # When: scanned
    result = scan(plan)

    # Then: ruff ran and reported its three F401, one per module
    assert result.reports[0].error is None, result.reports[0].error
    assert sorted((m.finding.path, m.finding.rule) for m in result.merged) == [
        (f"pkg/m{i}.py", "F401") for i in range(3)
    ]
    assert not (repo / ".ruff_cache").exists()


def test_with_the_sandbox_a_scanner_cannot_write_outside_its_tree_and_starts_unwrapped(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchardist.confine import landlock as sandbox

    require(sandbox.available(), "this kernel has no Landlock")
    # Given: this interpreter behind a shim that logs every start (as a wrapper would be
    # started), and a scanner that tries to write the user's checkout, then scans
    starts = tmp_path / "interpreter-starts.log"
    shim = tmp_path / "python-shim"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {starts}\nexec {PYTHON} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(shim))
    command, _log = logging_scanner(tmp_path)
    target = repo / "pkg" / "m1.py"
    plan = write_plan(
        repo,
        f"""
        [scanners.vandal]
        command = "echo evil >> {target}; {command} {{files}}"
        format = "json"
        include = ["pkg/*.py"]
        """,
        name="scan.toml",
    )
    before = target.read_text()

    # When: scanned, sandboxed
    result = scan(plan)

    # Then: the scanner ran, confined (its write was refused), and no interpreter was
    # started before it
    assert result.reports[0].error is None and len(result.merged) == 3
    assert target.read_text() == before
    assert not starts.exists(), starts.read_text()


def test_a_failed_scanner_fails_the_scan_and_never_reads_as_no_findings(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a scanner that fails without output, after a long stderr
    noise = "for i in $(seq 100); do printf 'words '; done >&2"
    plan = write_plan(
        repo,
        f"""
        [scanners.broken]
        command = "{noise}; echo 'error: cannot start' >&2; exit 2"
        scope = "tree"
        """,
        name="scan.toml",
    )
    out = tmp_path / "findings.sarif"

    # When: scanned, as a table and into SARIF
    table = orchardist(repo, "scan", str(plan))
    written = orchardist(repo, "scan", str(plan), "-o", str(out))

    # Then: exit 1, the summary says the scan failed and why, not "0 finding(s)"
    for result in (table, written):
        assert result.returncode == 1, result.stderr
        assert "0 finding(s)" not in result.stdout
        assert "scan FAILED: 1 of 1 scanner(s) failed (broken)" in result.stdout
        assert "cannot start" in result.stdout
    log = json.loads(out.read_text())
    validate_sarif(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "cannot start" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    summary = json.loads(orchardist(repo, "scan", str(plan), "--json").stdout)
    assert summary["exit_code"] == 1 and summary["failed"] == ["broken"]
    # and the end of its stderr is shown from a whole word on
    shown = summary["scanners"][0]["error"].split("no output: ")[1]
    assert shown.split()[0] in ("…", "words") and shown.endswith("error: cannot start")


def test_scans_and_runs_of_a_repository_share_one_folder(repo: Path, tmp_path: Path) -> None:
    # Given: a scanner that leaves the path it ran in outside its tree
    where = tmp_path / "where"
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        [scanners.where]
        command = "pwd > {where}; echo '[]'"
        format = "json"
        scope = "tree"
        """,
        name="scan.toml",
    )

    # When: scanned
    assert scan(plan).reports[0].error is None

    # Then: it ran inside the folder the repository's attempts use
    ws = Workspace.open(repo)
    folder = Layout(ws.repo, workdir_root(), ws.state_dir).folder
    assert Path(where.read_text().strip()).is_relative_to(folder / "scans")
    assert sorted(p.name for p in workdir_root().iterdir()) == [folder.name]


def test_scan_on_a_dirty_checkout_says_it_scanned_the_commit(repo: Path, tmp_path: Path) -> None:
    # Given: an uncommitted change
    command, _log = logging_scanner(tmp_path)
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false
        [scanners.todo]
        command = "{command} {{files}}"
        format = "json"
        """,
        name="scan.toml",
    )
    (repo / "pkg" / "m0.py").write_text("# TODO: more\n# TODO: and more\n")

    # When: scanned
    result = orchardist(repo, "scan", str(plan))

    # Then: the warning names the change count and the commit; the findings are HEAD's
    assert "your checkout has 1 uncommitted change(s); scanning HEAD" in result.stderr
    assert result.stdout.count("pkg/m0.py") == 1
    git(repo, "checkout", "-q", "pkg/m0.py")
    assert "uncommitted" not in orchardist(repo, "scan", str(plan)).stderr


@pytest.mark.parametrize("scope", ["tree", "file"])
def test_an_export_has_writable_folders_read_only_files_and_an_index_that_knows_them(
    repo: Path, tmp_path: Path, scope: str
) -> None:
    # Given: a repository with a folder that holds only a symlink, and a scanner (whole tree
    # or its files) that first notes the modes of its export and the tracked files whose stat
    # data differ from what its index holds (git diff-files, which refreshes nothing), as the
    # export's check starts from
    (repo / "links").mkdir()
    (repo / "links" / "m0.py").symlink_to("../pkg/m0.py")
    git(repo, "add", "links")
    git(repo, "commit", "-qm", "a link")
    command, _log = logging_scanner(tmp_path)
    index = f"GIT_DIR={repo / '.git'} GIT_INDEX_FILE=../index GIT_WORK_TREE=."
    noted = (
        f"{index} git diff-files --name-only > {tmp_path / 'stale.txt'}; "
        f"find . -printf '%y %m %p\\n' > {tmp_path / 'modes.txt'}; {command} {{files}}"
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false  # the scanner notes what it saw outside its tree
        [scanners.noting]
        command = {json.dumps(noted)}
        format = "json"
        scope = "{scope}"
        include = ["pkg/*.py"]
        """,
        name="scan.toml",
    )

    # When: scanned
    result = scan(plan)

    # Then: the scanner ran and reported; its folders were writable (scratch space), its
    # tracked files had no write bits, and its index's stat data were its files' own: none
    # for the check to read again (a chmod after git wrote them changed every file's ctime)
    assert result.reports[0].error is None and len(result.merged) == 3
    modes = [line.split(" ", 2) for line in (tmp_path / "modes.txt").read_text().splitlines()]
    folders = {path: int(mode, 8) for kind, mode, path in modes if kind == "d"}
    files = {path: int(mode, 8) for kind, mode, path in modes if kind == "f"}
    assert {"./pkg", "./pkg/m0.py"} <= folders.keys() | files.keys()
    assert all(mode & 0o200 for mode in folders.values()), folders
    assert files and not any(mode & 0o222 for mode in files.values()), files
    if scope == "tree":
        assert "./links" in folders and ("l", "777", "./links/m0.py") in map(tuple, modes)
    unexported = "" if scope == "tree" else "links/m0.py\n"  # (absent from its export)
    assert (tmp_path / "stale.txt").read_text() == unexported


def test_a_file_rewritten_in_place_with_its_times_set_back_is_still_a_change(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a repository whose config trusts little of a file's stat data (no ctime, the
    # minimal fields), an export of its commit, and, in a later second (git compares whole
    # seconds; the index's own time moved to it, so that git takes no file for racily clean),
    # one of its tracked files rewritten in place, the same size, its times set back to those
    # the index noted
    git(repo, "config", "core.trustctime", "false")
    git(repo, "config", "core.checkStat", "minimal")
    opened = Repo(repo)
    commit = opened.rev_parse("HEAD")
    files, folders = ls_tree(opened, commit)
    folder = tmp_path / "export"
    export(opened, commit, folder, None, folders)
    written = folder / "tree" / "pkg" / "m1.py"
    noted = written.stat()
    time.sleep(1.05 - time.time() % 1)  # (the next second: at most about one)
    os.utime(folder / "index")
    written.chmod(0o644)
    with open(written, "r+b") as handle:
        handle.write(b"IMPORT")
    os.utime(written, ns=(noted.st_atime_ns, noted.st_mtime_ns))
    after = written.stat()
    assert (after.st_size, after.st_mtime_ns) == (noted.st_size, noted.st_mtime_ns)
    assert written.read_text().startswith("IMPORT os") and "pkg/m1.py" in files

    # When: the export is checked
    changed = changed_files(opened, folder, None)

    # Then: the rewritten file is a change (its ctime moved, which the check compares whatever
    # the repository says), and only it
    assert changed == ["pkg/m1.py"]
