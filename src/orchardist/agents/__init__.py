"""The Agent seam: turn a task into changes in a worktree.

An agent gets an :class:`AgentContext` (worktree, prompt, environment, deadline, log) and returns
an :class:`AgentResult`. It never decides whether the task is done: verification does. Each kind
lives in its own module and is picked by its short name from :data:`KINDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..confine.exes import shell_words
from ..confine.isolation import Spec
from ..confine.paths import AttemptPaths
from ..errors import AgentError
from ..state.agentrecords import AgentProfile, Failure, Usage

if TYPE_CHECKING:  # the process machinery: not for validate, which only looks agents up
    from ..confine.procs import CancelToken

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


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent needs for one attempt."""

    run_id: str
    task_id: str
    attempt: int
    candidate: int
    title: str
    prompt: str
    worktree: Path  # the attempt's worktree root
    cwd: Path  # where commands run: the worktree, or the plan's workdir inside it
    prompt_file: Path
    output_file: Path  # the agent may write a JSON result here
    log: Path
    env: Mapping[str, str]  # already scrubbed, with ORCHARDIST_* variables
    timeout_s: float | None
    cancel: CancelToken
    marker: str  # shared by every process of the attempt
    writable: tuple[Path, ...] | None = None  # where its processes may write (None: anywhere)
    confine: Spec | None = None  # how its processes are isolated (None: by ``writable`` alone)
    paths: AttemptPaths | None = None  # the attempt's folders (None: a bare worktree, in tests)
    max_cost_usd: float | None = None  # what the attempt may spend (the task's budget left)
    resume: str | None = None  # the session id to continue, ``prompt`` its next message
    # (see sessions.py); None: a fresh session, ``prompt`` the whole brief

    @property
    def seen_cwd(self) -> Path:
        """Where the agent sees the folder it works in: the repository's own path when its
        tree is shown there (isolation's view), else the attempt's folder."""
        view = self.confine.view if self.confine is not None else None
        return view.inside(self.cwd) if view is not None else self.cwd

    @property
    def home(self) -> Path:
        """The attempt's private HOME, where the tool's session files are kept from
        (sessions.py); for a bare context (tests), the output file's folder."""
        return self.paths.home if self.paths is not None else self.output_file.parent


@dataclass(frozen=True)
class AgentResult:
    """How the agent ended, and what it said it spent."""

    exit_code: int
    duration_s: float
    failure: Failure | None = None  # None: the agent finished normally
    detail: str = ""
    usage: Usage = field(default_factory=Usage)
    cancelled: bool = False
    retry_after_s: float | None = None  # with RATE_LIMITED: when the backend said to come back


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
