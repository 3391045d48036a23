"""Run an attempt's agent continuing the task's earlier session where it can (see
:mod:`orchardist.agents.sessions`), and keep its session for the next attempt."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from ..agents import Agent
from ..agents.context import AgentContext, AgentResult
from ..agents.sessions import Saved, SessionKey, Sessions, fresh
from ..state.agentrecords import Failure
from . import AttemptJob

DETAIL_SHOWN = 200  # of the tool's refusal to continue, in the fresh session's note


def run_continuing(
    agent: Agent,
    job: AttemptJob,
    sessions: Sessions,
    home: Path,
    context: Callable[..., AgentContext],
) -> tuple[AgentResult, str]:
    """Run ``agent`` on ``job`` (``context``: :func:`.attempt.agent_context` but for the
    ``prompt`` and the session to ``resume``); its result and the session note, also written
    to the attempt's log. A continued session the tool refuses (it fails before any turn: a
    session it does not find) is run again afresh."""
    assert job.profile is not None
    key = SessionKey(job.run_id, job.task_id, job.candidate, job.profile.name)
    files, kind = agent.session_files, agent.kind
    where = str(context(prompt=job.prompt).seen_cwd)
    start = sessions.begin(key, kind, files, job.prompt, job.followup, home, where)
    ctx = context(resume=start.resume, prompt=start.prompt)
    result, note = agent.run(ctx), start.note
    if start.resume and refused(result):
        saved = sessions.load(key) or Saved(kind, start.resume, 0)
        why = f"{kind} could not continue {start.resume}: {result.detail[:DETAIL_SHOWN]}"
        start = fresh(job.prompt, saved, why)
        note = start.note
        result = agent.run(context(prompt=start.prompt))
    session_id = result.usage.session_id
    if files and session_id and not result.cancelled:
        saved = Saved(kind, session_id, job.attempt, result.detail, where)
        not_kept = sessions.keep(key, saved, files, home)
        if not_kept:
            note = "; ".join(filter(None, [note, f"not kept ({not_kept})"]))
    if note:
        with contextlib.suppress(OSError), ctx.log.open("a", encoding="utf-8") as fh:
            fh.write(f"orchardist: session: {note}\n")
    return result, note


def refused(result: AgentResult) -> bool:
    """Whether the tool failed before any model turn, as one refusing to continue does."""
    return (
        result.failure is Failure.AGENT_ERROR
        and not result.cancelled
        and not result.usage.turns
        and not result.usage.input_tokens
    )
