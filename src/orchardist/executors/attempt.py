"""The pieces of one local attempt: what its agent is given, how its log ends when the agent
was stopped, the records its steps hand on, and where its patch is verified again after
failing on the run's head."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..agents import agent_class
from ..agents.context import AgentContext, AgentResult
from ..confine.attemptpaths import AttemptPaths
from ..confine.procs import CancelToken
from ..confine.scrubbed import scrubbed_env
from ..confine.spec import Spec, writable_of
from ..git.repo import Repo
from ..state.agentrecords import AgentProfile, Failure
from ..state.records import AttemptState
from ..state.usage import Usage
from ..verify.discovery import auto_commands, discover_tests
from . import AttemptJob, Job, Outcome, Stacked, Stacker

MAX_ENV_PROMPT_BYTES = 64 * 1024  # larger prompts are only in the prompt file (exec limits)


@dataclass(frozen=True)
class Attempt:
    """One running attempt, as its steps see it."""

    job: Job
    paths: AttemptPaths
    cwd: Path
    log: Path
    deadline: float
    token: CancelToken
    end: Callable[..., Outcome]  # the attempt's Outcome, with its times and log filled in
    view: AttemptPaths | None = None  # where verify runs, once the agent ended (views.py)

    @property
    def checked(self) -> AttemptPaths:
        """The folders verify and check run in: the view of the patch, where there is one."""
        return self.paths if self.view is None else self.view

    @property
    def hidden(self) -> tuple[Path, ...]:
        """What verify must not see: the agent's own folders, once its work has a view (a
        command naming their absolute path would read what the merge will not hold)."""
        return () if self.view is None else (self.paths.root,)

    @property
    def agent_job(self) -> AttemptJob:
        """The job, for the steps that only an attempt with an agent takes."""
        assert isinstance(self.job, AttemptJob)
        return self.job


@dataclass(frozen=True)
class Work:
    """What the agent did: the patch (the base itself when there was no agent), and so on."""

    patch: str
    changed: int = 0
    usage: Usage = field(default_factory=Usage)
    summary: str = ""
    session: str = ""  # continued <id> / fresh (why): see agents/sessions.py


def agent_context(
    job: AttemptJob,
    paths: AttemptPaths,
    cwd: Path,
    env: dict[str, str],
    log: Path,
    deadline: float,
    token: CancelToken,
    confine: Spec | None,
    resume: str | None = None,
    prompt: str | None = None,
) -> AgentContext:
    """What the job's agent is given: its prompt (in the environment and a file), where to
    leave its output, earlier stages' handoffs, its time left and its confinement; ``prompt``
    and ``resume`` when it continues its earlier session (continuing.py)."""
    assert job.profile is not None
    told = job.prompt if prompt is None else prompt
    # Kept beside the log for the record; the agent reads its own copy in the io folder: the
    # logs are in the user's git directory, out of sight where the tree is shown at the
    # repository's path (see isolation.RepoView).
    log.with_suffix(".prompt.md").write_text(told, encoding="utf-8")
    prompt_file = paths.io / "prompt.md"
    output_file = paths.output_file
    prompt_file.write_text(told, encoding="utf-8")
    output_file.unlink(missing_ok=True)
    agent_env = {
        **env,
        "ORCHARDIST_PROMPT": clip(told, MAX_ENV_PROMPT_BYTES),
        "ORCHARDIST_PROMPT_FILE": str(prompt_file),
        "ORCHARDIST_OUTPUT": str(output_file),
    }
    if job.stage:
        agent_env.update(stage_env(job, paths, log))
    left = max(0.01, deadline - time.monotonic())
    timeout = min(left, job.profile.timeout_s) if job.profile.timeout_s else left
    return AgentContext(
        run_id=job.run_id,
        task_id=job.task_id,
        attempt=job.attempt,
        candidate=job.candidate,
        title=job.title,
        prompt=told,
        worktree=paths.tree,
        cwd=cwd,
        prompt_file=prompt_file,
        output_file=output_file,
        log=log,
        env=agent_env,
        timeout_s=timeout,
        cancel=token,
        marker=job.marker,
        writable=None if confine is None else writable_of(confine),
        confine=confine,
        paths=paths,
        max_cost_usd=job.max_cost_usd,
        resume=resume,
    )


def stage_env(job: AttemptJob, paths: AttemptPaths, log: Path) -> dict[str, str]:
    """A pipeline stage's variables: its name, and the earlier stages' handoffs in a file."""
    log.with_suffix(".inputs.json").write_text(job.inputs or "{}", encoding="utf-8")
    inputs_file = paths.io / "inputs.json"
    inputs_file.write_text(job.inputs or "{}", encoding="utf-8")
    return {"ORCHARDIST_STAGE": job.stage, "ORCHARDIST_INPUTS": str(inputs_file)}


def note_ending(job: AttemptJob, result: AgentResult, log: Path, reason: str | None) -> AgentResult:
    """End the log of a killed agent with a line saying so, why, and after how long.

    A timeout is told in the configured value (``timed out after 5s``), not in what was left
    of the attempt's time when the agent started.
    """
    took = f"{result.duration_s:.1f}s"
    if result.failure is Failure.TIMEOUT:
        profile_s = job.profile.timeout_s if job.profile is not None else None
        limit = min(job.timeout_s, profile_s) if profile_s else job.timeout_s
        result = replace(result, detail=f"agent timed out after {limit:g}s")
        line = f"orchardist: killed the agent after {took}: it timed out (limit {limit:g}s)"
    elif result.cancelled:
        line = f"orchardist: stopped the agent after {took}: {reason or 'cancelled'}"
    else:
        return result
    with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n{line}\n")
    return result


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8."""
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")


def verify_commands(
    repo: Repo, job: Job, worktree: Path, patch: str
) -> tuple[tuple[str, ...], str]:
    """The verify commands; with ``auto_verify``, tests found for the changed files."""
    if not isinstance(job, AttemptJob) or not job.auto_verify:
        return job.verify, ""
    prefix = "" if job.workdir in ("", ".") else job.workdir.rstrip("/") + "/"
    changed = repo.changed_files(job.base_commit, patch)
    tests = [t[len(prefix) :] for t in discover_tests(changed, worktree) if t.startswith(prefix)]
    return auto_commands(tests, job.verify)


def attempt_env(
    job: Job,
    paths: AttemptPaths,
    profile: AgentProfile | None,
    environ: Mapping[str, str] | None,
    private: Mapping[str, str],
) -> dict[str, str]:
    """The variables of an attempt's processes: the caller's, scrubbed (the agent keeps its
    profile's and its kind's keys; verify commands, ``profile=None``, get none; ``environ``
    None: this process's), where the attempt is, and ``private``: those pointing its tools at
    its own folders."""
    allow: tuple[str, ...] = ()
    if profile is not None:
        allow = (*profile.env, *agent_class(profile.kind).env_keys)
    env = scrubbed_env(allow, environ)
    env.update(
        ORCHARDIST_RUN=job.run_id,
        ORCHARDIST_TASK=job.task_id,
        ORCHARDIST_ATTEMPT=str(job.attempt),
        ORCHARDIST_CANDIDATE=str(job.candidate),
        ORCHARDIST_WORKTREE=str(paths.tree),
    )
    return {**env, **private}


def verify_on_head(
    a: Attempt,
    work: Work,
    on: Stacked,
    stacker: Stacker,
    verify: Callable[[Attempt, Work, Stacked | None], Outcome],
    view: Callable[[Attempt, Work, Stacked | None, bool], Attempt | Outcome],
    last: bool = False,
) -> Outcome:
    """Verify the patch merged onto the head (engine/heads.py). A failure there is verified
    again: on the head as it is now if a patch under it failed since (once), else on its own
    base, which judges the attempt as before; passing there, the outcome names the merged tree
    that failed (the queue re-runs the task instead of landing it there). ``verify`` and
    ``view``: the executor's, on a tree (``on``) in a view made again (True)."""
    job = a.job
    assert isinstance(job, AttemptJob)
    with a.log.open("a", encoding="utf-8") as fh:  # judged against the head's outcomes
        fh.write(f"orchardist: verified on {on.commit[:12]}, the patch on {on.head[:12]}\n")
    outcome = verify(a, work, on)
    if outcome.state is AttemptState.PASSED:
        return outcome
    if outcome.state is not AttemptState.FAILED or last:
        stacker.dropped(job.id)
        if outcome.state is not AttemptState.FAILED:
            return outcome
    again = None if last else stacker.failed(job, work.patch)
    with a.log.open("a", encoding="utf-8") as fh:
        where = "its base" if again is None else f"the head as it is now ({again.commit[:12]})"
        fh.write(f"orchardist: failed on {on.commit[:12]}: verified again on {where}\n")
    viewed = view(a, work, again, True)
    if isinstance(viewed, Outcome):
        return viewed
    if again is not None:
        return verify_on_head(viewed, work, again, stacker, verify, view, last=True)
    own = verify(viewed, work, None)
    if own.state is not AttemptState.PASSED:
        return own
    return replace(own, failed_on=on.commit, feedback=outcome.feedback)
