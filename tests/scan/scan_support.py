"""Helpers for scanner tests: the fixture package as a repository, and a scanner that logs.

``LOGGING_SCANNER`` is a real scanner process: it reports every line containing ``TODO`` as
a finding (findings JSON on stdout) and appends the files it was given to a log, so that a
test can see from the outcome which files were scanned.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from support import git

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "scan_repo"
SCHEMA = Path(__file__).resolve().parent.parent / "fixtures" / "sarif" / "sarif-2.1.0-rtm.5.json"
PYTHON = shlex.quote(sys.executable)

LOGGING_SCANNER = """\
import json, sys
log, files = sys.argv[1], sys.argv[2:]
try:
    with open(log, "a") as out:
        out.write(json.dumps(files) + "\\n")
except OSError:  # a sandbox refused: scan all the same
    pass
findings = []
for path in files:
    for n, line in enumerate(open(path), 1):
        if "TODO" in line:
            findings.append({"rule": "todo", "message": "a TODO", "path": path,
                             "start_line": n, "severity": "warning"})
print(json.dumps({"findings": findings}))
"""


def fixture_repo(path: Path) -> Path:
    """A repository holding the fixture package (a few hundred lines, known issues)."""
    shutil.copytree(FIXTURE, path)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "fixture")
    return path


def logging_scanner(tmp: Path) -> tuple[str, Path]:
    """The command of a logging scanner (without {files}) and its invocation log."""
    script = tmp / "todo_scanner.py"
    script.write_text(LOGGING_SCANNER)
    log = tmp / "invocations.log"
    return f"{PYTHON} {shlex.quote(str(script))} {shlex.quote(str(log))}", log


def invocations(log: Path) -> list[list[str]]:
    """The file lists the logging scanner was run with, one per process."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def scanned_files(log: Path) -> list[str]:
    """Every file the logging scanner was given, sorted."""
    return sorted(f for files in invocations(log) for f in files)


def validate_sarif(log: dict[str, Any]) -> None:
    """Raise unless ``log`` is valid against the official SARIF 2.1.0 schema."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator(schema).validate(log)
