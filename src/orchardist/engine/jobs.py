"""What an attempt is given: its job (prompt, commit message, limits), and what it is told of
the tasks it depends on and of its own earlier failure.

What other agents wrote (a dependency's summary, a failing command's output, which the attempt's
own code may print) is quoted as data (see :mod:`orchardist.quoting`): it cannot add a header or
an instruction of orchardist's to the prompt.

:class:`Briefs` keeps what each task's next attempt is told; it also rebuilds a passed attempt's
outcome from the store, to merge it again after a restart or a rewind.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..confine.procs import new_marker
from ..executors import AttemptJob, Job, Outcome
from ..git.repo import commit_message
from ..quoting import inline, quoted
from ..specs import Plan, TaskSpec
from ..state.records import ATTEMPT_START, AttemptRecord, AttemptState

FEEDBACK_CHARS = 4000  # the tail of a failure's output an attempt is shown


class Briefs:
    """Jobs for one run's attempts, and what each task's next attempt is told."""

    def __init__(self, plan: Plan, run_id: str) -> None:
        self.plan, self.run_id = plan, run_id
        self.specs = {t.id: t for t in plan.tasks}
        self.feedback: dict[str, tuple[str, str]] = {}  # task -> why its last attempt failed,
        # and the tail of its output
        self.summaries: dict[str, str] = {}  # task -> what its winner said it did

    def failed(self, task_id: str, detail: str, output: str) -> None:
        """What the task's next attempt is told about the last one's failure."""
        self.feedback[task_id] = (detail, output[-FEEDBACK_CHARS:])

    def attempt(
        self, spec: TaskSpec, n: int, candidate: int, agent: str, tip: str, budget: float | None
    ) -> AttemptJob:
        """Attempt ``n`` of a task, by ``agent``, from ``tip``; it may spend ``budget`` USD."""
        return AttemptJob(
            id=f"{spec.id}.{n}",
            run_id=self.run_id,
            task_id=spec.id,
            attempt=n,
            candidate=candidate,
            base_commit=tip,
            title=spec.title,
            prompt=self.prompt(spec),
            profile=self.plan.agents[agent],
            verify=spec.verify,
            workdir=spec.workdir,
            timeout_s=spec.timeout_s,
            message=self.message(spec, n, agent),
            marker=new_marker(),
            baseline=tip,
            check=spec.check,
            auto_verify=spec.auto_verify,
            max_patch_bytes=int(self.plan.run.max_patch_mb * 1024 * 1024),
            network=spec.network,
            allow_empty=spec.allow_empty,
            max_cost_usd=budget,
            followup=self.followup(spec),
        )

    def prompt(self, spec: TaskSpec) -> str:
        """The task's prompt, what its dependencies did, and its last failure."""
        parts = [spec.prompt]
        said = {d: self.summaries.get(d, "") for d in spec.depends_on}
        done = [(d, text) for d, text in said.items() if inline(text)]  # not only escapes
        if done:
            parts.append("## What the tasks this one depends on did")
            parts += [
                quoted(summary, f"Written by the agent of task {dep}") for dep, summary in done
            ]
        parts += self.failure(spec)
        return "\n\n".join(parts) + "\n"

    def followup(self, spec: TaskSpec) -> str:
        """What an agent continuing its own earlier session is told: only the last failure
        (it has the brief already); "" when there was none, and nothing to continue."""
        failure = self.failure(spec)
        if not failure:
            return ""
        ask = (
            "Your changes did not pass, and the working tree is back where the task started:"
            " your earlier edits are not in it. Read the files again, do the task, then stop."
        )
        return "\n\n".join([*failure, ask]) + "\n"

    def failure(self, spec: TaskSpec) -> list[str]:
        """The prompt's section on the task's last failure, if it failed."""
        if spec.id not in self.feedback:
            return []
        detail, output = self.feedback[spec.id]
        parts = [f"## An earlier attempt failed\n\nWhy: {inline(detail)}"]
        if output:
            label = "The end of its output (its commands', and what its code printed)"
            parts.append(quoted(output, label))
        return parts

    def message(self, spec: TaskSpec, n: int, agent: str) -> str:
        """The commit message of the attempt's patch, with orchardist's trailers."""
        trailers: dict[str, str | int] = {
            "Task": spec.id,
            "Attempt": n,
            "Agent": agent,
            "Run": self.run_id,
        }
        return commit_message(spec.title, trailers)

    def merged(self, attempts: Sequence[AttemptRecord]) -> Outcome:
        """The merged attempt among a done task's ``attempts``, rebuilt."""
        merged = [a for a in attempts if a.state is AttemptState.MERGED and a.patch_commit]
        return self.rebuilt(merged[-1])

    def rebuilt(self, attempt: AttemptRecord) -> Outcome:
        """A passed attempt's outcome rebuilt from the store, to merge it again."""
        spec = self.specs[attempt.task_id]
        job = AttemptJob(
            id=f"{spec.id}.{attempt.n}",
            run_id=self.run_id,
            task_id=spec.id,
            attempt=attempt.n,
            candidate=attempt.candidate,
            base_commit=attempt.base_commit,
            title=spec.title,
            prompt=spec.prompt,
            profile=self.plan.agents.get(attempt.agent),
            verify=spec.verify,
            workdir=spec.workdir,
            timeout_s=spec.timeout_s,
            message=self.message(spec, attempt.n, attempt.agent),
            marker=new_marker(),
            network=spec.network,
        )
        return Outcome(
            job,
            AttemptState.PASSED,
            attempt.started_at,
            attempt.ended_at or attempt.started_at,
            patch_commit=attempt.patch_commit,
            changed_lines=attempt.changed_lines,
            verified_on="",  # on its base or on a head: the store does not say
        )


def started(job: Job, agent: str, now: float, log_path: str) -> AttemptRecord:
    """The store's record of an attempt as it starts."""
    return AttemptRecord(
        run_id=job.run_id,
        task_id=job.task_id,
        n=job.attempt,
        candidate=job.candidate,
        agent=agent,
        state=ATTEMPT_START,
        base_commit=job.base_commit,
        started_at=now,
        marker=job.marker,
        log_path=log_path,
    )


def log_path(executor: object, job: Job) -> str:
    """Where the executor will write the job's output, if it says in advance (so that a running
    attempt's log can be followed)."""
    where = getattr(executor, "log_path", None)
    return str(where(job.run_id, job.id)) if callable(where) else ""
