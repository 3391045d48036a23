"""A scan's cache keys: what besides the scanned content can change a scanner's results (its
profile, its config files, the environment variables it reads, its tool's version: the output
of the profile's version command, remembered with the stamp of the tool's files), hashed into
the key its cached entries are filed under; and those entries, encoded and read back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..confine.procs import ProcessRequest, run_process
from .globs import select_files
from .runner import scanner_env
from .toolstamp import tool_stamp

if TYPE_CHECKING:
    from ..confine.procs import CancelToken
    from ..state.agentrecords import AgentProfile
    from ..state.store import Store
    from .findings import Finding, ToolInfo
    from .profiles import ScannerProfile

CACHE_SCHEMA = 1  # bump when what a cache entry holds changes
MAX_CACHE_ENTRIES = 200_000
VERSION_TIMEOUT_S = 60.0
MAX_ENTRY_BYTES = 1 << 20  # a larger per-file result is not cached


class KeySource(Protocol):
    """What a key reads of the scan it is for (:class:`.engine.Scanner` is one), and the two
    things it notes there: the version keys it used, and whether each version was stamped."""

    keys_used: list[str]
    stamped: bool

    @property
    def workdir(self) -> str: ...
    @property
    def environ(self) -> Mapping[str, str]: ...
    @property
    def use_cache(self) -> bool: ...
    @property
    def agents(self) -> Mapping[str, AgentProfile]: ...
    @property
    def cancel(self) -> CancelToken: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def store(self) -> Store: ...


def config_key(
    scanner: KeySource, profile: ScannerProfile, entries: Mapping[str, str], work: Path
) -> str:
    """The digest of everything but the scanned content that can change ``profile``'s results
    in ``scanner``'s scan (the version key it asks is noted in ``scanner.keys_used``)."""
    configs = select_files(entries, profile.config, ()) if profile.config else []
    identity: dict[str, Any] = {
        "schema": CACHE_SCHEMA,
        "workdir": scanner.workdir,
        "profile": profile.cache_identity(),
        "config": {path: entries[path] for path in configs},
        "env": {name: scanner.environ.get(name) for name in profile.env},
    }
    if profile.version and scanner.use_cache:  # without the cache no key is ever used
        identity["version"] = _version(scanner, profile, work)
    if profile.agent is not None:
        agent = scanner.agents[profile.agent]
        identity["agent"] = json.dumps(agent.__dict__, sort_keys=True, default=str)
    return digest(json.dumps(identity, sort_keys=True, default=str))


def _version(scanner: KeySource, profile: ScannerProfile, work: Path) -> str:
    """The output of the profile's version command (part of its cache key); remembered
    with the stamp of the tool's files, and asked again only when that changed."""
    assert profile.version is not None
    from ..state import scancache

    stamp = tool_stamp(profile.version, scanner.environ.get("PATH"))
    env = {name: scanner.environ.get(name) for name in ("PATH", *profile.env)}
    key = digest("version", profile.version, json.dumps(env, sort_keys=True), stamp or "")
    scanner.keys_used.append(key)
    scanner.stamped = scanner.stamped and stamp is not None
    if stamp is not None and scanner.use_cache:
        known = scancache.get(scanner.store, [key], scanner.clock())
        if key in known:
            return known[key]
    folder = work / f"{profile.name}.version"
    folder.mkdir(parents=True)
    log = folder / "out"
    proc = run_process(
        ProcessRequest(
            argv=["/bin/sh", "-c", profile.version],
            cwd=folder,
            env=_env(scanner, profile, folder),
            log=log,
            timeout_s=VERSION_TIMEOUT_S,
            cancel=scanner.cancel,
        )
    )
    version = f"{proc.exit_code}:{log.read_text(errors='replace')}"
    if stamp is not None and scanner.use_cache and proc.exit_code == 0:
        scancache.put(
            scanner.store, [(key, profile.name, version)], scanner.clock(), MAX_CACHE_ENTRIES
        )
    return version


def _env(scanner: KeySource, profile: ScannerProfile, folder: Path) -> dict[str, str]:
    """The version command's environment: the scanner's own, in ``folder``."""
    agent = scanner.agents[profile.agent] if profile.agent is not None else None
    return scanner_env(profile, folder, scanner.environ, agent)


def digest(*parts: str) -> str:
    """The sha256 of ``parts``, joined by NULs, in hex."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def encode_entry(findings: list[Finding], tool: ToolInfo | None) -> str | None:
    """The cache entry of ``findings`` and ``tool`` (its rules those name); None if it is
    larger than ``MAX_ENTRY_BYTES``."""
    rules = {f.rule for f in findings}
    value = json.dumps(
        {
            "findings": [f.to_json() for f in findings],
            "tool": tool.only(rules).to_json() if tool is not None else None,
        }
    )
    return value if len(value) <= MAX_ENTRY_BYTES else None


def read_entries(
    store: Store, keys: list[str], now: float
) -> tuple[list[Finding], list[ToolInfo], set[str]]:
    """What the cache holds for ``keys``: their findings, their tools, and the keys it held."""
    from ..state import scancache

    held = scancache.get(store, keys, now)
    if not held:
        return [], [], set()
    from .findings import Finding, ToolInfo

    findings: list[Finding] = []
    tools: list[ToolInfo] = []
    for value in held.values():
        decoded = json.loads(value)
        findings += [Finding.from_json(f) for f in decoded["findings"]]
        if decoded.get("tool"):
            tools.append(ToolInfo.from_json(decoded["tool"]))
    return findings, tools, set(held)
