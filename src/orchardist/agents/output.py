"""The optional JSON result an agent may leave in ``$ORCHARDIST_OUTPUT``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..procs import ProcessResult, run_process
from ..records import Failure, Usage
from ..safeio import read_capped
from . import AgentContext, AgentResult

MAX_OUTPUT_BYTES = 1024 * 1024  # a larger file is ignored (it is a summary and a few numbers)


def read_output(path: Path) -> tuple[Usage, str]:
    """Usage and summary from the agent's output file; empty when absent or malformed, or when
    it is not a regular file under ``MAX_OUTPUT_BYTES`` (see safeio).

    Recognised keys: ``cost_usd``, ``input_tokens``, ``output_tokens``, ``turns``,
    ``session_id`` and ``summary``. Anything else is ignored.
    """
    raw = read_capped(path, MAX_OUTPUT_BYTES)
    try:
        data = json.loads(raw.decode("utf-8", errors="replace")) if raw is not None else None
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return Usage(), ""
    if not isinstance(data, dict):
        return Usage(), ""
    return (
        Usage(
            cost_usd=_number(data.get("cost_usd"), float),
            input_tokens=_number(data.get("input_tokens"), int),
            output_tokens=_number(data.get("output_tokens"), int),
            turns=_number(data.get("turns"), int),
            session_id=str(data["session_id"]) if data.get("session_id") else None,
        ),
        str(data.get("summary", ""))[:2000],
    )


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None  # NaN and infinities too (json reads them), and int() would raise on them
    return kind(value)


def run_agent_process(argv: Sequence[str], ctx: AgentContext) -> AgentResult:
    """Run ``argv`` as the attempt's agent (log, timeout, cancel, marker, sandbox) and map it."""
    proc = run_process(
        argv,
        cwd=ctx.cwd,
        env=ctx.env,
        log=ctx.log,
        timeout_s=ctx.timeout_s,
        cancel=ctx.cancel,
        marker=ctx.marker,
        writable=ctx.writable,
        confine=ctx.confine,
    )
    return process_result(proc, ctx)


def process_result(proc: ProcessResult, ctx: AgentContext) -> AgentResult:
    """The usual mapping of a finished agent process to an AgentResult."""
    usage, summary = read_output(ctx.output_file)
    if proc.timed_out:
        detail = f"agent timed out after {ctx.timeout_s:g}s"
        return AgentResult(proc.exit_code, proc.duration_s, Failure.TIMEOUT, detail, usage)
    if proc.cancelled:
        return AgentResult(proc.exit_code, proc.duration_s, None, "cancelled", usage, True)
    if proc.exit_code != 0:
        detail = f"agent exited with {proc.exit_code}"
        return AgentResult(proc.exit_code, proc.duration_s, Failure.AGENT_ERROR, detail, usage)
    return AgentResult(0, proc.duration_s, None, summary, usage)
