"""``kind = "shell"``: run a command line in the worktree; its exit code is its answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..placeholders import AGENT_PLACEHOLDERS, fill, placeholder_problems
from ..state.agentrecords import AgentProfile

if TYPE_CHECKING:  # an attempt's records: validate, which only checks the command, makes none
    from .context import AgentContext, AgentResult


def render(template: str, ctx: AgentContext) -> str:
    """Fill a command template (checked with the plan); every value is shell-quoted."""
    values = {
        "task": ctx.task_id,
        "candidate": str(ctx.candidate),
        "attempt": str(ctx.attempt),
        "prompt_file": str(ctx.prompt_file),
        "worktree": str(ctx.worktree),
        "run": ctx.run_id,
    }
    return fill(template, values)


class ShellAgent:
    """A plain command, run with ``/bin/sh -c`` in the worktree."""

    kind: ClassVar[str] = "shell"
    profile_keys: ClassVar[frozenset[str]] = frozenset({"command"})
    shell_command: ClassVar[bool] = True  # ``command`` is a shell command line, not a program
    # its command is the agent itself, confined like any: it is given nothing beyond env
    widening_keys: ClassVar[frozenset[str]] = frozenset()
    env_keys: ClassVar[tuple[str, ...]] = ()
    home_files: ClassVar[tuple[str, ...]] = ()
    home_state: ClassVar[tuple[str, ...]] = ()
    home_cache: ClassVar[tuple[str, ...]] = ()
    session_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, profile: AgentProfile) -> None:
        self.profile = profile
        self.command = str(profile.options["command"])

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``command`` is required and may use only known placeholders."""
        command = options.get("command")
        if not isinstance(command, str) or not command.strip():
            return [("required: the command line to run", "command")]
        problems = placeholder_problems(command, AGENT_PLACEHOLDERS, "agent")
        return [(message, "command") for message in problems]

    def run(self, ctx: AgentContext) -> AgentResult:
        """Run the command; non-zero exit is an agent error."""
        from .output import run_agent_process  # (and the process machinery): not for validate

        return run_agent_process(["/bin/sh", "-c", render(self.command, ctx)], ctx)
