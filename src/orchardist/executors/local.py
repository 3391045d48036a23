"""Run jobs as local processes, one thread and one attempt folder (see worktree.py) per job.

An attempt's steps: make its tree, run its agent, take its work as a patch (refusing what it
must not do: :mod:`.patches`), then verify it (or, for a judged pipeline stage, judge its
handoff). How its processes are confined is :mod:`.confinement`'s, the checkout guard
:mod:`.guard`'s, and the base's outcomes of verify commands :mod:`.baselines`'."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..agents import Agent, agent_class, command_words, make_agent
from ..agents.context import AgentResult
from ..agents.sessions import Sessions
from ..confine import caches, mounts
from ..confine.attemptpaths import AttemptPaths
from ..confine.confinement import Confinement, without
from ..confine.homes import empty_home, fill_home
from ..confine.isolation import Mode, Policy, choose
from ..confine.layout import Layout
from ..confine.paths import workdir_root
from ..confine.procs import CancelToken
from ..confine.spec import Spec, writable_of
from ..errors import OrchardistError
from ..git.repo import Repo
from ..pipelines.stages import JUDGED_STAGES, READ_ONLY_STAGES, StageRun, judge_stage
from ..safeio import read_tail
from ..specs import RunConfig
from ..state.agentrecords import AgentProfile, Failure
from ..state.records import UNFINISHED, AttemptState
from ..state.store import Store
from ..state.usage import Usage
from ..verify import reports
from ..verify.verifier import FEEDBACK_BYTES, CommandVerifier, VerifyRequest
from . import AttemptJob, Job, Notify, Outcome, Phase, Stacked, Stacker
from .attempt import (
    Attempt,
    Work,
    agent_context,
    attempt_env,
    note_ending,
    verify_commands,
    verify_on_head,
)
from .baselines import LocalBaselines as LocalBaselines
from .baselines import keeper, verifying
from .continuing import run_continuing
from .guard import CheckoutGuard
from .patches import NO_CHANGES, NO_CHANGES_FEEDBACK, Contained, git_file, take_patch, unchanged
from .views import fresh_view, needs_view, view_paths


class LocalExecutor:
    """Each job gets its own tree and private git directory at its base commit, outside the
    user's git directory, removed when the job ends."""

    def __init__(
        self,
        repo: Repo,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        store: Store | None = None,
        guard_checkout: bool = True,
        sandbox: bool = True,
        workspace: Path | None = None,
        isolation: Policy | None = None,
        overlays: bool = True,
        environment: tuple[str, ...] = (),
    ) -> None:
        self.repo = repo
        self.layout = Layout(repo, workdir_root(workspace), Path(state_dir))
        self.log_root = Path(state_dir) / "logs"
        self.sessions = Sessions(Path(state_dir) / "sessions")  # the agents' own, per task
        self.clock = clock
        self.environ = environ
        self._lock = threading.Lock()
        self._cancels: dict[str, CancelToken] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._agents: dict[str, Agent] = {}
        self.baselines = None if store is None else LocalBaselines(self, store)
        self.verifier = CommandVerifier(self.baselines)
        self.store = store
        # ``sandbox = False`` is the older spelling of isolation "off".
        self.policy = isolation or (Policy.AUTO if sandbox else Policy.OFF)
        self.mode = choose(self.policy)  # IsolationError when "required" cannot be met
        # An unconfined agent could write the pristine checkout its neighbours' overlays share.
        self.layout.overlays = overlays and self.mode is not Mode.NONE and mounts.enter(environ)
        # Confined agents cannot write to the user's checkout or git directory: whatever
        # changes there is the user's own doing, so the guard has nothing to look for.
        active = guard_checkout and self.mode is Mode.NONE
        self.confinement = Confinement(repo, self.layout, self.mode, environ, environment)
        self.guard = CheckoutGuard(self._fingerprint, active=active, look=guard_checkout)
        self.stacker: Stacker | None = None  # the run's speculative head, set by its loop

    @classmethod
    def for_run(
        cls,
        repo: Repo,
        state_dir: Path,
        store: Store,
        settings: RunConfig,
        clock: Callable[[], float],
        overlays: bool = True,
    ) -> LocalExecutor:
        """The executor ``[run] executor = "local"`` asks for (``overlays``: see worktree.py)."""
        return cls(
            repo,
            state_dir,
            clock=clock,
            store=store,
            guard_checkout=settings.guard_checkout,
            sandbox=settings.sandbox,
            workspace=settings.workspace,
            isolation=settings.isolation,
            overlays=overlays,
            environment=settings.environment,
        )

    def submit(self, job: Job, notify: Notify) -> None:
        """Start the job on its own thread."""
        token = CancelToken()
        thread = threading.Thread(
            target=self._main, args=(job, notify, token), name=f"job-{job.id}", daemon=True
        )
        with self._lock:
            self._cancels[job.id] = token
            self._threads[job.id] = thread
        thread.start()

    def cancel(self, job_id: str, reason: str) -> None:
        """Cancel a running job; unknown or finished jobs are ignored."""
        with self._lock:
            token = self._cancels.get(job_id)
        if token is not None:
            token.cancel(reason)

    def close(self) -> None:
        """Wait for the threads of all submitted jobs."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join()
        self.layout.tidy()

    def log_path(self, run_id: str, job_id: str) -> Path:
        """Where a job's output goes."""
        return self.log_root / run_id / f"{job_id}.log"

    # -- one job -------------------------------------------------------------------------

    def _main(self, job: Job, notify: Notify, token: CancelToken) -> None:
        started = self.clock()
        log = self.log_path(job.run_id, job.id)
        paths = self.layout.attempt(job.run_id, job.id)
        try:
            outcome = self._run(job, notify, token, started, log, paths)
        except Exception as exc:  # the scheduler must hear back whatever happens
            outcome = Outcome(
                job,
                AttemptState.FAILED,
                started,
                self.clock(),
                Failure.INFRA_ERROR,
                f"{type(exc).__name__}: {exc}",
                log_path=str(log),
            )
        finally:
            with self._lock:
                self._cancels.pop(job.id, None)
            token.close()
            self.layout.retire(paths)
        try:
            notify(outcome)
        finally:
            # Off the critical path: the scheduler already has the outcome; close() still
            # waits for this thread, so no folder outlives the executor.
            try:
                self.layout.remove(view_paths(self.layout, job.run_id, job.id))  # if made
                self.layout.remove(paths)
            finally:
                with self._lock:
                    self._threads.pop(job.id, None)

    def _run(
        self,
        job: Job,
        notify: Notify,
        token: CancelToken,
        started: float,
        log: Path,
        paths: AttemptPaths,
    ) -> Outcome:
        deadline = time.monotonic() + job.timeout_s
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")

        def end(state: AttemptState, failure: Failure | None = None, **kw: Any) -> Outcome:
            return Outcome(job, state, started, self.clock(), failure, log_path=str(log), **kw)

        try:
            self.layout.create(paths, job.start, job.run_id)
        except (OrchardistError, OSError) as exc:
            return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=str(exc))
        try:
            cwd = paths.tree / job.workdir
            if not cwd.is_dir():
                detail = f"workdir {job.workdir!r} does not exist at {job.base_commit[:10]}"
                return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=detail)
            attempt = Attempt(job, paths, cwd, log, deadline, token, end)
            work = Work(job.base_commit)
            if isinstance(job, AttemptJob):
                ran = self._run_agent(attempt)
                if isinstance(ran, Outcome):
                    return ran
                work = ran
                attempt = replace(attempt, end=functools.partial(end, session=work.session))
            empty_home(paths)  # verify runs the agent's code: no credentials copied for it
            notify(Phase(job, "verifying"))
            if isinstance(job, AttemptJob) and needs_view(job):
                return self._on_view(attempt, work)
            # no agent ran (the tree is orchardist's own), or nothing runs on the tree
            return self._verify(attempt, work)
        finally:
            self.guard.ended(job.id)

    def _on_view(self, a: Attempt, work: Work) -> Outcome:
        """Verify (or judge) the patch on a fresh view of exactly its tree, made now that the
        agent has ended (see views.py): nothing it left beside the patch is seen. The tree is
        the patch merged onto the run's head where the stacker puts it there (engine/heads.py)."""
        job = a.agent_job
        on = None if self.stacker is None else self.stacker.stack(job, work.patch)
        viewed = fresh_view(self.layout, a, work, on)
        if isinstance(viewed, Outcome):
            return viewed
        if job.stage in JUDGED_STAGES:
            return self._judge(viewed, work)
        if on is None or self.stacker is None:
            return self._verify(viewed, work)
        view = functools.partial(fresh_view, self.layout)
        return verify_on_head(viewed, work, on, self.stacker, self._verify, view)

    def _run_agent(self, a: Attempt) -> Outcome | Work:
        """Run the job's agent, then take what it did as a patch; an Outcome when that ends
        the attempt (cancelled, failed, contained, no changes)."""
        job, paths = a.agent_job, a.paths
        assert job.profile is not None
        # Decided before the agent runs: it could rewrite its .git file to point anywhere.
        agent_spec = self.confine(paths, network=True, words=command_words(job.profile))
        if job.stage in READ_ONLY_STAGES and agent_spec is not None:
            agent_spec = without(agent_spec, paths.tree)
        gitfile = git_file(paths)
        env = self._env(job, paths, job.profile)
        kind = agent_class(job.profile.kind)
        fill_home(paths, self.confinement.real_home(), kind.home_files, kind.home_state)
        cache = caches.prepare(self.layout.state_dir, job.profile, paths.home, kind.home_cache)
        given = (job, paths, a.cwd, env, a.log, a.deadline, a.token, agent_spec)
        self.guard.started(job.id)  # until its own look at the checkout
        context = functools.partial(agent_context, *given)
        result, session = run_continuing(
            self._agent(job.profile), job, self.sessions, paths.home, context
        )
        a = replace(a, end=functools.partial(a.end, session=session))
        if cache is not None and result.failure is None and not result.cancelled:
            caches.keep(paths.home, cache, kind.home_cache)  # the first to end well fills it
        usage = result.usage
        result = note_ending(job, result, a.log, a.token.reason)
        if result.cancelled or a.token.cancelled:
            return a.end(
                AttemptState.CANCELLED,
                detail=a.token.reason or "cancelled",
                usage=usage,
                exit_code=result.exit_code,
            )
        if result.failure is not None:
            return a.end(
                AttemptState.FAILED,
                result.failure,
                detail=result.detail,
                exit_code=result.exit_code,
                usage=usage,
                feedback=read_tail(a.log, 0, FEEDBACK_BYTES, last=True).text(),
                retry_after_s=result.retry_after_s,
            )
        work = self._work(a, gitfile, result, usage)
        return replace(work, session=session) if isinstance(work, Work) else work

    def _work(self, a: Attempt, gitfile: str, result: AgentResult, usage: Usage) -> Outcome | Work:
        """The agent's work as a patch, unless it must not be kept or changed nothing."""
        job, summary = a.agent_job, result.detail
        log = self.log_path(job.run_id, job.id)
        try:
            patch = take_patch(self.repo, self.layout, self.guard, job, a.paths, gitfile, log)
        except Contained as exc:
            return a.end(AttemptState.FAILED, Failure.AGENT_ERROR, usage=usage, detail=str(exc))
        changed = self.repo.changed_lines(job.base_commit, patch)
        if not job.allow_empty and unchanged(self.repo, job, patch):
            # Verify would judge the base itself: "already failing on the base" would
            # merge an empty commit as verified.
            return a.end(
                AttemptState.FAILED,
                Failure.NO_CHANGES,
                detail=NO_CHANGES + (f"; it said: {summary}" if summary else ""),
                exit_code=result.exit_code,
                usage=usage,
                summary=summary,
                feedback=NO_CHANGES_FEEDBACK,
            )
        return Work(patch, changed, usage, summary)

    def _judge(self, a: Attempt, work: Work) -> Outcome:
        """A reproduce, audit or localize stage: its handoff judged, nothing verified."""
        job, paths = a.agent_job, a.checked
        env = {**self._verify_env(job, paths), "ORCHARDIST_PHASE": "verify"}
        spec = self.confine(paths, network=job.network, hidden=a.hidden)
        writable = None if spec is None else writable_of(spec)
        judged = judge_stage(
            job,
            StageRun(
                paths.tree,
                a.cwd,
                a.paths.output_file,  # the agent's handoff
                env,
                a.log,
                a.deadline,
                a.token,
                writable,
                spec,
            ),
            unchanged=unchanged(self.repo, job, work.patch),
        )
        done: dict[str, Any] = {
            "patch_commit": work.patch,
            "changed_lines": work.changed,
            "usage": work.usage,
        }
        if a.token.cancelled:
            return a.end(AttemptState.CANCELLED, detail=a.token.reason or "cancelled", **done)
        if judged.failure:
            return a.end(
                AttemptState.FAILED,
                Failure.VERIFY_FAILED,
                detail=judged.failure,
                feedback=judged.feedback,
                flag=judged.flag,
                verdict="failed",
                **done,
            )
        return a.end(
            AttemptState.PASSED,
            detail=judged.detail,
            exit_code=0,
            summary=work.summary,
            handoff=judged.handoff,
            **done,
        )

    def _verify(self, a: Attempt, work: Work, on: Stacked | None = None) -> Outcome:
        """Run the verify commands (and the check) on the patch (``on``: on the run's head)."""
        job, paths = a.job, a.checked
        commands, note = verify_commands(self.repo, job, paths.tree, work.patch)
        if note:
            with a.log.open("a", encoding="utf-8") as fh:
                fh.write(f"orchardist: {note}\n")
        stacked = None if on is None else on.commit
        with verifying(self.baselines, job, stacked):
            verdict = self.verifier.verify(
                VerifyRequest(
                    commands=commands,
                    check=job.check if isinstance(job, AttemptJob) else None,
                    baseline=job.baseline if on is None else on.head,
                    check_baseline=job.check_baseline if isinstance(job, AttemptJob) else None,
                    workdir=job.workdir,
                    cwd=a.cwd,
                    env={**self._verify_env(job, paths), "ORCHARDIST_PHASE": "verify"},
                    log=a.log,
                    scratch=paths.junit_dir,
                    deadline=a.deadline,
                    timeout_s=job.timeout_s,
                    cancel=a.token,
                    marker=job.marker,
                    confine=self.confine(paths, network=job.network, hidden=a.hidden),
                    network=job.network,
                    keep=keeper(self.baselines, job, stacked),
                )
            )
        common: dict[str, Any] = {
            "patch_commit": work.patch,
            "changed_lines": work.changed,
            "usage": work.usage,
            "summary": work.summary,
            "verify_commands": commands,
            "verified_on": stacked,
        }
        check = job.check if isinstance(job, AttemptJob) else None
        reports.save_reports(paths.junit_dir, commands, check, a.log)  # kept: the folder goes
        if verdict.verdict == "cancelled" or a.token.cancelled:
            return a.end(AttemptState.CANCELLED, detail=a.token.reason or "cancelled", **common)
        if not verdict.passed:
            failure = Failure.TIMEOUT if verdict.timed_out else Failure.VERIFY_FAILED
            return a.end(
                AttemptState.FAILED,
                failure,
                detail=verdict.detail,
                exit_code=verdict.exit_code,
                feedback=verdict.feedback,
                verdict=verdict.verdict,
                flag=verdict.flag,
                **common,
            )
        return a.end(
            AttemptState.PASSED,
            detail=verdict.detail,
            exit_code=0,
            verdict=verdict.verdict,
            **common,
        )

    def _fingerprint(self) -> dict[str, str]:
        ignore = ["refs/heads/orchardist/"]
        watch = []
        if self.store is not None:
            runs = self.store.runs()
            ignore += [f"refs/heads/{r.branch} " for r in runs]
            watch = [f"refs/heads/{r.branch}" for r in runs if r.state in UNFINISHED]
        return self.repo.checkout_fingerprint(ignore, watch)

    def _verify_env(self, job: Job, paths: AttemptPaths) -> dict[str, str]:
        """Verify commands run the agent's code: they get no agent credentials at all."""
        return self._env(job, paths, None)

    def _agent(self, profile: AgentProfile) -> Agent:
        with self._lock:
            if profile.name not in self._agents:
                self._agents[profile.name] = make_agent(profile)
            return self._agents[profile.name]

    def _env(self, job: Job, paths: AttemptPaths, profile: AgentProfile | None) -> dict[str, str]:
        return attempt_env(job, paths, profile, self.environ, self.private_env(paths))

    def private_env(self, paths: AttemptPaths) -> dict[str, str]:
        """The variables that point the attempt's tools at its own folders (see
        :meth:`.Confinement.private_env`)."""
        return self.confinement.private_env(paths)

    def confine(
        self,
        paths: AttemptPaths,
        network: bool,
        hidden: tuple[Path, ...] = (),
        words: tuple[str, ...] = (),
    ) -> Spec | None:
        """How a process of the attempt at ``paths`` is confined (see :mod:`.confinement`);
        ``words``: the agent's command line, whose files are shown wherever they are."""
        return self.confinement.spec(paths, network, hidden, words)
