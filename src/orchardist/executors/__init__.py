"""The Executor seam: where an attempt runs.

The scheduler hands an executor a :data:`Job` (an :class:`AttemptJob`, or a :class:`VerifyJob`
that only verifies) and hears back through a callback: once when the
job enters verification, once with its :class:`Outcome`. Everything that touches the attempt's
files (worktree, agent, snapshot, verify, logs) happens behind this seam, so a distributed
executor only has to produce the same messages and make the patch commit reachable in the repo.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..errors import UsageError
from ..state.agentrecords import (
    DETAIL_CHARS,
    FEEDBACK_CHARS,
    MAX_RETRY_AFTER_S,
    SUMMARY_CHARS,
    AgentProfile,
    Failure,
    capped,
)
from ..state.records import AttemptState
from ..state.usage import Usage, checked_usage

if TYPE_CHECKING:  # plan.py validates [run] executor against EXECUTORS: no import at run time
    from ..git.repo import Repo
    from ..specs import RunConfig
    from ..state.store import Store

EXECUTORS: dict[str, str] = {
    "local": "orchardist.executors.local:LocalExecutor",
    "ray": "orchardist.executors.ray:RayExecutor",  # needs the extra: orchardist[ray]
}


@dataclass(frozen=True)
class AttemptJob:
    """One attempt: the task's agent works in a worktree, then its patch is verified."""

    purpose: ClassVar[str] = "attempt"  # for logs and events, as VerifyJob's
    id: str  # unique within a run
    run_id: str
    task_id: str
    attempt: int
    candidate: int
    base_commit: str  # the patch is taken against this commit
    title: str
    prompt: str  # the whole brief, for an agent that starts a fresh session
    profile: AgentProfile | None  # None only when rebuilt from the store to merge again, for
    # an agent the plan no longer names; an attempt submitted to an executor always has one
    verify: tuple[str, ...]
    workdir: str  # where commands run, relative to the worktree root
    timeout_s: float  # agent and verify together
    message: str  # commit message of the patch snapshot
    marker: str  # tags every process of the job
    baseline: str | None = None  # failing commands are judged against this commit's results
    check: str | None = None  # a reproduction: must fail on ``check_baseline``, pass here
    check_baseline: str | None = None  # None: ``baseline``
    auto_verify: bool = False  # discover tests from the changed files; ``verify`` is the fallback
    max_patch_bytes: int | None = None  # a patch with a larger file fails
    network: bool = False  # verify commands and checks may use the network (agents always may)
    allow_empty: bool = False  # an agent that changes nothing may still pass verification
    stage: str = ""  # a pipeline stage (reproduce, audit, localize, fix); see pipeline.py
    inputs: str = ""  # the earlier stages' handoffs, JSON text for $ORCHARDIST_INPUTS
    max_cost_usd: float | None = None  # what the agent may spend: the task's budget left
    start_commit: str | None = None  # the worktree starts here (None: at base_commit), while
    # the patch is still taken against base_commit (a fix starts from base + the reproduction)
    followup: str = ""  # the message for an agent that continues the task's earlier session
    # (a retry's failure, a reviewer's change request): see agents/sessions.py; "" starts afresh

    @property
    def start(self) -> str:
        """The commit the worktree starts at."""
        return self.start_commit or self.base_commit


@dataclass(frozen=True, kw_only=True)
class VerifyJob:
    """Verify only, no agent: a merged tree before it lands, or a commit of the run branch."""

    purpose: str  # merge | regression (for logs and events)
    id: str  # unique within a run
    run_id: str
    task_id: str  # the task whose patch it verifies; "" for a regression check
    attempt: int  # that task's attempt (0 for a regression check)
    candidate: int
    base_commit: str  # the tree verified
    verify: tuple[str, ...]
    workdir: str  # where commands run, relative to the worktree root
    timeout_s: float
    marker: str  # tags every process of the job
    baseline: str | None = None  # failing commands are judged against this commit's results
    network: bool = False  # verify commands may use the network

    @property
    def start(self) -> str:
        """The commit the worktree starts at."""
        return self.base_commit


Job = AttemptJob | VerifyJob  # what an executor runs


@dataclass(frozen=True)
class Outcome:
    """What a job came to; evidence only, never the agent's opinion."""

    job: Job
    state: AttemptState  # PASSED, FAILED or CANCELLED
    started_at: float
    ended_at: float
    failure: Failure | None = None
    detail: str = ""
    exit_code: int | None = None
    patch_commit: str | None = None  # the agent's changes, committed on top of base_commit
    changed_lines: int | None = None
    usage: Usage = field(default_factory=Usage)
    feedback: str = ""  # failing output, for the next attempt's prompt
    log_path: str = ""
    summary: str = ""  # what the agent said it did (shown to dependents' prompts)
    retry_after_s: float | None = None  # a rate-limited backend's reset, when it said one
    verdict: str = ""  # verified | unverified | failed (set when verification ran)
    flag: str = ""  # something the user should look at, e.g. "check_does_not_reproduce"
    verify_commands: tuple[str, ...] = ()  # the commands verification actually ran
    handoff: str = ""  # a pipeline stage's validated handoff, JSON text
    session: str = ""  # continued <id> / fresh (why): how the agent's session started
    verified_on: str | None = None  # the commit verify ran on when not the patch's own: the
    # patch merged onto the run's speculative head (see :class:`Stacker`); its tree may land
    # as it is, unverified again. "": not known (rebuilt from the store after a restart)
    failed_on: str | None = None  # a merged tree (the patch on the head) whose verify failed
    # while the patch passed on its own base: it never lands there (``feedback``: that failure)

    def bounded(self) -> tuple[Outcome, tuple[str, ...]]:
        """This outcome as it may be kept: usage figures out of range dropped (noted in the
        detail; their names returned), the agent's strings cut to their caps (records.py)."""
        usage, dropped = checked_usage(self.usage)
        detail = capped(self.detail, DETAIL_CHARS)
        notes = [f"usage ignored, out of range: {', '.join(dropped)}"] if dropped else []
        retry = self.retry_after_s
        if retry is not None and not 0 <= retry <= MAX_RETRY_AFTER_S:  # NaN is not either
            notes.append(f"rate-limit reset ignored, out of range: {retry!r}s")
            retry = None  # the profile's back-off instead: a reset of 1e300 s paused it for good
        detail = "; ".join([detail, *notes] if detail else notes)
        return (
            replace(
                self,
                usage=usage,
                retry_after_s=retry,
                detail=detail,
                summary=capped(self.summary, SUMMARY_CHARS),
                feedback=capped(self.feedback, FEEDBACK_CHARS),
            ),
            dropped,
        )


@dataclass(frozen=True)
class Phase:
    """A job moved on (today: into ``verifying``)."""

    job: Job
    phase: str


Notify = Callable[[Phase | Outcome], None]


@dataclass(frozen=True)
class Stacked:
    """Where an attempt's patch is verified instead of on its own base: merged onto the run's
    speculative head (the branch tip and the patches verified or being verified ahead of it)."""

    commit: str  # the patch merged onto ``head``: the tree verify runs on
    head: str  # its failures are judged against this commit's outcomes (the head, or a
    # commit of the same tree whose verification's outcomes were kept)


class Stacker(Protocol):
    """The run's speculative head, asked from an executor's threads once an agent ended."""

    def stack(self, job: AttemptJob, patch: str) -> Stacked | None:
        """``patch`` merged onto the head, which it becomes; None: verify on its own base."""
        ...

    def dropped(self, job_id: str) -> None:
        """The job's stacked patch will not land (its verification failed, or it stopped)."""
        ...

    def failed(self, job: AttemptJob, patch: str) -> Stacked | None:
        """Its verification on the head failed: where to verify it again on the head (a patch
        under it failed since); None: on its own base."""
        ...


class Executor(Protocol):
    """Runs jobs concurrently; ``notify`` may be called from any thread."""

    stacker: Stacker | None  # None: every attempt is verified on its own base

    def submit(self, job: Job, notify: Notify) -> None:
        """Start a job; returns at once."""
        ...

    def cancel(self, job_id: str, reason: str) -> None:
        """Stop a job: its process trees are ended and it reports a CANCELLED outcome."""
        ...

    def close(self) -> None:
        """Wait for every job to report, then release resources."""
        ...


class ExecutorClass(Protocol):
    """What :data:`EXECUTORS` names: a class that builds its executor from a run's settings."""

    def for_run(
        self,
        repo: Repo,
        state_dir: Path,
        store: Store,
        settings: RunConfig,
        clock: Callable[[], float],
    ) -> Executor:
        """The executor for one run of ``repo`` with the plan's ``[run]`` ``settings``."""
        ...


def executor_class(name: str) -> ExecutorClass:
    """The executor class called ``name``; a UsageError naming the known ones otherwise."""
    try:
        module, _, cls = EXECUTORS[name].partition(":")
    except KeyError:
        raise UsageError(
            f"unknown executor {name!r}; known executors: {', '.join(sorted(EXECUTORS))}"
        ) from None
    found: ExecutorClass = getattr(importlib.import_module(module), cls)
    return found
