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

The handoff contract, the same for every agent kind: a stage's agent gets ``ORCHARDIST_STAGE``
and the earlier handoffs both in its prompt and as JSON at ``$ORCHARDIST_INPUTS``; it leaves its
own as the ``handoff`` object of the JSON it writes to ``$ORCHARDIST_OUTPUT``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .events import EscalationEvent, Kind
from .isolation import Spec
from .records import AgentProfile, AttemptRecord, AttemptState, Failure, TaskState
from .safeio import read_capped
from .specs import MAX_TASK_ID, StageSpec, TaskSpec

if TYPE_CHECKING:
    from .executors import Job
    from .procs import CancelToken
    from .seams import Store, Transaction


class Stage(enum.StrEnum):
    """A pipeline task's stages, in run order (a ``TaskSpec.stage``; "" for a plain task)."""

    SHOT = "shot"  # a fix pipeline's single try: the bug report straight to the fix agent
    REPRODUCE = "reproduce"  # a reproduction that must fail on the base
    AUDIT = "audit"  # an adversary's review of the reproduction
    LOCALIZE = "localize"  # read-only: which files and symbols to change
    FIX = "fix"  # candidates judged by the oracle; the one that lands (keeps the task's id)


SHOT, REPRODUCE, AUDIT, LOCALIZE, FIX = Stage
JUDGED_STAGES = (REPRODUCE, AUDIT, LOCALIZE)  # their handoff is checked, nothing is verified
READ_ONLY_STAGES = (LOCALIZE,)  # the sandbox keeps the worktree read-only; a patch is an error
LANDING_STAGES = ("", SHOT, FIX)  # "" : an ordinary task
DOES_NOT_REPRODUCE = "does_not_reproduce"
ESCALATING = (Failure.NO_CHANGES, Failure.VERIFY_FAILED)  # a shot failing so escalates
MAX_HANDOFF_BYTES = 256 * 1024
OUTPUT_CHARS = 4000  # of a command's output, in feedback and in the escalation context
NOT_RUNNABLE = {126: "is not executable", 127: "was not found"}
PYTEST_NOT_RUN = {4: "pytest could not run it (usage error)", 5: "pytest collected no tests"}


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
            title=task.title if name == FIX else f"{task.title} ({name})",
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


# -- the handoff contract --------------------------------------------------------------------

DUTIES: dict[str, tuple[str, str, str]] = {
    REPRODUCE: (
        "Write a reproduction of the bug reported above, and do not fix the bug: usually a new "
        "test that fails now because of the bug and will pass once it is fixed, plus the shell "
        "command that runs just that test. orchardist runs the command on the base plus your "
        "files: it must fail there, or this stage fails.",
        '{"handoff": {"repro_cmd": "python -m pytest -q tests/test_bug.py", '
        '"failing_test": "tests/test_bug.py::test_empty_input", "notes": "..."}}',
        "repro_cmd (required), failing_test, notes",
    ),
    AUDIT: (
        "Review the reproduction below as an adversary: does it test the reported behaviour, "
        "or something easier? When it is weak, strengthen or replace its test files and give "
        "the new command. Do not fix the bug. The reproduction must still fail on the base.",
        '{"handoff": {"verdict": "weak", "repro_cmd": "python -m pytest -q tests/test_bug.py", '
        '"notes": "the test did not exercise empty input"}}',
        'verdict ("ok" or "weak", required), repro_cmd (replaces the earlier one), notes',
    ),
    LOCALIZE: (
        "Find where the bug must be fixed. Do not change any file (your worktree is read-only; "
        "a change fails this stage): name the files and symbols to change.",
        '{"handoff": {"files": ["src/pkg/parse.py"], "symbols": ["parse"], "notes": "..."}}',
        "files (required: paths relative to the repository root), symbols, notes",
    ),
}


# Kinds whose agent writes files through a shell it runs itself: the prompt gives the command.
SHELL_KINDS = ("claude", "codex", "gemini", "opencode", "llm", "shell", "scripted")
# Kinds that cannot write $ORCHARDIST_OUTPUT, and why (a plan routing a judged stage to one is
# refused when it is read).
NO_HANDOFF_KINDS = {
    "aider": "aider edits only the repository's files and, unattended (--yes-always), refuses "
    "to run the shell commands its model suggests",
}


def write_command(example: str) -> str:
    """The shell command that leaves ``example`` as the handoff."""
    return f"cat > \"$ORCHARDIST_OUTPUT\" <<'EOF'\n{example}\nEOF"


def stage_prompt(stage: str, report: str, inputs: Mapping[str, Any], kind: str = "") -> str:
    """A stage's prompt: the bug report (with retry feedback), what the stage must do, the
    earlier handoffs, and exactly how to leave its own (for ``kind``, the agent's kind)."""
    parts = [report.rstrip(), f"## Pipeline stage: {stage}"]
    if stage in DUTIES:
        duty, example, keys = DUTIES[stage]
        parts.append(duty)
    if inputs:
        parts.append(
            "## What the earlier stages handed over (also in the JSON file at "
            "$ORCHARDIST_INPUTS)\n\n```json\n" + json.dumps(inputs, indent=2) + "\n```"
        )
    repro = repro_command(inputs)
    if stage == FIX and repro:
        parts.append(
            f"Fix the bug. The reproduction `{repro}` must pass after your change; do not "
            "weaken or delete its test. Keep the change minimal."
        )
    if stage in DUTIES:
        parts.append(
            "## Your handoff\n\nWhen you are done, write a JSON object to the file whose path "
            f"is in the environment variable ORCHARDIST_OUTPUT, for example:\n\n{example}\n\n"
            f"Keys of handoff: {keys}. A missing or malformed handoff fails this stage."
        )
        if kind in SHELL_KINDS:
            parts.append(
                "Write it with one shell command (the variable is set in your shell), your "
                "values in place of the example's:\n\n```bash\n" + write_command(example) + "\n```"
            )
    return "\n\n".join(parts) + "\n"


def repro_command(inputs: Mapping[str, Any]) -> str | None:
    """The reproduction's command: the audit's when it gave one, else the reproduction's."""
    for stage in (AUDIT, REPRODUCE):
        cmd = inputs.get(stage, {}).get("repro_cmd")
        if isinstance(cmd, str) and cmd.strip():
            return cmd
    return None


class HandoffError(ValueError):
    """A stage's handoff is missing or malformed (the message is fed back to its retry)."""


def read_handoff(output_file: Path, stage: str) -> dict[str, Any]:
    """The ``handoff`` object of the agent's output, checked for the stage's keys."""
    raw = read_capped(output_file, MAX_HANDOFF_BYTES)
    where = "the JSON file at $ORCHARDIST_OUTPUT"
    if raw is None:
        raise HandoffError(f"no handoff: the agent wrote nothing to {where}")
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        raise HandoffError(f"malformed handoff: {where} is not JSON ({exc})") from None
    handoff = data.get("handoff") if isinstance(data, dict) else None
    if not isinstance(handoff, dict):
        raise HandoffError(f'no handoff: {where} has no "handoff" object')
    _check_keys(handoff, stage)
    return handoff


def _check_keys(handoff: dict[str, Any], stage: str) -> None:
    def text(key: str, required: bool = False) -> None:
        value = handoff.get(key)
        if value is None and not required:
            return
        if not isinstance(value, str) or not value.strip():
            need = "required, " if required else ""
            raise HandoffError(f"malformed handoff: {key} is {need}a non-empty string")

    def strings(key: str, required: bool = False) -> None:
        value = handoff.get(key)
        if value is None and not required:
            return
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise HandoffError(f"malformed handoff: {key} must be a non-empty list of strings")

    if stage == REPRODUCE:
        text("repro_cmd", required=True)
        text("failing_test")
    elif stage == AUDIT:
        if handoff.get("verdict") not in ("ok", "weak"):
            raise HandoffError('malformed handoff: verdict must be "ok" or "weak"')
        text("repro_cmd")
    elif stage == LOCALIZE:
        strings("files", required=True)
        strings("symbols")
    text("notes")


# -- judging a stage (executor side) ---------------------------------------------------------


@dataclass(frozen=True)
class StageRun:
    """What judging a stage needs from the attempt that ran it."""

    worktree: Path
    cwd: Path
    output_file: Path
    env: Mapping[str, str]
    log: Path
    deadline: float
    cancel: CancelToken
    writable: tuple[Path, ...] | None
    confine: Spec | None = None  # how its commands are isolated (see isolation.py)


@dataclass(frozen=True)
class Judgement:
    """A stage's verdict: its handoff (JSON text) when it passed, else why it failed."""

    handoff: str = ""
    failure: str = ""
    feedback: str = ""
    flag: str = ""
    detail: str = ""


def judge_stage(job: Job, run: StageRun, unchanged: bool) -> Judgement:
    """Check a reproduce, audit or localize attempt: its handoff, then what it claims."""
    try:
        handoff = read_handoff(run.output_file, job.stage)
    except HandoffError as exc:
        return Judgement(failure=str(exc), feedback=_contract_hint(job.stage))
    if job.stage == LOCALIZE:
        return _judge_localize(handoff, run, unchanged)
    inputs = json.loads(job.inputs) if job.inputs else {}
    command = handoff.get("repro_cmd") or repro_command(inputs)
    if not command:  # an audit of a reproduction that had none: cannot happen past reproduce
        return Judgement(failure="malformed handoff: no repro_cmd to check")
    return _judge_reproduction(command, handoff, run)


def _judge_reproduction(command: str, handoff: dict[str, Any], run: StageRun) -> Judgement:
    """The reproduction must fail on the base plus its own files (this worktree)."""
    from .oracle import looks_like_pytest
    from .verify import run_one

    result, _, output = run_one(
        command,
        cwd=run.cwd,
        env=run.env,
        log=run.log,
        deadline=run.deadline,
        cancel=run.cancel,
        writable=run.writable,
        confine=run.confine,
    )
    tail = output[-OUTPUT_CHARS:]
    code = result.exit_code
    why = ""
    if result.timed_out:
        why = f"the reproduction `{command}` timed out"
    elif code == 0:
        why = (
            f"{DOES_NOT_REPRODUCE}: `{command}` passed on the base plus the reproduction's "
            "files; it must fail there, because of the reported bug"
        )
        return Judgement(failure=why, feedback=tail, flag=DOES_NOT_REPRODUCE)
    elif code in NOT_RUNNABLE:
        why = f"the reproduction's command {NOT_RUNNABLE[code]}: `{command}`"
    elif looks_like_pytest(command) and code in PYTEST_NOT_RUN:
        why = f"the reproduction did not run: {PYTEST_NOT_RUN[code]} (`{command}`)"
    if why:
        return Judgement(failure=why, feedback=tail)
    detail = f"reproduces: `{command}` fails on the base (exit {code})"
    return Judgement(handoff=json.dumps(handoff), detail=detail)


def _judge_localize(handoff: dict[str, Any], run: StageRun, unchanged: bool) -> Judgement:
    if not unchanged:
        return Judgement(
            failure="localize changed files: this stage is read-only, it only names them",
            feedback="Change no file; name the files and symbols in the handoff instead.",
        )
    root = run.worktree.resolve()
    missing = []
    for name in handoff["files"]:
        path = (root / name).resolve()
        if Path(name).is_absolute() or not path.is_relative_to(root) or not path.is_file():
            missing.append(name)
    if missing:
        return Judgement(
            failure="malformed handoff: files not in the repository: " + ", ".join(missing),
            feedback="files are paths of existing files, relative to the repository root.",
        )
    return Judgement(handoff=json.dumps(handoff), detail="names " + ", ".join(handoff["files"]))


def _contract_hint(stage: str) -> str:
    _, example, keys = DUTIES[stage]
    return f"Write to the file at $ORCHARDIST_OUTPUT, for example: {example}\nKeys: {keys}."


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

    def shape(self, job: Job, spec: TaskSpec) -> Job:
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
        from .verify import tail_of

        owner = self.specs[task_id].pipeline_task
        attempts = self.store.attempts(self.run_id, task_id)
        if attempts and attempts[-1].log_path:  # what the agent printed, and verify did
            output = tail_of(Path(attempts[-1].log_path)) or output
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
