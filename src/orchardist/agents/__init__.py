"""The Agent seam: turn a task into changes in a worktree.

An agent gets an :class:`~.context.AgentContext` (worktree, prompt, environment, deadline, log)
and returns an :class:`~.context.AgentResult`. It never decides whether the task is done:
verification does. Each kind lives in its own module and is picked by its short name from
:data:`KINDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..confine.exes import shell_words
from ..errors import AgentError
from ..state.agentrecords import AgentProfile

if TYPE_CHECKING:  # what an attempt gets and returns: not for validate, which looks agents up
    from .context import AgentContext, AgentResult

KINDS: dict[str, str] = {
    "shell": "orchardist.agents.shell:ShellAgent",
    "scripted": "orchardist.agents.scripted:ScriptedAgent",
    "claude": "orchardist.agents.claude:ClaudeAgent",
    "codex": "orchardist.agents.codex:CodexAgent",
    "aider": "orchardist.agents.aider:AiderAgent",
    "gemini": "orchardist.agents.gemini:GeminiAgent",
    "opencode": "orchardist.agents.opencode:OpenCodeAgent",
    "llm": "orchardist.agents.llm:LlmAgent",
}


class Agent(Protocol):
    """One kind of agent; constructed once per profile."""

    kind: ClassVar[str]
    profile_keys: ClassVar[frozenset[str]]  # kind-specific keys a profile may set
    # those that widen what the agent receives (credentials, flags, permissions): not read
    # from an untrusted repository's config file (see orchardist.config)
    widening_keys: ClassVar[frozenset[str]]
    env_keys: ClassVar[tuple[str, ...]]  # caller's variables this kind needs (API keys)
    home_files: ClassVar[tuple[str, ...]]  # files it reads from the real home (copied, ~-relative)
    home_state: ClassVar[tuple[str, ...]]  # folders in its private home it writes (~-relative)
    # what it downloads into its home on start, kept per profile across attempts (~-relative;
    # see orchardist.confine.caches)
    home_cache: ClassVar[tuple[str, ...]]
    # its session files in the private home (~-relative), kept for the task's next attempt,
    # which continues the session (``AgentContext.resume``); () when it cannot (sessions.py)
    session_files: ClassVar[tuple[str, ...]]

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Problems with a profile's kind-specific keys, as ``(message, key)``."""
        ...

    def run(self, ctx: AgentContext) -> AgentResult:
        """Work in ``ctx.worktree`` until done, failed, timed out or cancelled."""
        ...


def agent_class(kind: str) -> type[Agent]:
    """The class implementing ``kind``; AgentError naming the known kinds otherwise."""
    try:
        target = KINDS[kind]
    except KeyError:
        raise AgentError(
            f"unknown agent kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}"
        ) from None
    module, _, name = target.partition(":")
    cls: type[Agent] = getattr(importlib.import_module(module), name)
    return cls


def make_agent(profile: AgentProfile) -> Agent:
    """Build the agent for a profile."""
    cls: Any = agent_class(profile.kind)
    agent: Agent = cls(profile)
    return agent


def command_words(profile: AgentProfile) -> tuple[str, ...]:
    """The words of the command line a profile runs, as far as they name files: its command
    and ``args`` (a shell profile's command split as the shell would); () for kinds that run
    no command of the profile's."""
    cls: Any = agent_class(profile.kind)
    command = profile.options.get("command", getattr(cls, "executable", None))
    if not isinstance(command, str) or not command.strip():
        return ()
    if getattr(cls, "shell_command", False):
        return tuple(shell_words(command))
    args = profile.options.get("args", [])
    return (command, *(a for a in args if isinstance(a, str)))
