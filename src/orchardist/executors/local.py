"""Run jobs as local processes, one thread and one git worktree per job."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..agents import Agent, AgentContext, agent_class, make_agent, scrubbed_env
from ..errors import OrchardistError
from ..gitrepo import Repo
from ..plan import AgentProfile
from ..procs import CancelToken
from ..records import AttemptState, Failure, Usage
from ..verify import run_commands, tail_of
from . import Job, Notify, Outcome, Phase

MAX_ENV_PROMPT_BYTES = 64 * 1024  # larger prompts are only in the prompt file (exec limits)


class LocalExecutor:
    """Each job gets a detached worktree at its base commit, removed when the job ends."""

    def __init__(
        self,
        repo: Repo,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.repo = repo
        self.worktree_root = Path(state_dir) / "worktrees"
        self.log_root = Path(state_dir) / "logs"
        self.clock = clock
        self.environ = environ
        self._lock = threading.Lock()
        self._cancels: dict[str, CancelToken] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._agents: dict[str, Agent] = {}

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

    def log_path(self, run_id: str, job_id: str) -> Path:
        """Where a job's output goes."""
        return self.log_root / run_id / f"{job_id}.log"

    # -- one job -------------------------------------------------------------------------

    def _main(self, job: Job, notify: Notify, token: CancelToken) -> None:
        started = self.clock()
        log = self.log_path(job.run_id, job.id)
        try:
            outcome = self._run(job, notify, token, started, log)
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
                self._threads.pop(job.id, None)
            token.close()
        notify(outcome)

    def _run(
        self, job: Job, notify: Notify, token: CancelToken, started: float, log: Path
    ) -> Outcome:
        deadline = time.monotonic() + job.timeout_s
        worktree = self.worktree_root / job.run_id / job.id
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")

        def end(state: AttemptState, failure: Failure | None = None, **kw: Any) -> Outcome:
            return Outcome(job, state, started, self.clock(), failure, log_path=str(log), **kw)

        try:
            self.repo.add_worktree(worktree, job.base_commit)
        except OrchardistError as exc:
            return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=str(exc))
        try:
            cwd = worktree / job.workdir
            if not cwd.is_dir():
                detail = f"workdir {job.workdir!r} does not exist at {job.base_commit[:10]}"
                return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=detail)
            env = self._env(job, worktree)
            patch, changed, usage, summary = job.base_commit, 0, Usage(), ""
            if job.profile is not None:
                ctx = self._context(job, worktree, cwd, env, log, deadline, token)
                result = self._agent(job.profile).run(ctx)
                usage = result.usage
                if result.cancelled or token.cancelled:
                    return end(
                        AttemptState.CANCELLED,
                        detail=token.reason or "cancelled",
                        usage=usage,
                        exit_code=result.exit_code,
                    )
                if result.failure is not None:
                    return end(
                        AttemptState.FAILED,
                        result.failure,
                        detail=result.detail,
                        exit_code=result.exit_code,
                        usage=usage,
                        feedback=tail_of(log),
                        retry_after_s=result.retry_after_s,
                    )
                if not (worktree / ".git").is_file():
                    return end(
                        AttemptState.FAILED,
                        Failure.AGENT_ERROR,
                        usage=usage,
                        detail="the agent deleted or damaged its worktree",
                    )
                summary = result.detail
                patch = self.repo.snapshot(worktree, job.base_commit, job.message)
                self.repo.set_ref(f"refs/orchardist/runs/{job.run_id}/{job.id}", patch)
                changed = self.repo.changed_lines(job.base_commit, patch)
            notify(Phase(job, "verifying"))
            verdict = run_commands(
                job.verify,
                cwd=cwd,
                env={**env, "ORCHARDIST_PHASE": "verify"},
                log=log,
                deadline=deadline,
                cancel=token,
                marker=job.marker,
            )
            common: dict[str, Any] = {
                "patch_commit": patch,
                "changed_lines": changed,
                "usage": usage,
                "summary": summary,
            }
            if verdict.cancelled or token.cancelled:
                return end(AttemptState.CANCELLED, detail=token.reason or "cancelled", **common)
            if not verdict.passed:
                failure = Failure.TIMEOUT if verdict.timed_out else Failure.VERIFY_FAILED
                bad = verdict.failed
                return end(
                    AttemptState.FAILED,
                    failure,
                    detail=verdict.describe(),
                    exit_code=bad.exit_code if bad else None,
                    feedback=verdict.feedback,
                    **common,
                )
            return end(AttemptState.PASSED, detail=verdict.describe(), exit_code=0, **common)
        finally:
            self.repo.remove_worktree(worktree)

    def _agent(self, profile: AgentProfile) -> Agent:
        with self._lock:
            if profile.name not in self._agents:
                self._agents[profile.name] = make_agent(profile)
            return self._agents[profile.name]

    def _env(self, job: Job, worktree: Path) -> dict[str, str]:
        allow: tuple[str, ...] = ()
        if job.profile is not None:
            allow = (*job.profile.env, *agent_class(job.profile.kind).env_keys)
        env = scrubbed_env(allow, self.environ)
        env.update(
            ORCHARDIST_RUN=job.run_id,
            ORCHARDIST_TASK=job.task_id,
            ORCHARDIST_ATTEMPT=str(job.attempt),
            ORCHARDIST_CANDIDATE=str(job.candidate),
            ORCHARDIST_WORKTREE=str(worktree),
        )
        return env

    def _context(
        self,
        job: Job,
        worktree: Path,
        cwd: Path,
        env: dict[str, str],
        log: Path,
        deadline: float,
        token: CancelToken,
    ) -> AgentContext:
        assert job.profile is not None
        prompt_file = log.with_suffix(".prompt.md")
        output_file = log.with_suffix(".output.json")
        prompt_file.write_text(job.prompt, encoding="utf-8")
        output_file.unlink(missing_ok=True)
        agent_env = {
            **env,
            "ORCHARDIST_PROMPT": _clip(job.prompt, MAX_ENV_PROMPT_BYTES),
            "ORCHARDIST_PROMPT_FILE": str(prompt_file),
            "ORCHARDIST_OUTPUT": str(output_file),
        }
        left = max(0.01, deadline - time.monotonic())
        timeout = min(left, job.profile.timeout_s) if job.profile.timeout_s else left
        return AgentContext(
            run_id=job.run_id,
            task_id=job.task_id,
            attempt=job.attempt,
            candidate=job.candidate,
            title=job.title,
            prompt=job.prompt,
            worktree=worktree,
            cwd=cwd,
            prompt_file=prompt_file,
            output_file=output_file,
            log=log,
            env=agent_env,
            timeout_s=timeout,
            cancel=token,
            marker=job.marker,
        )


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")
