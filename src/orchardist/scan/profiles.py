"""Scanner profiles: the ``[scanners.NAME]`` tables of a plan, validated with located errors.

A profile says how to run one read-only check over a tree and how to read what it reports::

    [scanners.ruff]
    command = "ruff check --no-cache --output-format sarif {files}"
    format = "sarif"        # sarif | json | agent
    scope = "file"          # file: cached per file; tree: once per tree
    include = ["**/*.py"]
    exclude = ["tests/**"]
    config = ["pyproject.toml", "ruff.toml"]   # files whose content changes every result
    version = "ruff --version"                 # its output is part of the cache key
    timeout = "2m"
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import unknown_key

SCANNER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
DEFAULT_SCAN_TIMEOUT_S = 600.0
# finding field -> key in a json scanner's objects (dotted paths reach into nested objects)
FINDING_FIELDS = ("rule", "message", "path", "start_line", "end_line", "severity", "snippet")
SCANNER_KEYS = {
    "command",
    "format",
    "scope",
    "include",
    "exclude",
    "config",
    "version",
    "timeout",
    "env",
    "fields",
    "agent",
    "prompt",
}


class Format(enum.Enum):
    """How a scanner reports."""

    SARIF = "sarif"  # a SARIF 2.1.0 log on stdout or in {output}
    JSON = "json"  # findings JSON (orchardist's schema, or mapped with ``fields``)
    AGENT = "agent"  # an agent profile writes findings JSON to $ORCHARDIST_FINDINGS


class Scope(enum.Enum):
    """What one cached result covers."""

    FILE = "file"  # one file: re-run only for files whose content changed
    TREE = "tree"  # the whole tree: re-run when anything changed


@dataclass(frozen=True)
class ScannerProfile:
    """One validated ``[scanners.NAME]`` table."""

    name: str
    format: Format
    scope: Scope
    command: str = ""  # with {files} (shell-quoted paths) and optionally {output}
    include: tuple[str, ...] = ("**",)
    exclude: tuple[str, ...] = ()
    config: tuple[str, ...] = ()  # globs of files whose content is part of every cache key
    version: str | None = None  # a command whose output is part of the cache key
    timeout_s: float = DEFAULT_SCAN_TIMEOUT_S
    env: tuple[str, ...] = ()  # caller's variables passed through
    fields: Mapping[str, str] = field(default_factory=dict)
    agent: str | None = None  # format = "agent": the agent profile
    prompt: str = ""

    def cache_identity(self) -> dict[str, Any]:
        """Everything in the profile that can change what the scanner reports."""
        return {
            "command": self.command,
            "format": self.format.value,
            "scope": self.scope.value,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "config": list(self.config),
            "version": self.version,
            "env": list(self.env),
            "fields": dict(sorted(self.fields.items())),
            "agent": self.agent,
            "prompt": self.prompt,
        }


def validate_scanners(
    raw: object,
    problem: Callable[[str, str], None],
    agents: Mapping[str, Any],
    parse_duration: Callable[[object], float],
) -> dict[str, ScannerProfile]:
    """Profiles from the raw ``scanners`` table; each problem reported as (message, field)."""
    if not isinstance(raw, dict):
        problem("expected a table of scanner profiles", "scanners")
        return {}
    profiles: dict[str, ScannerProfile] = {}
    for name, table in raw.items():
        where = f"scanners.{name}"
        if not SCANNER_NAME.match(name):
            problem("a scanner name must match [A-Za-z0-9_.-]+", where)
            continue
        if not isinstance(table, dict):
            problem("expected a table", where)
            continue
        profile = _Profile(name, table, problem, agents, parse_duration).build()
        if profile is not None:
            profiles[name] = profile
    return profiles


class _Profile:
    """Checks one table, reporting every problem."""

    def __init__(
        self,
        name: str,
        raw: dict[str, Any],
        problem: Callable[[str, str], None],
        agents: Mapping[str, Any],
        parse_duration: Callable[[object], float],
    ) -> None:
        self.name, self.raw, self._problem = name, raw, problem
        self.agents, self.parse_duration = agents, parse_duration
        self.ok = True

    def problem(self, message: str, key: str) -> None:
        self.ok = False
        self._problem(message, f"scanners.{self.name}.{key}")

    def build(self) -> ScannerProfile | None:
        for key in sorted(set(self.raw) - SCANNER_KEYS):
            self.problem(unknown_key(key, SCANNER_KEYS), key)
        fmt = self._choice("format", Format, Format.SARIF)
        scope = self._choice("scope", Scope, Scope.TREE if fmt is Format.AGENT else Scope.FILE)
        command = self._string("command") or ""
        agent, prompt = self._agent(fmt)
        if fmt is not Format.AGENT and not command.strip():
            self.problem("required: the command to run, with {files} for the files", "command")
        if fmt is Format.AGENT and "command" in self.raw:
            self.problem('an agent scanner has no command; it uses "agent" and "prompt"', "command")
        if scope is Scope.FILE and fmt is not Format.AGENT and "{files}" not in command:
            self.problem('scope = "file" needs {files} in the command', "command")
        timeout = DEFAULT_SCAN_TIMEOUT_S
        if "timeout" in self.raw:
            try:
                timeout = self.parse_duration(self.raw["timeout"])
            except ValueError as exc:
                self.problem(str(exc), "timeout")
        fields = self._fields(fmt)
        if not self.ok:
            return None
        return ScannerProfile(
            name=self.name,
            format=fmt,
            scope=scope,
            command=command,
            include=self._globs("include", ("**",)),
            exclude=self._globs("exclude", ()),
            config=self._globs("config", ()),
            version=self._string("version"),
            timeout_s=timeout,
            env=self._globs("env", ()),
            fields=fields,
            agent=agent,
            prompt=prompt,
        )

    def _choice(self, key: str, kind: type[enum.Enum], default: Any) -> Any:
        if key not in self.raw:
            return default
        try:
            return kind(self.raw[key])
        except ValueError:
            self.problem(f"expected one of {', '.join(str(m.value) for m in kind)}", key)
            return default

    def _string(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is not None and not isinstance(value, str):
            self.problem("expected a string", key)
            return None
        return value

    def _globs(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.raw.get(key, list(default))
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem("expected a string or a list of non-empty strings", key)
            return default
        return tuple(value)

    def _agent(self, fmt: Format) -> tuple[str | None, str]:
        if fmt is not Format.AGENT:
            for key in ("agent", "prompt"):
                if key in self.raw:
                    self.problem(f'only an agent scanner (format = "agent") has {key!r}', key)
            return None, ""
        agent = self._string("agent")
        known = ", ".join(sorted(self.agents)) or "none defined"
        if agent is None:
            self.problem(f"required: an agent profile (known: {known})", "agent")
        elif agent not in self.agents:
            self.problem(f"unknown agent {agent!r} (known: {known})", "agent")
        prompt = self._string("prompt") or ""
        if not prompt.strip():
            self.problem("required: what the agent should review", "prompt")
        return agent, prompt

    def _fields(self, fmt: Format) -> dict[str, str]:
        raw = self.raw.get("fields", {})
        if "fields" in self.raw and fmt is not Format.JSON:
            self.problem('only a json scanner (format = "json") maps fields', "fields")
            return {}
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            self.problem("expected a table of finding field = key in the scanner's JSON", "fields")
            return {}
        for key in sorted(set(raw) - set(FINDING_FIELDS)):
            self.problem(
                f"unknown finding field {key!r}; known: {', '.join(FINDING_FIELDS)}", "fields"
            )
        return dict(raw)
