"""The optional JSON result an agent may leave in ``$ORCHARDIST_OUTPUT``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..confine.procs import ProcessRequest, ProcessResult, run_process
from ..safeio import read_capped
from ..state.agentrecords import SESSION_ID_CHARS, SUMMARY_CHARS, Failure, capped
from ..state.usage import Usage
from .context import AgentContext, AgentResult

MAX_OUTPUT_BYTES = 1024 * 1024  # it is a summary and a few numbers


class OutputError(ValueError):
    """The agent left an output file orchardist cannot read: the attempt is the agent's failure
    (``agent_error``, counted against the task's retries), not orchardist's."""


def read_output(path: Path) -> tuple[Usage, str]:
    """Usage and summary from the agent's output file; empty when there is none.

    Recognised keys: ``cost_usd``, ``input_tokens``, ``output_tokens``, ``turns``,
    ``session_id`` and ``summary``; anything else is ignored, and so is a figure that is not
    a number. Numbers are passed on as written: ``usage.checked_usage`` drops those out of
    range (noting it), and the strings are capped there. Raises :class:`OutputError` when
    something is there but is not a JSON object in a regular file of at most
    ``MAX_OUTPUT_BYTES`` (a FIFO, a symlink, a huge file, a nesting bomb, not JSON).
    """
    if not os.path.lexists(path):
        return Usage(), ""
    raw = read_capped(path, MAX_OUTPUT_BYTES)
    where = "the agent's output file ($ORCHARDIST_OUTPUT)"
    if raw is None:
        raise OutputError(f"{where} is not a regular file of at most {MAX_OUTPUT_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise OutputError(f"{where} is not JSON") from None
    if not isinstance(data, dict):
        raise OutputError(f"{where} is not a JSON object")
    session = data.get("session_id")
    return (
        Usage(
            cost_usd=_number(data.get("cost_usd")),
            input_tokens=_number(data.get("input_tokens")),
            output_tokens=_number(data.get("output_tokens")),
            turns=_number(data.get("turns")),
            session_id=_text(session, SESSION_ID_CHARS) if session else None,
        ),
        _text(data.get("summary", ""), SUMMARY_CHARS),
    )


def _number(value: Any) -> Any:
    """A JSON number as it is (a bool is not one); None for anything else."""
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def _text(value: Any, max_chars: int) -> str:
    """A string (other JSON values as their JSON text), capped; never ``str`` of a huge int
    (Python refuses over 4,300 digits)."""
    text = value if isinstance(value, str) else json.dumps(value)[: max_chars + 1]
    return capped(text, max_chars)


def run_agent_process(argv: Sequence[str], ctx: AgentContext) -> AgentResult:
    """Run ``argv`` as the attempt's agent (log, timeout, cancel, marker, sandbox) and map it."""
    proc = run_process(
        ProcessRequest(
            argv=argv,
            cwd=ctx.cwd,
            env=ctx.env,
            log=ctx.log,
            timeout_s=ctx.timeout_s,
            cancel=ctx.cancel,
            marker=ctx.marker,
            writable=ctx.writable,
            confine=ctx.confine,
        )
    )
    return process_result(proc, ctx)


def process_result(proc: ProcessResult, ctx: AgentContext) -> AgentResult:
    """The usual mapping of a finished agent process to an AgentResult."""
    try:
        usage, summary = read_output(ctx.output_file)
    except OutputError as exc:
        usage, summary = Usage(), ""
        if proc.exit_code == 0 and not (proc.timed_out or proc.cancelled):
            return AgentResult(1, proc.duration_s, Failure.AGENT_ERROR, str(exc), usage)
    if proc.timed_out:
        detail = f"agent timed out after {ctx.timeout_s:g}s"
        return AgentResult(proc.exit_code, proc.duration_s, Failure.TIMEOUT, detail, usage)
    if proc.cancelled:
        return AgentResult(proc.exit_code, proc.duration_s, None, "cancelled", usage, True)
    if proc.exit_code != 0:
        detail = f"agent exited with {proc.exit_code}"
        return AgentResult(proc.exit_code, proc.duration_s, Failure.AGENT_ERROR, detail, usage)
    return AgentResult(0, proc.duration_s, None, summary, usage)
