"""What a pipeline task's ``stages.NAME`` table overrides for one stage.

Apart from :mod:`orchardist.specs` because most plans have no pipeline: the plan loader makes
this record (a millisecond to make) only when a task has a ``stages`` table to read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageSpec:
    """``stages.NAME`` of a pipeline task: what overrides the task's own routing for a stage."""

    name: str  # one of STAGE_NAMES
    agents: tuple[str, ...] = ()  # one profile per candidate; empty: the task's agent(s)
    timeout_s: float | None = None  # None: the task's timeout
    retries: int | None = None  # None: the task's retries
    candidates: int | None = None  # None: 1 (the fix stage: the task's candidates)
