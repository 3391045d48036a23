"""orchardist: run coding agents in parallel git worktrees; keep only what real runs prove.

The public surface is small: load and validate a plan, open a repository's workspace, create
and execute a run, and read its status. Everything else is an implementation detail.
"""

from __future__ import annotations

from .errors import (
    AgentError,
    GitError,
    OrchardistError,
    PlanError,
    Problem,
    RunLockedError,
    StoreError,
    UsageError,
)
from .plan import AgentProfile, Plan, TaskSpec, load_plan
from .records import AttemptState, Failure, RunState, TaskState
from .report import status_document
from .runs import Workspace, create_run, execute

__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AgentProfile",
    "AttemptState",
    "Failure",
    "GitError",
    "OrchardistError",
    "Plan",
    "PlanError",
    "Problem",
    "RunLockedError",
    "RunState",
    "StoreError",
    "TaskSpec",
    "TaskState",
    "UsageError",
    "Workspace",
    "__version__",
    "create_run",
    "execute",
    "load_plan",
    "status_document",
]
