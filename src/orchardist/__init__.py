"""orchardist: run coding agents in parallel git worktrees; keep only what real runs prove.

The public surface is small: load and validate a plan, open a repository's workspace, create
and execute a run, and read its status. Everything else is an implementation detail.

The names are imported on first use (PEP 562): every ``python -m orchardist.X`` process (the
CLI, the scripted agent, the sandbox wrapper, Ray's reaper) imports this package first, and
most of them need a small part of it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported: a cached scan answers in less than it takes
if TYPE_CHECKING:
    from typing import Any

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
    from .plan.loading import load_plan
    from .runs.start import Workspace, create_run, execute
    from .specs import Plan, TaskSpec
    from .state.agentrecords import AgentProfile, Failure
    from .state.records import AttemptState, RunState, TaskState
    from .state.report import status_document

__version__ = "0.1.0"

# each public name to the module it lives in
_HOMES = {
    "AgentError": "errors",
    "GitError": "errors",
    "OrchardistError": "errors",
    "PlanError": "errors",
    "Problem": "errors",
    "RunLockedError": "errors",
    "StoreError": "errors",
    "UsageError": "errors",
    "AgentProfile": "state.agentrecords",
    "Plan": "specs",
    "TaskSpec": "specs",
    "load_plan": "plan.loading",
    "AttemptState": "state.records",
    "Failure": "state.agentrecords",
    "RunState": "state.records",
    "TaskState": "state.records",
    "status_document": "state.report",
    "Workspace": "runs.start",
    "create_run": "runs.start",
    "execute": "runs.start",
}

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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (``dir(orchardist)``)."""
    return __all__
