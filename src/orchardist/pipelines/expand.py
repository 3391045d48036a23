"""Pipelines: a task run as stages with handoffs, on the ordinary task graph.

A task with ``pipeline = "debug"`` expands (when the plan is read) into stage tasks chained by
dependencies, so scheduling, worktrees, candidates, the oracle, resume, budgets and the event log
apply to each stage unchanged::

    ID.reproduce ─► ID.audit ─► ID.localize ─► ID (the fix: the one dependents wait for)

``pipeline = "fix"`` puts a single shot first, ``ID.shot``: when it lands, the other stages are
skipped and ``ID`` is done (the commit stays the shot's); when it changed nothing or failed
verification, the task *escalates* to the stages above, with the shot's output as context. A
task that names a failing ``check`` has no reproduce and no audit stage. Only the shot and the
fix land on the run branch: the other stages leave a handoff (and the reproduction's files, as a
commit the fix starts from).

The stages' names, the handoff contract between them and how a stage is judged are in
:mod:`orchardist.pipelines.stages`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..specs import MAX_TASK_ID, TaskSpec
from ..state.agentrecords import AgentProfile, Failure
from ..state.events import EscalationEvent, Kind
from ..state.records import AttemptRecord, AttemptState, TaskState
from .overrides import StageSpec
from .stages import (
    AUDIT,
    ESCALATING,
    FIX,
    JUDGED_STAGES,
    LANDING_STAGES,
    LOCALIZE,
    NO_HANDOFF_KINDS,
    OUTPUT_CHARS,
    REPRODUCE,
    SHOT,
    repro_command,
    stage_prompt,
)

if TYPE_CHECKING:
    from ..executors import AttemptJob
    from ..seams import Store, Transaction


# -- expansion -----------------------------------------------------------------------------


def stage_id(task_id: str, stage: str) -> str:
    """The id of a pipeline task's stage task (the fix stage keeps the task's own id)."""
    return task_id if stage == FIX else f"{task_id}.{stage}"


def expand(
    tasks: Sequence[TaskSpec], agents: Mapping[str, AgentProfile]
) -> tuple[tuple[TaskSpec, ...], list[tuple[str, str, str]]]:
    """Pipeline tasks replaced by their stage tasks; problems as (task, field, message)."""
    out: list[TaskSpec] = []
    problems: list[tuple[str, str, str]] = []
    taken = {t.id for t in tasks}
    for task in tasks:
        if task.pipeline is None or task.stage:
            out.append(task)
            continue
        stages = _stages_of(task, agents)
        problems += _handoff_problems(task, stages, agents)
        for spec in stages[:-1]:
            if spec.id in taken:
                problems.append((task.id, "id", f"its {spec.stage} stage {spec.id!r} is a task id"))
            elif len(spec.id) > MAX_TASK_ID:
                problems.append(
                    (task.id, "id", f"at most {MAX_TASK_ID - 9} characters for a pipeline task")
                )
        out += stages
    return tuple(out), problems


def _handoff_problems(
    task: TaskSpec, stages: Sequence[TaskSpec], agents: Mapping[str, AgentProfile]
) -> list[tuple[str, str, str]]:
    """A stage that must leave a handoff, routed to a kind that cannot write one."""
    problems = []
    for spec in stages:
        if spec.stage not in JUDGED_STAGES:
            continue
        for name in dict.fromkeys((spec.agent, *spec.agents)):
            kind = agents[name].kind if name in agents else ""
            if kind in NO_HANDOFF_KINDS:
                routed = spec.stage in task.stages and task.stages[spec.stage].agents
                problems.append(
                    (
                        task.id,
                        f"stages.{spec.stage}.agent" if routed else "agent",
                        f"profile {name!r} (kind {kind!r}) cannot leave the {spec.stage} stage's "
                        f"handoff: {NO_HANDOFF_KINDS[kind]}; route the stage to another profile "
                        f"with stages.{spec.stage}.agent (it may still do the fix)",
                    )
                )
    return problems


def _stages_of(task: TaskSpec, agents: Mapping[str, AgentProfile]) -> list[TaskSpec]:
    names = [SHOT] if task.pipeline == FIX else []
    if task.check is None:  # a named failing check is the reproduction already
        names.append(REPRODUCE)
        if task.audit:
            names.append(AUDIT)
    names += [LOCALIZE, FIX]
    out: list[TaskSpec] = []
    deps = task.depends_on
    for name in names:
        routing = task.stages.get(FIX if name == SHOT else name, StageSpec(name))
        if name in (FIX, SHOT):
            chosen = routing.agents or task.agents or (task.agent,)
            candidates = routing.candidates or (len(routing.agents) or task.candidates)
        else:
            default = _audit_agent(task, agents) if name == AUDIT else task.agent
            chosen = routing.agents or (default,)
            candidates = routing.candidates or 1
        retries = task.retries if routing.retries is None else routing.retries
        spec = replace(
            task,
            id=stage_id(task.id, name),
            title=task.title if name in (FIX, SHOT) else f"{task.title} ({name})",  # commits
            agent=chosen[0],
            agents=tuple(chosen) if len(chosen) > 1 else (),
            candidates=candidates,
            retries=0 if name == SHOT else retries,
            timeout_s=routing.timeout_s or task.timeout_s,
            depends_on=deps,
            stage=name,
            pipeline_task=task.id,
            stages=task.stages if name == FIX else {},  # the fix stage stands for the task
        )
        if name in JUDGED_STAGES:
            spec = replace(spec, verify=(), auto_verify=False, check=None, allow_empty=True)
        out.append(spec)
        deps = (spec.id,)
    return out


def _audit_agent(task: TaskSpec, agents: Mapping[str, AgentProfile]) -> str:
    """By default the audit is another profile than the reproduction's, when there is one:
    the task's own candidates first, then the plan's profiles in order (none of a kind that
    cannot leave a handoff)."""
    reproducer = (task.stages.get(REPRODUCE) or StageSpec(REPRODUCE)).agents or (task.agent,)
    for name in (*task.agents, *agents):
        if name != reproducer[0] and name in agents and agents[name].kind not in NO_HANDOFF_KINDS:
            return name
    return reproducer[0]


# -- scheduling (scheduler side) -------------------------------------------------------------


class Pipelines:
    """What the scheduler asks about pipeline tasks: how to shape a stage's job from the
    earlier stages' handoffs (read back from the store, so a resumed run sees the same), and
    what a landed shot or an escalation does to the other stages."""

    def __init__(
        self,
        specs: Mapping[str, TaskSpec],
        store: Store,
        run_id: str,
        prepare: Callable[[str, str, str, str], str | None],
    ) -> None:
        self.specs, self.store, self.run_id = specs, store, run_id
        self.prepare = prepare  # (base, patch, message, tip) → a commit on tip, None: conflict
        # One start commit per reproduction and tip: the fix candidates share it, and with it
        # their baseline runs (baselines are cached by commit).
        self._starts: dict[tuple[str, str, str], str | None] = {}

    def lands(self, task_id: str) -> bool:
        """Whether a task's winner goes onto the run branch (stages before the fix do not)."""
        return self.specs[task_id].stage in LANDING_STAGES

    def shape(self, job: AttemptJob, spec: TaskSpec) -> AttemptJob:
        """A stage's job: its prompt, its inputs, and where its worktree starts."""
        if not spec.stage:
            return job
        inputs = self.inputs(spec)
        stage = FIX if spec.stage == SHOT else spec.stage
        kind = job.profile.kind if job.profile is not None else ""
        prompt = stage_prompt(stage, job.prompt, inputs, kind)
        job = replace(job, stage=stage, inputs=json.dumps(inputs), prompt=prompt)
        repro = self._reproduction(spec.pipeline_task)
        if spec.stage in (AUDIT, LOCALIZE) and repro is not None:
            return replace(job, base_commit=repro[1], baseline=repro[1])
        if spec.stage == FIX:
            check = repro_command(inputs) or spec.check
            start = None
            if repro is not None:
                key = (*repro, job.base_commit)
                if key not in self._starts:
                    self._starts[key] = self.prepare(*repro, "reproduction", job.base_commit)
                start = self._starts[key]
            # Verify is judged against the run branch itself (what the reproduction's files
            # might break counts too); the check against the branch plus the reproduction.
            return replace(job, check=check, start_commit=start, check_baseline=start)
        return job

    def inputs(self, spec: TaskSpec) -> dict[str, Any]:
        """The handoffs of the stages before ``spec``, by stage (and a failed shot's context)."""
        owner = spec.pipeline_task
        found: dict[str, Any] = {}
        for stage in (SHOT, REPRODUCE, AUDIT, LOCALIZE):
            if stage == spec.stage:
                break
            if stage == SHOT:
                context = self._escalation(owner) if stage_id(owner, SHOT) in self.specs else {}
                if context:
                    found["shot"] = context
                continue
            winner = self._winner(stage_id(owner, stage))
            if winner is not None and winner.handoff:
                found[stage] = json.loads(winner.handoff)
        return found

    def _winner(self, task_id: str) -> AttemptRecord | None:
        """The attempt that won a stage task's last decided round, if any."""
        if task_id not in self.specs:
            return None
        won = [
            a
            for a in self.store.attempts(self.run_id, task_id)
            if a.state in (AttemptState.MERGED, AttemptState.PASSED) and a.won
        ]
        return won[-1] if won else None

    def _reproduction(self, owner: str) -> tuple[str, str] | None:
        """(base, commit): the reproduction's files as a commit on the base it was written on
        (the audit's, when it ran, is on top of the reproduction's)."""
        first = self._winner(stage_id(owner, REPRODUCE))
        if first is None or not first.patch_commit:
            return None
        audit = self._winner(stage_id(owner, AUDIT))
        last = audit.patch_commit if audit is not None and audit.patch_commit else None
        return first.base_commit, last or first.patch_commit

    def _escalation(self, owner: str) -> dict[str, Any]:
        for event in reversed(self.store.events(self.run_id)):
            if event.kind == Kind.ESCALATION and event.task_id == owner:
                return {k: event.data[k] for k in ("detail", "output") if k in event.data}
        return {}

    def landed(
        self, tx: Transaction, task_id: str, commit: str | None, set_state: Callable[..., None]
    ) -> str:
        """A fix pipeline's shot landed: its other stages are skipped and the task is done.
        The commit stays the shot's own (a regression rewind takes it off and re-runs the shot,
        as for any task). Returns the task whose dependents to release ("" if none)."""
        spec = self.specs[task_id]
        if spec.stage != SHOT:
            return ""
        owner = spec.pipeline_task
        for stage in (REPRODUCE, AUDIT, LOCALIZE):
            if stage_id(owner, stage) in self.specs:
                set_state(tx, stage_id(owner, stage), TaskState.SKIPPED, "the single shot landed")
        landed = f"landed by its single shot ({task_id}, commit {(commit or '')[:12]})"
        set_state(tx, owner, TaskState.DONE, landed)
        return owner

    def escalates(self, task_id: str, failure: Failure | None) -> bool:
        """Whether a task failing for good escalates rather than fails: a fix pipeline's shot
        that changed nothing or failed verification (a crashed agent fails as any task)."""
        return self.specs[task_id].stage == SHOT and failure in ESCALATING

    def escalation(self, task_id: str, detail: str, output: str) -> tuple[str, dict[str, Any]]:
        """The pipeline task a failed shot escalates, and the escalation event's data (the
        shot's output, kept as the later stages' context)."""
        from ..safeio import read_tail
        from ..verify.verifier import FEEDBACK_BYTES

        owner = self.specs[task_id].pipeline_task
        attempts = self.store.attempts(self.run_id, task_id)
        if attempts and attempts[-1].log_path:  # what the agent printed, and verify did
            log = Path(attempts[-1].log_path)
            output = read_tail(log, 0, FEEDBACK_BYTES, last=True).text() or output
        data = {
            "state": EscalationEvent.ESCALATED,
            "to": "debug",
            "shot": task_id,
            "detail": detail,
            "output": output[-OUTPUT_CHARS:],
        }
        return owner, data

    def passed_on(self, tasks: Mapping[str, Any]) -> set[str]:
        """Settled tasks whose dependents still run: escalated shots (for a resume)."""
        return {
            t
            for t, record in tasks.items()
            if t in self.specs and self.specs[t].stage == SHOT and record.state is TaskState.SKIPPED
        }
