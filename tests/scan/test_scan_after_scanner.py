"""What a scan does after its scanner's process ends: the output read into findings, each made
once with the source of its lines; the export's check (did the scanner change tracked files of
its tree) run beside that reading, not after it; the findings merged and written."""

from __future__ import annotations

import gc
import io
import threading
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from scan_support import PYTHON
from test_scan_engine import scan

from orchardist.git.repo import Repo
from orchardist.scan import engine, findings, trees
from orchardist.scan.cli import plain_scan
from orchardist.scan.engine import scan_root
from orchardist.scan.findings import Finding
from support import make_repo, write_plan

# A real scanner process: a SARIF log of every line holding "TODO" in the files it is given,
# with its rule's descriptor, as ruff writes them (no ruleIndex: the rule found by its id).
SARIF_SCANNER = """\
import json, sys
results = []
for path in sys.argv[1:]:
    for n, line in enumerate(open(path), 1):
        if "TODO" in line:
            results.append({
                "ruleId": "todo", "level": "warning", "message": {"text": "a TODO"},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": path}, "region": {"startLine": n}}}],
            })
rule = {"id": "todo", "shortDescription": {"text": "TODO left"}}
tool = {"driver": {"name": "todos", "version": "1", "rules": [rule]}}
print(json.dumps({"version": "2.1.0", "runs": [{"tool": tool, "results": results}]}))
"""

WAIT_S = 10.0  # how long a parse waits for the check to start (it starts within milliseconds)


def sarif_plan(tmp_path: Path, files: int, more: int = 0) -> Path:
    """A repository of ``files`` modules (two TODOs each, and ``more``) and a plan scanning
    them as SARIF."""
    script = tmp_path / "sarif_scanner.py"
    script.write_text(SARIF_SCANNER)
    sources = {
        f"src/m{i}.py": f"x = {i}\n#   TODO:   first  {i}\ny = 1  # TODO second\n"
        + "z = 2  # TODO more\n" * more
        for i in range(files)
    }
    repo = make_repo(tmp_path / "repo", sources)
    return write_plan(
        repo,
        f"""
        [scanners.todos]
        command = "{PYTHON} {script} {{files}}"
        format = "sarif"
        include = ["**/*.py"]
        """,
        name="scan.toml",
    )


def test_each_finding_is_made_once_with_the_source_of_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a SARIF scanner reporting two findings in each of 6 files, and every Finding
    # made in this process counted
    plan = sarif_plan(tmp_path, 6)
    made: list[Finding] = []
    init = Finding.__init__

    def counted(self: Finding, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Finding, "__init__", counted)

    # When: it is scanned, without the cache (nothing read back from it)
    result = scan(plan, use_cache=False)

    # Then: 12 findings, each with its flagged line's source, whitespace collapsed; and one
    # Finding made per finding, not a second to add its source
    assert result.failed == []
    sources = sorted({m.finding.source for m in result.merged})
    assert sources == [*(f"# TODO: first {i}" for i in range(6)), "y = 1 # TODO second"]
    assert len(result.merged) == 12
    assert len(made) == 12


def test_the_export_is_checked_while_the_scanners_output_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a scan whose export check notes when it starts, and whose SARIF parse waits
    # (up to WAIT_S) for that check to have started before it reads the output
    plan = sarif_plan(tmp_path, 3)
    checking = threading.Event()
    seen_by_parse: list[bool] = []
    check, parse = trees.changed_files, findings.parse_sarif

    def noted_check(*args: Any) -> list[str]:
        checking.set()
        return check(*args)

    def waiting_parse(*args: Any) -> Any:
        seen_by_parse.append(checking.wait(WAIT_S))
        return parse(*args)

    monkeypatch.setattr(trees, "changed_files", noted_check)
    monkeypatch.setattr(findings, "parse_sarif", waiting_parse)

    # When: it is scanned
    result = scan(plan, use_cache=False)

    # Then: the check had started before the output was parsed (its git process runs beside
    # the parse), and the scan is whole
    assert seen_by_parse == [True]
    assert result.failed == [] and len(result.merged) == 6


def test_the_command_writes_its_outputs_while_the_scan_folder_is_removed_and_returns_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a scan command writing SARIF to a file, and the wait for its scratch folder's
    # removal noting whether the SARIF was already written when it began
    plan = sarif_plan(tmp_path, 3)
    output = tmp_path / "out.sarif"
    written_before_the_wait: list[bool] = []
    removing = engine.removing

    def noted(folder: Path) -> Any:
        waited = removing(folder)

        def wait() -> None:
            written_before_the_wait.append(output.exists())
            waited()

        return wait

    monkeypatch.setattr(engine, "removing", noted)
    monkeypatch.chdir(plan.parent)

    # When: the command runs
    with redirect_stdout(io.StringIO()):
        code = plain_scan([str(plan), "--no-cache", "-o", str(output)])

    # Then: its outputs were written before it waited for the removal, and when it returned
    # the scan folders were gone (only the folder that holds them is left)
    assert code == 0 and written_before_the_wait == [True]
    scans = scan_root(Repo(plan.parent), None)
    assert scans.is_dir() and list(scans.iterdir()) == []


def test_a_scanners_output_is_read_without_the_cyclic_collectors_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a scanner reporting 600 findings (a SARIF log of ~6,000 JSON objects), the
    # collector on, and its passes counted while that log is parsed
    plan = sarif_plan(tmp_path, 30, more=18)
    parsing = threading.Event()
    passes: list[int] = []
    parse = findings.parse_sarif

    def noted_parse(*args: Any) -> Any:
        parsing.set()
        try:
            return parse(*args)
        finally:
            parsing.clear()

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and parsing.is_set():
            passes.append(info["generation"])

    monkeypatch.setattr(findings, "parse_sarif", noted_parse)
    assert gc.isenabled()

    # When: it is scanned
    gc.callbacks.append(counted)  # (the list the collector calls: changed in place)
    try:
        result = scan(plan, use_cache=False)
    finally:
        gc.callbacks.remove(counted)

    # Then: every finding was read, no collection ran during the parse, and the collector
    # is on again
    assert len(result.merged) == 600
    assert passes == []
    assert gc.isenabled()
