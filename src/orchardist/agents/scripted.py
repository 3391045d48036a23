"""``kind = "scripted"``: a deterministic fake agent for tests, demos and plan rehearsals.

It runs as a real child process (``python -I scripted_step.py STEP``: a file that imports only
what the interpreter loads anyway, so it starts in a third of the time the package would take),
so timeouts, cancellation and process-tree cleanup apply to it exactly as to a real agent CLI.
A profile's ``script`` maps ``"task/candidate"``, ``"task"`` or ``"*"`` to a step or a list of
steps (one per attempt; the last repeats). A step is a table of any of:

``write`` {path = text}, ``append`` {path = text}, ``delete`` [paths], ``print`` text,
``sleep`` seconds, ``hang`` true, ``spawn_daemon`` true (a ``setsid`` child that ignores
SIGTERM and sleeps), ``flood_bytes`` n, ``binary_output`` true, ``output`` {json result},
``findings`` [findings] (a scanner's findings, written to ``$ORCHARDIST_FINDINGS``),
``exit`` code (default 0).
"""

from __future__ import annotations

import base64
import marshal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..state.agentrecords import AgentProfile
from .context import AgentContext, AgentResult
from .output import run_agent_process

PLAYER = Path(__file__).with_name("scripted_step.py")  # runs as a script: see its docstring
STEP_KEYS = {
    "write",
    "append",
    "delete",
    "print",
    "sleep",
    "hang",
    "spawn_daemon",
    "flood_bytes",
    "binary_output",
    "output",
    "findings",
    "exit",
}


class ScriptedAgent:
    """Plays the step scripted for the task, candidate and attempt."""

    kind: ClassVar[str] = "scripted"
    profile_keys: ClassVar[frozenset[str]] = frozenset({"script"})
    widening_keys: ClassVar[frozenset[str]] = frozenset()  # canned steps, given nothing
    env_keys: ClassVar[tuple[str, ...]] = ()
    home_files: ClassVar[tuple[str, ...]] = ()
    home_state: ClassVar[tuple[str, ...]] = ()
    home_cache: ClassVar[tuple[str, ...]] = ()
    session_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, profile: AgentProfile) -> None:
        self.profile = profile
        self.script: Mapping[str, Any] = profile.options.get("script", {})

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``script`` must map names to a step or a list of steps with known keys."""
        script = options.get("script", {})
        if not isinstance(script, dict):
            return [("expected a table of task ids to steps", "script")]
        problems = []
        for name, steps in script.items():
            for step in steps if isinstance(steps, list) else [steps]:
                if not isinstance(step, dict):
                    problems.append((f"{name}: a step must be a table", "script"))
                    continue
                for key in sorted(set(step) - STEP_KEYS):
                    problems.append((f"{name}: unknown step key {key!r}", "script"))
        return problems

    def step_for(self, task_id: str, candidate: int, attempt: int) -> dict[str, Any]:
        """The step for this attempt: the attempt-th of the list, the last one repeating."""
        for key in (f"{task_id}/{candidate}", task_id, "*"):
            if key in self.script:
                steps = self.script[key]
                steps = steps if isinstance(steps, list) else [steps]
                return dict(steps[min(attempt, len(steps)) - 1]) if steps else {}
        return {}

    def run(self, ctx: AgentContext) -> AgentResult:
        """Play the step in a child process."""
        step = self.step_for(ctx.task_id, ctx.candidate, ctx.attempt)
        return run_agent_process(player_argv(step), ctx)


def player_argv(step: Mapping[str, Any]) -> list[str]:
    """The command that plays ``step``: the step as ``marshal`` bytes in base64, which the player
    reads back without importing ``json`` (and ``re`` with it), by the same interpreter."""
    return [sys.executable, "-I", str(PLAYER), base64.b64encode(marshal.dumps(dict(step))).decode()]
