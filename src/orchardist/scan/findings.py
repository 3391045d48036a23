"""Findings: what a scanner reports, read from SARIF or from findings JSON.

Findings JSON (what a ``format = "json"`` scanner prints and an agent scanner writes to
``$ORCHARDIST_FINDINGS``) is an object ``{"findings": [...]}``, a bare array, or JSON lines, of
objects with ``rule``, ``message``, ``path`` (relative to the tree), ``start_line``,
``end_line`` (default: ``start_line``), ``severity`` (``error``, ``warning``, ``note``; default
``warning``) and an optional ``snippet``. A profile's ``fields`` maps these names to other keys
(``start_line = "line"``), so a tool's own JSON can be read without a converter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import OrchardistError

LEVELS = ("none", "note", "warning", "error")  # SARIF's result levels, weakest first
_SEVERITY_WORDS = {
    "critical": "error",
    "fatal": "error",
    "high": "error",
    "error": "error",
    "medium": "warning",
    "moderate": "warning",
    "warning": "warning",
    "warn": "warning",
    "low": "note",
    "info": "note",
    "information": "note",
    "hint": "note",
    "note": "note",
    "none": "none",
}


class ScanJobError(Exception):
    """A scanner process failed; the message says how."""


class ScanOutputError(OrchardistError):
    """A scanner's output could not be read."""


def level_rank(level: str) -> int:
    """Order of severity: none < note < warning < error."""
    return LEVELS.index(level)


@dataclass(frozen=True)
class Finding:
    """One reported problem at a place in a file."""

    rule: str
    message: str
    path: str  # relative to the tree, with forward slashes
    start_line: int  # 0: the file as a whole
    end_line: int
    level: str  # one of LEVELS
    start_column: int | None = None
    end_column: int | None = None
    snippet: str | None = None  # as the scanner gave it
    source: str = ""  # the flagged lines as orchardist read them, whitespace-normalized

    def with_source(self, source: str) -> Finding:
        """This finding with its lines' source: made by position, at half the CPU of
        ``dataclasses.replace`` (one a finding; 8,000 on a first scan of 1,000 files)."""
        return Finding(
            self.rule,
            self.message,
            self.path,
            self.start_line,
            self.end_line,
            self.level,
            self.start_column,
            self.end_column,
            self.snippet,
            source,
        )

    def base_fingerprint(self) -> str:
        """Rule, path and flagged source: unchanged when the lines merely move."""
        text = "\0".join((self.rule.lower(), self.path, self.source))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def identity(self) -> tuple[Any, ...]:
        """What makes two reports by one scanner the same report (overlapping scopes)."""
        return (
            self.rule,
            self.path,
            self.start_line,
            self.start_column,
            self.end_line,
            self.end_column,
            self.message,
        )

    def to_json(self) -> dict[str, Any]:
        """A plain mapping (cache entries, --format json)."""
        return dict(zip(_FINDING_FIELDS, _fields_of(self), strict=True))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        """The inverse of :meth:`to_json`."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


_FINDING_FIELDS = tuple(Finding.__dataclass_fields__)
_fields_of = attrgetter(*_FINDING_FIELDS)


@dataclass(frozen=True)
class ToolInfo:
    """The tool behind a scanner, for the SARIF ``tool.driver``."""

    name: str
    version: str | None = None
    information_uri: str | None = None
    rules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # id -> descriptor

    def to_json(self) -> dict[str, Any]:
        """A plain mapping (cache entries)."""
        return {
            "name": self.name,
            "version": self.version,
            "information_uri": self.information_uri,
            "rules": dict(self.rules),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolInfo:
        """The inverse of :meth:`to_json`."""
        return cls(
            data["name"],
            data.get("version"),
            data.get("information_uri"),
            dict(data.get("rules") or {}),
        )

    def only(self, rules: Iterable[str]) -> ToolInfo:
        """The same tool with only the descriptors of ``rules``."""
        wanted = set(rules)
        return replace(self, rules={k: v for k, v in self.rules.items() if k in wanted})


def source_of(lines: Sequence[str], start_line: int, end_line: int) -> str:
    """The lines ``start_line..end_line`` of ``lines``, each with its whitespace collapsed."""
    if end_line <= start_line:  # most findings flag one line
        return " ".join(lines[start_line - 1].split()) if 0 < start_line <= len(lines) else ""
    chosen = lines[start_line - 1 : end_line]
    return "\n".join(" ".join(line.split()) for line in chosen)


class SourceLines:
    """The normalized source of the lines a finding points at, read from a tree; each file
    read and split once (ruff reports eight findings a file on the benchmark's modules). Given
    to a parser, a finding is made once, with its source, not made again to add it."""

    __slots__ = ("_lines", "_tree")

    def __init__(self, tree: Path) -> None:
        self._tree = str(tree)
        self._lines: dict[str, list[str] | None] = {}

    def __call__(self, path: str, start_line: int, end_line: int) -> str:
        """The source of ``path``'s lines, or "" (the file as a whole, or unreadable)."""
        if start_line < 1:
            return ""
        try:
            lines = self._lines[path]
        except KeyError:
            lines = self._lines[path] = self._read(path)
        return "" if lines is None else source_of(lines, start_line, end_line)

    def _read(self, path: str) -> list[str] | None:
        try:  # (not pathlib's read_text, which makes a Path and a text wrapper per file)
            with open(os.path.join(self._tree, path), "rb") as file:
                return file.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            return None


# -- SARIF ---------------------------------------------------------------------------------


def parse_sarif(
    data: bytes, root: Path, source: Callable[[str, int, int], str] | None = None
) -> tuple[list[Finding], ToolInfo | None]:
    """Findings and tool of a SARIF log; paths made relative to ``root``; each finding's
    ``source`` from ``source(path, start_line, end_line)`` if given (a :class:`SourceLines`)."""
    log = _load(data)
    if not isinstance(log, dict) or not isinstance(log.get("runs"), list):
        raise ScanOutputError('not a SARIF log: no "runs" array')
    findings: list[Finding] = []
    tool: ToolInfo | None = None
    relative = relative_paths(root)
    for run in log["runs"]:
        if not isinstance(run, dict):
            raise ScanOutputError("not a SARIF log: a run is not an object")
        driver = _get(run, "tool", "driver") or {}
        rules = [r for r in driver.get("rules") or [] if isinstance(r, dict) and "id" in r]
        by_id = {str(r["id"]): r for r in rules}
        if tool is None:
            tool = ToolInfo(
                str(driver.get("name") or "unknown"),
                _opt_str(driver.get("version") or driver.get("semanticVersion")),
                _opt_str(driver.get("informationUri")),
            )
        tool = replace(tool, rules={**tool.rules, **by_id})
        first = _firsts(rules)
        for result in run.get("results") or []:
            if isinstance(result, dict):
                findings.append(_sarif_result(result, rules, first, relative, source))
    return findings, tool


_NO_RULE: Mapping[str, Any] = {}


def _firsts(rules: Sequence[Mapping[str, Any]]) -> dict[Any, Mapping[str, Any]]:
    """Each id's first descriptor: looked up per result, not searched for."""
    first: dict[Any, Mapping[str, Any]] = {}
    for rule in rules:
        with contextlib.suppress(TypeError):  # an unhashable id: searched for (_first)
            first.setdefault(rule["id"], rule)
    return first


def _first(
    rules: Sequence[Mapping[str, Any]], first: Mapping[Any, Mapping[str, Any]], rule_id: Any
) -> Mapping[str, Any]:
    """The first descriptor whose id equals ``rule_id`` (any JSON value), or none."""
    try:
        return first.get(rule_id, _NO_RULE)
    except TypeError:
        return next((r for r in rules if r.get("id") == rule_id), _NO_RULE)


def _sarif_result(
    result: Mapping[str, Any],
    rules: Sequence[Mapping[str, Any]],
    first: Mapping[Any, Mapping[str, Any]],
    relative: Callable[[str], str],
    source: Callable[[str, int, int], str] | None,
) -> Finding:
    rule_id = result.get("ruleId") or _get(result, "rule", "id")
    index = result["ruleIndex"] if "ruleIndex" in result else _get(result, "rule", "index")
    descriptor: Mapping[str, Any] = _NO_RULE
    if isinstance(index, int) and 0 <= index < len(rules):
        descriptor = rules[index]
        rule_id = rule_id or descriptor.get("id")
    elif rule_id is not None:
        descriptor = _first(rules, first, rule_id)
    level = result.get("level") or _get(descriptor, "defaultConfiguration", "level") or "warning"
    message = _get(result, "message", "text") or _get(result, "message", "markdown") or ""
    location: Any = next(iter(result.get("locations") or []), {})
    physical = location.get("physicalLocation") or {} if isinstance(location, dict) else {}
    path = relative(str(_get(physical, "artifactLocation", "uri") or ""))
    region = physical.get("region") or {}
    start = _int(region.get("startLine"), 0)
    end = max(_int(region.get("endLine"), start), start)
    return Finding(
        str(rule_id or "unknown"),
        str(message),
        path,
        start,
        end,
        level if level in LEVELS else "warning",
        _opt_int(region.get("startColumn")),
        _opt_int(region.get("endColumn")),
        _opt_str(_get(region, "snippet", "text")),
        "" if source is None else source(path, start, end),
    )


def relative_paths(root: Path) -> Callable[[str], str]:
    """What turns a SARIF URI or a path, absolute or relative, into a POSIX path relative to
    ``root``: the root resolved once and each URI turned once (a scanner names a file once
    per finding; resolving the root, a ``stat`` per folder of its path, for each of them was
    most of the time spent parsing)."""
    bases = (str(root), str(root.resolve()))
    known: dict[str, str] = {}

    def relative(uri: str) -> str:
        path = known.get(uri)
        if path is None:
            path = known[uri] = _relative(uri, bases)
        return path

    return relative


def _relative(uri: str, bases: tuple[str, str]) -> str:
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme in ("file", "") else uri
    if path.startswith("/"):
        for base in bases:
            if path == base or path.startswith(base.rstrip("/") + "/"):
                path = path[len(base.rstrip("/")) + 1 :]
                break
    parts = [p for p in PurePosixPath(path).parts if p not in (".", "")]
    return "/".join(parts)


# -- findings JSON -------------------------------------------------------------------------


def parse_findings_json(
    data: bytes,
    fields: Mapping[str, str] | None = None,
    source: Callable[[str, int, int], str] | None = None,
) -> list[Finding]:
    """Findings from findings JSON (an object with "findings", an array, or JSON lines); each
    one's ``source`` from ``source(path, start_line, end_line)`` if given."""
    fields = fields or {}
    items = _json_items(data)
    findings = []
    relative = relative_paths(Path("/nonexistent"))
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise ScanOutputError(f"finding {n} is not an object")
        findings.append(_json_finding(item, fields, n, relative, source))
    return findings


def _json_items(data: bytes) -> list[Any]:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return []
    try:
        doc = json.loads(text)
    except ValueError:
        try:  # JSON lines (mypy --output json)
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise ScanOutputError(f"not JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
        return list(doc["findings"])
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        return [doc]
    raise ScanOutputError('expected {"findings": [...]}, an array, or JSON lines')


def _json_finding(
    item: Mapping[str, Any],
    fields: Mapping[str, str],
    n: int,
    relative: Callable[[str], str],
    source: Callable[[str, int, int], str] | None,
) -> Finding:
    def value(name: str) -> Any:
        key = fields.get(name, name)
        current: Any = item
        for part in key.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        return current

    path, start = value("path"), value("start_line")
    if not isinstance(path, str) or not path:
        raise ScanOutputError(f"finding {n} has no path")
    line = _int(start, 0)
    end = max(_int(value("end_line"), line), line)
    severity = str(value("severity") or "warning").lower()
    path = relative(path)
    return Finding(
        rule=str(value("rule") or "unknown"),
        message=str(value("message") or ""),
        path=path,
        start_line=line,
        end_line=end,
        level=_SEVERITY_WORDS.get(severity, "warning"),
        snippet=_opt_str(value("snippet")),
        source="" if source is None else source(path, line, end),
    )


# -- helpers -------------------------------------------------------------------------------


def _load(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise ScanOutputError(f"not JSON: {exc}") from None


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return default
    try:
        return max(int(value), 0)
    except ValueError:
        return default


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
