"""Agent scanners: an agent profile asked to review a scratch copy of the base.

The agent runs like a task's agent (same kinds, process control and sandbox), in the scan's
export of the base, with ``$ORCHARDIST_FINDINGS`` naming the file where it must write its
findings as findings JSON (see :mod:`orchardist.scan.findings`). The prompt is the profile's,
followed by where to write and the schema; ``{files}`` in it becomes the files in scope.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..agents import make_agent
from ..agents.context import AgentContext
from ..confine.procs import CancelToken, new_marker
from ..state.agentrecords import AgentProfile
from .findings import Finding, ScanJobError, ScanOutputError, ToolInfo, parse_findings_json
from .profiles import ScannerProfile

MAX_FINDINGS_BYTES = 16 << 20

FINDINGS_INSTRUCTIONS = """

Do not change any file. Write what you find as JSON to the file named by the environment
variable ORCHARDIST_FINDINGS:
{"findings": [{"rule": "...", "message": "...", "path": "relative/path.py",
  "start_line": 1, "end_line": 1, "severity": "error|warning|note", "snippet": "..."}]}
When a finding is one a linter also reports, use the linter's rule id (for example "F401").
Write {"findings": []} when you find nothing.
"""


def run_agent_scanner(
    profile: ScannerProfile,
    agent_profile: AgentProfile,
    files: Sequence[str],
    tree: Path,
    folder: Path,
    env: Mapping[str, str],
    cancel: CancelToken,
    writable: tuple[Path, ...] | None,
) -> tuple[list[Finding], ToolInfo | None]:
    """Run the agent over ``tree``; the findings it wrote."""
    findings_file = folder / "findings.json"
    prompt = profile.prompt.replace("{files}", " ".join(files)) + FINDINGS_INSTRUCTIONS
    prompt_file = folder / "prompt.md"
    prompt_file.write_text(prompt, encoding="utf-8")
    output_file = folder / "output.json"
    ctx = AgentContext(
        run_id="scan",
        task_id=profile.name,
        attempt=1,
        candidate=0,
        title=f"review ({profile.name})",
        prompt=prompt,
        worktree=tree,
        cwd=tree,
        prompt_file=prompt_file,
        output_file=output_file,
        log=folder / "agent.log",
        env={
            **env,
            "ORCHARDIST_FINDINGS": str(findings_file),
            "ORCHARDIST_PROMPT": prompt[:100_000],
            "ORCHARDIST_PROMPT_FILE": str(prompt_file),
            "ORCHARDIST_OUTPUT": str(output_file),
        },
        timeout_s=agent_profile.timeout_s or profile.timeout_s,
        cancel=cancel,
        marker=new_marker(),
        writable=writable,
    )
    result = make_agent(agent_profile).run(ctx)
    if result.cancelled:
        raise ScanJobError(f"{profile.name}: cancelled")
    if result.failure is not None:
        raise ScanJobError(f"{profile.name}: {result.detail or result.failure.value}")
    try:
        data = read_small_file(findings_file, MAX_FINDINGS_BYTES)
    except OSError as exc:
        raise ScanJobError(f"{profile.name}: no findings file ({exc.strerror or exc})") from None
    try:
        return parse_findings_json(data), ToolInfo(f"{profile.name} ({agent_profile.kind})")
    except ScanOutputError as exc:
        raise ScanJobError(f"{profile.name}: unreadable findings ({exc})") from None


def read_small_file(path: Path, limit: int) -> bytes:
    """A regular file's bytes, refusing symlinks, FIFOs and files over ``limit``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file")
        if info.st_size > limit:
            raise OSError(0, f"larger than {limit} bytes")
        return os.read(fd, limit + 1)[:limit]
    finally:
        os.close(fd)
