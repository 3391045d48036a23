"""Per-test results of an attempt's verify commands, kept beside its log.

The attempt's folders (and the JUnit reports verify left in them) are removed when it ends; the
dashboard shows a reviewer the tests one by one, so the reports are read (through a descriptor
that follows no link: the agent's code could write that folder) and kept as JSON next to the
attempt's log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..safeio import open_folder, read_capped
from .oracle import parse_junit

MAX_TESTS_KEPT = 2000  # per command: a reviewer reads failures, not 50,000 passes
MAX_REPORTS_BYTES = 4 * 1024 * 1024


def reports_path(log: Path) -> Path:
    """Where the per-test results of the attempt whose log is ``log`` are kept."""
    return log.with_suffix(".tests.json")


def save_reports(scratch: Path, commands: Sequence[str], check: str | None, log: Path) -> None:
    """Keep the reports verify wrote in ``scratch`` (``0.xml`` for ``commands[0]``, ...,
    ``check.xml``) beside ``log``; nothing when there are none."""
    named = [(f"{i}.xml", command) for i, command in enumerate(commands)]
    if check is not None:
        named.append(("check.xml", check))
    folder = open_folder(scratch)
    if folder is None:
        return
    try:
        kept = [_entry(command, name, folder) for name, command in named]
    finally:
        os.close(folder)
    found = [entry for entry in kept if entry is not None]
    if found:
        reports_path(log).write_text(json.dumps(found), encoding="utf-8")


def _entry(command: str, name: str, folder: int) -> dict[str, Any] | None:
    report = parse_junit(name, folder)
    if report is None:
        return None
    failed, skipped, passed = (
        sorted(ids) for ids in (report.failed, report.skipped, report.passed)
    )
    cut = len(failed) + len(skipped) + len(passed) > MAX_TESTS_KEPT
    return {
        "command": command,
        "failed": failed[:MAX_TESTS_KEPT],
        "skipped": skipped[: max(0, MAX_TESTS_KEPT - len(failed))],
        "passed": passed[: max(0, MAX_TESTS_KEPT - len(failed) - len(skipped))],
        "counts": {"failed": len(failed), "skipped": len(skipped), "passed": len(passed)},
        "cut": cut,
    }


def load_reports(log: Path) -> list[dict[str, Any]]:
    """The kept per-test results of an attempt (empty when verify wrote no report)."""
    raw = read_capped(reports_path(log), MAX_REPORTS_BYTES)
    if raw is None:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    return data if isinstance(data, list) else []
