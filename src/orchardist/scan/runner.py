"""One scanner process: its command over a batch of files, in a scrubbed environment with its
own HOME, TMPDIR and caches; its output parsed into findings (or a clear ScanJobError)."""

from __future__ import annotations

import contextlib
import gc
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..confine.procs import CancelToken, ProcessRequest, ProcessResult, run_process
from ..confine.scrubbed import scrubbed_env
from ..state.agentrecords import AgentProfile
from .profiles import Format, ScannerProfile

if TYPE_CHECKING:  # what reads a scanner's output is imported once it ran (its process is
    # started before them; the scan imports them while it runs: engine.Scanner._meanwhile)
    from .findings import Finding, ToolInfo

MAX_OUTPUT_BYTES = 64 << 20


def run_scanner(
    profile: ScannerProfile,
    files: Sequence[str],
    cwd: Path,
    folder: Path,
    env: Mapping[str, str],
    cancel: CancelToken,
    writable: tuple[Path, ...] | None,
    agent: AgentProfile | None = None,
    *,
    started: Callable[[], None] | None = None,
    sourced: bool = False,
    ended: Callable[[], object] | None = None,
) -> tuple[list[Finding], ToolInfo | None]:
    """Run one scanner process in ``cwd`` over ``files``; its findings (paths relative to
    ``cwd``; with the source of their lines, read from ``cwd``, if ``sourced``) and tool.
    ``folder`` is its private, writable folder. ``started`` is called once the process runs;
    ``ended`` once the process (and all it started) has ended, before its output is read:
    what checks the tree it ran in (:func:`.trees.changed_files`) runs beside the parse."""
    for sub in ("home", "tmp", "cache"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    if profile.format is Format.AGENT:
        from .trees import with_sources

        assert agent is not None
        found, tool = _agent_scanner(
            profile, agent, files, cwd, folder, env, cancel, writable, ended
        )
        return (with_sources(found, cwd) if sourced else found), tool
    output = folder / "output"
    command = profile.command.replace("{files}", " ".join(shlex.quote(f) for f in files))
    command = command.replace("{output}", shlex.quote(str(output)))
    stdout, stderr = folder / "stdout", folder / "stderr"
    argv = ["/bin/sh", "-c", f"exec 2>>{shlex.quote(str(stderr))}\n{command}"]
    proc = run_process(
        ProcessRequest(
            argv=argv,
            cwd=cwd,
            env=env,
            log=stdout,
            timeout_s=profile.timeout_s,
            cancel=cancel,
            max_log_bytes=MAX_OUTPUT_BYTES,
            writable=writable,
            on_start=started,
        )
    )
    if ended is not None:
        ended()
    from .findings import ScanJobError, ScanOutputError

    written = output if "{output}" in profile.command else stdout
    data, tail = _output(profile, proc, written, stderr)
    try:
        return _parsed(profile, data, cwd, sourced)
    except ScanOutputError as exc:
        raise ScanJobError(
            f"{profile.name}: exit {proc.exit_code}, unreadable output ({exc})"
            + (f": {tail}" if tail else "")
        ) from None


def scanner_env(
    profile: ScannerProfile,
    folder: Path,
    environ: Mapping[str, str],
    agent: AgentProfile | None = None,
) -> dict[str, str]:
    """A scanner's environment: scrubbed, with its own HOME, TMPDIR and caches in ``folder``."""
    allow: tuple[str, ...] = profile.env
    if agent is not None:  # (the agents' package imported only for a scanner that is one)
        from ..agents import agent_class

        allow = (*allow, *agent.env, *agent_class(agent.kind).env_keys)
    env = scrubbed_env(allow, environ)
    env.update(
        HOME=str(folder / "home"),
        TMPDIR=str(folder / "tmp"),
        XDG_CACHE_HOME=str(folder / "cache"),
        PYTHONDONTWRITEBYTECODE="1",
        ORCHARDIST_PHASE="scan",
        ORCHARDIST_SCANNER=profile.name,
    )
    return env


def _output(
    profile: ScannerProfile, proc: ProcessResult, output: Path, stderr: Path
) -> tuple[bytes, str]:
    """What an ended scanner process wrote to ``output``, and the tail of its ``stderr``; a
    ScanJobError if it was cancelled, timed out, wrote too much, or failed writing nothing."""
    from .findings import ScanJobError

    if proc.cancelled:
        raise ScanJobError(f"{profile.name}: cancelled")
    if proc.timed_out:
        raise ScanJobError(f"{profile.name}: timed out after {profile.timeout_s:g}s")
    if proc.truncated:
        raise ScanJobError(f"{profile.name}: output larger than {MAX_OUTPUT_BYTES} bytes")
    data = output.read_bytes()
    tail = _tail(stderr)
    if not data.strip() and proc.exit_code != 0:
        raise ScanJobError(
            f"{profile.name}: exit {proc.exit_code} and no output" + (f": {tail}" if tail else "")
        )
    return data, tail


def _agent_scanner(
    profile: ScannerProfile,
    agent: AgentProfile,
    files: Sequence[str],
    cwd: Path,
    folder: Path,
    env: Mapping[str, str],
    cancel: CancelToken,
    writable: tuple[Path, ...] | None,
    ended: Callable[[], object] | None,
) -> tuple[list[Finding], ToolInfo | None]:
    """An agent scanner's run (imported only for one); ``ended`` called when it ended."""
    from .agent_scan import run_agent_scanner

    try:
        return run_agent_scanner(profile, agent, files, cwd, folder, env, cancel, writable)
    finally:
        if ended is not None:
            ended()


def _parsed(
    profile: ScannerProfile, data: bytes, cwd: Path, sourced: bool
) -> tuple[list[Finding], ToolInfo | None]:
    """The findings and tool in a scanner's output (ScanOutputError if it is unreadable)."""
    from .findings import SourceLines, parse_findings_json, parse_sarif

    source = SourceLines(cwd) if sourced else None
    with _collector_paused():
        if profile.format is Format.SARIF:
            return parse_sarif(data, cwd, source)
        return parse_findings_json(data, profile.fields, source), None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic collector off while an output is read: the decoded JSON (tens of thousands
    of objects for a linter's SARIF) and the findings hold no cycle, and its passes over them
    freed nothing. Back on after, if it was on (another job's parse that found it off leaves
    it to the first)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _tail(path: Path, limit: int = 400) -> str:
    """The end of a scanner's stderr, whitespace collapsed, starting at a whole word."""
    from ..safeio import read_tail

    tail = read_tail(path, 0, limit, last=True)
    words = tail.text().split()
    if tail.start > 0 and words:
        words[0] = "…"  # cut inside a word: "rror:" reads as a different message
    return " ".join(words)
