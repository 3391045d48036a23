"""Merging: every scanner's findings, deduplicated, as one SARIF 2.1.0 log (or JSON, or a table).

Two reports are the same finding when rule (ignoring case), path and the normalized source of
the flagged lines agree. That identity survives edits that only move the lines; identical
findings in one file are told apart by their order (the n-th occurrence), which is appended to
the fingerprint. A finding reported by several scanners appears once, in the run of the first
scanner (plan order) that reported it, with the others listed in its ``properties``.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from .. import safeio
from ..errors import UsageError
from .findings import LEVELS, Finding, ToolInfo

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "orchardist/v1"
SRCROOT = "SRCROOT"


@dataclass(frozen=True)
class ScannerReport:
    """What one scanner reported in one scan."""

    name: str
    findings: tuple[Finding, ...]
    tool: ToolInfo | None = None
    error: str | None = None  # the scanner failed: its findings may be incomplete
    hits: int = 0  # cache entries used (files, or 1 for a tree)
    misses: int = 0  # entries computed by running the scanner
    invocations: int = 0  # processes started


@dataclass(frozen=True)
class MergedFinding:
    """One finding after deduplication."""

    scanner: str  # the scanner whose run holds it
    finding: Finding
    fingerprint: str
    reporters: tuple[str, ...] = field(default=())  # every scanner that reported it


def merge(reports: Sequence[ScannerReport]) -> list[MergedFinding]:
    """Deduplicated findings, grouped by scanner in the order given, then by place.

    Each finding's place and identity are computed once; a group of one scanner's findings
    (nearly all of them: few findings are reported by two scanners) skips the reporters'
    bookkeeping. The findings are sorted by place once per scanner, and the merged ones by
    scanner then place (stable: ties keep the groups' order)."""
    occurrences: dict[str, dict[str, list[Finding]]] = defaultdict(dict)
    places: dict[int, tuple[Any, ...]] = {}  # id(finding) -> its place
    for report in reports:
        seen: set[tuple[Any, ...]] = set()
        placed = sorted(((_place(f), f) for f in report.findings), key=_first)
        for place, finding in placed:
            identity = finding.identity()
            if identity in seen:  # one scanner, overlapping scopes
                continue
            seen.add(identity)
            places[id(finding)] = place
            occurrences[finding.base_fingerprint()].setdefault(report.name, []).append(finding)
    order = {report.name: i for i, report in enumerate(reports)}
    alone = {report.name: (report.name,) for report in reports}
    keyed: list[tuple[tuple[Any, ...], MergedFinding]] = []
    for base, by_scanner in occurrences.items():
        if len(by_scanner) == 1:
            ((name, found),) = by_scanner.items()
            keyed += [
                ((order[name], places[id(f)]), MergedFinding(name, f, f"{base}:{n}", alone[name]))
                for n, f in enumerate(found)
            ]
            continue
        names = sorted(by_scanner, key=order.__getitem__)
        for n in range(max(len(found) for found in by_scanner.values())):
            reporters = tuple(name for name in names if n < len(by_scanner[name]))
            first, finding = reporters[0], by_scanner[reporters[0]][n]
            merged = MergedFinding(first, finding, f"{base}:{n}", reporters)
            keyed.append(((order[first], places[id(finding)]), merged))
    keyed.sort(key=_first)
    return [m for _, m in keyed]


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _place(finding: Finding) -> tuple[Any, ...]:
    return (
        finding.path,
        finding.start_line,
        finding.start_column or 0,
        finding.rule,
        finding.message,
    )


# -- SARIF ---------------------------------------------------------------------------------


def to_sarif(
    reports: Sequence[ScannerReport],
    merged: Sequence[MergedFinding],
    root: Path,
    base_commit: str,
) -> dict[str, Any]:
    """One SARIF 2.1.0 log: a run per scanner with its tool, rules and results."""
    runs = []
    for report in reports:
        mine = [m for m in merged if m.scanner == report.name]
        tool = report.tool or ToolInfo(report.name)
        rule_ids = list(dict.fromkeys(m.finding.rule for m in mine))
        index = {rule: n for n, rule in enumerate(rule_ids)}  # looked up, not searched for
        rules = [_descriptor(rule, tool.rules.get(rule)) for rule in rule_ids]
        driver: dict[str, Any] = {"name": tool.name, "rules": rules}
        if tool.version:
            driver["version"] = tool.version
        if tool.information_uri:
            driver["informationUri"] = tool.information_uri
        invocation: dict[str, Any] = {"executionSuccessful": report.error is None}
        if report.error is not None:
            invocation["toolExecutionNotifications"] = [
                {"level": "error", "message": {"text": report.error}}
            ]
        runs.append(
            {
                "tool": {"driver": driver},
                "automationDetails": {"id": f"orchardist/{report.name}/"},
                "originalUriBaseIds": {SRCROOT: {"uri": root.resolve().as_uri() + "/"}},
                "invocations": [invocation],
                "results": [_result(m, index[m.finding.rule]) for m in mine],
                "properties": _properties(report, base_commit),
            }
        )
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": runs}


def _descriptor(rule: str, known: Any) -> dict[str, Any]:
    """A rule's reportingDescriptor: the tool's own when it gave one, else just the id."""
    if isinstance(known, dict):
        return {**known, "id": rule}
    return {"id": rule}


def _result(m: MergedFinding, rule_index: int) -> dict[str, Any]:
    f = m.finding
    physical: dict[str, Any] = {"artifactLocation": {"uri": f.path, "uriBaseId": SRCROOT}}
    if f.start_line >= 1:
        region: dict[str, Any] = {"startLine": f.start_line, "endLine": f.end_line}
        if f.start_column:
            region["startColumn"] = f.start_column
        if f.end_column:
            region["endColumn"] = f.end_column
        if f.snippet:
            region["snippet"] = {"text": f.snippet}
        physical["region"] = region
    return {
        "ruleId": f.rule,
        "ruleIndex": rule_index,
        "level": f.level,
        "message": {"text": f.message or f.rule},
        "locations": [{"physicalLocation": physical}],
        "partialFingerprints": {FINGERPRINT_KEY: m.fingerprint},
        "properties": {"orchardist": {"reporters": list(m.reporters)}},
    }


# -- JSON and table ------------------------------------------------------------------------


def to_json(merged: Sequence[MergedFinding]) -> list[dict[str, Any]]:
    """Findings as plain objects (``--format json``)."""
    return [
        dict(
            zip(
                _JSON_KEYS,
                (m.scanner, list(m.reporters), m.fingerprint, *_shown(m.finding)),
                strict=True,
            )
        )
        for m in merged
    ]


# a finding's fields but its source, read at once (not through Finding.to_json, then filtered)
_SHOWN = tuple(name for name in Finding.__dataclass_fields__ if name != "source")
_shown = attrgetter(*_SHOWN)
_JSON_KEYS = ("scanner", "reporters", "fingerprint", *_SHOWN)


def to_table(merged: Sequence[MergedFinding]) -> str:
    """One line per finding: ``path:line:col level rule message [scanners]``."""
    lines = []
    for m in merged:
        f = m.finding
        where = f"{f.path}:{f.start_line}" + (f":{f.start_column}" if f.start_column else "")
        lines.append(f"{where}  {f.level:<7} {f.rule}  {f.message}  [{', '.join(m.reporters)}]")
    return "\n".join(lines)


def render(result: Any, fmt: str, root: Path) -> str:
    """The findings as SARIF, JSON or a table. The documents are written compactly, for tools
    to read: indented, 600 KB of SARIF took 30 ms to write and grew by a third."""
    return Rendering(result, root).document(fmt)


class Rendering:
    """A scan's documents, each part encoded once however often it is written: a scan that
    leaves a memo (:mod:`.memo`) writes its SARIF twice, with its own cache counts and as a
    hit's, and its findings twice (``--json`` and the memo); on 1,000 files, encoding them
    again took longer than the rest of the memo."""

    def __init__(self, result: Any, root: Path) -> None:
        self.result, self.root = result, root
        self._runs: list[str] | None = None  # each run's SARIF up to its "properties"
        self._findings: str | None = None

    def document(self, fmt: str, reports: Sequence[ScannerReport] | None = None) -> str:
        """SARIF, JSON or a table; SARIF with the cache counts of ``reports`` if given."""
        if fmt == "sarif":
            return self.sarif(self.result.reports if reports is None else reports)
        if fmt == "json":
            base = json.dumps(self.result.base_commit)
            return '{"base":' + base + ',"findings":' + self.findings() + "}"
        return to_table(self.result.merged)

    def sarif(self, reports: Sequence[ScannerReport]) -> str:
        """:func:`to_sarif`, compact, with the cache counts of ``reports`` (the result's, or
        the same scan's counted otherwise)."""
        if self._runs is None:
            r = self.result
            runs = to_sarif(r.reports, r.merged, self.root, r.base_commit)["runs"]
            for run in runs:
                del run["properties"]  # the last key: what follows is written per rendering
            self._runs = [_compact(run)[:-1] + ',"properties":' for run in runs]
        runs = [
            body + _compact(_properties(report, self.result.base_commit)) + "}"
            for body, report in zip(self._runs, reports, strict=True)
        ]
        head = _compact({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": []})[: -len("]}")]
        return head + ",".join(runs) + "]}"

    def findings(self) -> str:
        """:func:`to_json` of the findings, compact."""
        if self._findings is None:
            self._findings = _compact(to_json(self.result.merged))
        return self._findings


def _compact(value: Any) -> str:
    """``value`` as JSON, on one line; its documents hold no cycle to look for."""
    return json.dumps(value, separators=(",", ":"), check_circular=False)


def _properties(report: ScannerReport, base_commit: str) -> dict[str, Any]:
    """A run's ``properties``: its scanner, the base, and its cache counts."""
    cache = {"hits": report.hits, "misses": report.misses}
    return {"orchardist": {"scanner": report.name, "base": base_commit, "cache": cache}}


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all; a device or FIFO in place."""
    try:
        safeio.write_whole(path, (text + "\n").encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- what a scan prints besides its findings ------------------------------------------


def summary_json(result: Any, code: int, output: Path | None, rendering: Rendering) -> str:
    """The ``--json`` document, compact, its findings as ``rendering`` encoded them."""
    head = _compact(summary(result, code, output))[:-1]
    return head + ',"results":' + rendering.findings() + "}"


def summary(result: Any, code: int, output: Path | None) -> dict[str, Any]:
    """The ``--json`` document but its findings (``results``, last: :func:`summary_json`)."""
    levels = {level: 0 for level in reversed(LEVELS)}
    for m in result.merged:
        levels[m.finding.level] += 1
    return {
        "scan": result.scan_id,
        "base": result.base_commit,
        "exit_code": code,
        "output": None if output is None else str(output),
        "findings": len(result.merged),
        "failed": [r.name for r in result.failed],
        "levels": levels,
        "scanners": [
            {
                "name": r.name,
                "findings": sum(m.scanner == r.name for m in result.merged),
                "reported": len(r.findings),
                "hits": r.hits,
                "misses": r.misses,
                "invocations": r.invocations,
                "error": r.error,
            }
            for r in result.reports
        ],
    }


def summary_text(result: Any, stats: bool) -> str:
    """What a scan prints after its findings: a line of counts, each failure, ``--stats``."""
    out = io.StringIO()
    counts = {level: 0 for level in reversed(LEVELS)}
    for m in result.merged:
        counts[m.finding.level] += 1
    shown = ", ".join(f"{n} {level}" for level, n in counts.items() if n) or "none"
    head = f"scanned {result.base_commit[:12]} with {len(result.reports)} scanner(s)"
    if result.failed:  # a failed scanner found nothing we know of: never "0 findings"
        names = ", ".join(r.name for r in result.failed)
        others = len(result.reports) - len(result.failed)
        print(
            f"scan FAILED: {len(result.failed)} of {len(result.reports)} scanner(s) failed "
            f"({names}); {head}"
            + (f", the other {others} found {len(result.merged)} ({shown})" if others else ""),
            file=out,
        )
    else:
        print(f"{head}: {len(result.merged)} finding(s) ({shown})", file=out)
    for report in result.reports:
        if report.error is not None:
            print(f"  {report.name}: FAILED: {report.error}", file=out)
        if stats:
            print(
                f"  {report.name}: {report.hits} cached, {report.misses} scanned "
                f"({report.invocations} process(es)), {len(report.findings)} reported",
                file=out,
            )
    return out.getvalue()
