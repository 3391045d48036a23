"""mypy checks that every implementation fits its seam (:mod:`orchardist.seams`).

Nothing imports this module at run time: mypy reads it (it is under ``src/``). It is apart
from ``seams.py`` because it imports every implementation, and some implementations use the
seams: there, these imports would make each such implementation and the seams import each
other.
"""

from __future__ import annotations

from .agents import Agent
from .agents.aider import AiderAgent
from .agents.claude import ClaudeAgent
from .agents.codex import CodexAgent
from .agents.gemini import GeminiAgent
from .agents.llm import LlmAgent
from .agents.opencode import OpenCodeAgent
from .agents.scripted import ScriptedAgent
from .agents.shell import ShellAgent
from .engine.integrators import GitIntegrator, MemoryIntegrator
from .executors import Executor
from .executors.inline import InlineExecutor
from .executors.local import LocalExecutor
from .executors.ray import RayExecutor
from .seams import Integrator, Store, Verifier
from .state.store import Store as SqliteStore
from .verify.verifier import CommandVerifier


def _implementations(
    agents: tuple[
        AiderAgent,
        ClaudeAgent,
        CodexAgent,
        GeminiAgent,
        LlmAgent,
        OpenCodeAgent,
        ScriptedAgent,
        ShellAgent,
    ],
    executors: tuple[LocalExecutor, InlineExecutor, RayExecutor],
    stores: tuple[SqliteStore],
    verifiers: tuple[CommandVerifier],
    integrators: tuple[GitIntegrator, MemoryIntegrator],
) -> None:
    _agents: tuple[Agent, ...] = agents
    _executors: tuple[Executor, ...] = executors
    _stores: tuple[Store, ...] = stores
    _verifiers: tuple[Verifier, ...] = verifiers
    _integrators: tuple[Integrator, ...] = integrators
