"""A pipeline's stages and the handoff contract between them: each stage's duty and prompt,
the handoff it must leave, and how a reproduce, audit or localize attempt is judged (on the
executor's side). :mod:`orchardist.pipelines.expand` expands tasks into stages and schedules them.

The contract, the same for every agent kind: a stage's agent gets ``ORCHARDIST_STAGE`` and the
earlier handoffs both in its prompt (quoted as data, see :mod:`orchardist.quoting`) and as JSON
at ``$ORCHARDIST_INPUTS``; it leaves its own as the ``handoff`` object of the JSON it writes to
``$ORCHARDIST_OUTPUT``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..confine.spec import Spec
from ..quoting import code_span, plain_data, quoted
from ..safeio import read_capped
from ..state.agentrecords import Failure

if TYPE_CHECKING:
    from ..confine.procs import CancelToken
    from ..executors import AttemptJob


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
# A handoff is stored and quoted into later prompts: a longer string is refused (cut, a command
# or a path would mean something else), and keys outside the stage's contract are not kept.
HANDOFF_TEXT_CHARS = 8000  # repro_cmd, failing_test, notes
HANDOFF_ITEM_CHARS = 1000  # one entry of files or symbols
HANDOFF_ITEMS = 200  # entries of files or symbols
HANDOFF_KEYS = {
    "reproduce": ("repro_cmd", "failing_test", "notes"),
    "audit": ("verdict", "repro_cmd", "notes"),
    "localize": ("files", "symbols", "notes"),
}
OUTPUT_CHARS = 4000  # of a command's output, in feedback and in the escalation context
NOT_RUNNABLE = {126: "is not executable", 127: "was not found"}
PYTEST_NOT_RUN = {4: "pytest could not run it (usage error)", 5: "pytest collected no tests"}


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
            "## What the earlier stages handed over (also in the JSON file at $ORCHARDIST_INPUTS)"
        )
        label = "Written by the agents of the earlier stages"
        parts.append(quoted(json.dumps(plain_data(inputs), indent=2), label, info="json"))
    repro = repro_command(inputs)
    if stage == FIX and repro:
        parts.append(
            f"Fix the bug. The reproduction {code_span(repro)} must pass after your change; do "
            "not weaken or delete its test. Keep the change minimal."
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
    return {k: v for k, v in handoff.items() if k in HANDOFF_KEYS.get(stage, handoff)}


def _check_keys(handoff: dict[str, Any], stage: str) -> None:
    def text(key: str, required: bool = False) -> None:
        value = handoff.get(key)
        if value is None and not required:
            return
        if not isinstance(value, str) or not value.strip():
            need = "required, " if required else ""
            raise HandoffError(f"malformed handoff: {key} is {need}a non-empty string")
        if len(value) > HANDOFF_TEXT_CHARS:
            raise HandoffError(f"malformed handoff: {key} is over {HANDOFF_TEXT_CHARS} characters")

    def strings(key: str, required: bool = False) -> None:
        value = handoff.get(key)
        if value is None and not required:
            return
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise HandoffError(f"malformed handoff: {key} must be a non-empty list of strings")
        if len(value) > HANDOFF_ITEMS or any(len(v) > HANDOFF_ITEM_CHARS for v in value):
            raise HandoffError(
                f"malformed handoff: {key} holds at most {HANDOFF_ITEMS} entries of at most"
                f" {HANDOFF_ITEM_CHARS} characters"
            )

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


def judge_stage(job: AttemptJob, run: StageRun, unchanged: bool) -> Judgement:
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
    from ..verify.oracle import looks_like_pytest
    from ..verify.verifier import CommandRequest, run_one

    request = CommandRequest(
        command=command,
        cwd=run.cwd,
        env=run.env,
        log=run.log,
        deadline=run.deadline,
        cancel=run.cancel,
        writable=run.writable,
        confine=run.confine,
    )
    result, _, output = run_one(request)
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
