"""What an agent gets for one attempt and what it returns: made only where attempts run (the
executors, the planner, ``doctor``), not where a plan is read and its agents looked up
(``validate``), which has no attempt to describe; each record costs a millisecond to make."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..confine.attemptpaths import AttemptPaths
from ..confine.spec import Spec
from ..state.agentrecords import Failure
from ..state.usage import Usage

if TYPE_CHECKING:  # the process machinery
    from ..confine.procs import CancelToken


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent needs for one attempt."""

    run_id: str
    task_id: str
    attempt: int
    candidate: int
    title: str
    prompt: str
    worktree: Path  # the attempt's worktree root
    cwd: Path  # where commands run: the worktree, or the plan's workdir inside it
    prompt_file: Path
    output_file: Path  # the agent may write a JSON result here
    log: Path
    env: Mapping[str, str]  # already scrubbed, with ORCHARDIST_* variables
    timeout_s: float | None
    cancel: CancelToken
    marker: str  # shared by every process of the attempt
    writable: tuple[Path, ...] | None = None  # where its processes may write (None: anywhere)
    confine: Spec | None = None  # how its processes are isolated (None: by ``writable`` alone)
    paths: AttemptPaths | None = None  # the attempt's folders (None: a bare worktree, in tests)
    max_cost_usd: float | None = None  # what the attempt may spend (the task's budget left)
    resume: str | None = None  # the session id to continue, ``prompt`` its next message
    # (see sessions.py); None: a fresh session, ``prompt`` the whole brief

    @property
    def seen_cwd(self) -> Path:
        """Where the agent sees the folder it works in: the repository's own path when its
        tree is shown there (isolation's view), else the attempt's folder."""
        view = self.confine.view if self.confine is not None else None
        return view.inside(self.cwd) if view is not None else self.cwd

    @property
    def home(self) -> Path:
        """The attempt's private HOME, where the tool's session files are kept from
        (sessions.py); for a bare context (tests), the output file's folder."""
        return self.paths.home if self.paths is not None else self.output_file.parent


@dataclass(frozen=True)
class AgentResult:
    """How the agent ended, and what it said it spent."""

    exit_code: int
    duration_s: float
    failure: Failure | None = None  # None: the agent finished normally
    detail: str = ""
    usage: Usage = field(default_factory=Usage)
    cancelled: bool = False
    retry_after_s: float | None = None  # with RATE_LIMITED: when the backend said to come back
