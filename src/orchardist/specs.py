"""What a validated plan is: the frozen records :mod:`orchardist.plan.loading` builds from a plan
file.

They live apart from the validator so that the modules a plan drives (executors, pipelines,
agents) can use them without importing the code that reads plan files.
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import Ignored
from .confine.isolation import Policy
from .state.agentrecords import AgentProfile

if TYPE_CHECKING:  # made only for a plan that has them: a task's stages, the scanners
    from .pipelines.overrides import StageSpec
    from .scan.profiles import ScannerProfile

MAX_TASK_ID = 64  # task ids name refs and folders: keep them short
MAX_RETRIES = 100  # each retry is another agent run: more is a typo (1e18 was accepted)
MAX_DURATION_S = 366 * 86400.0  # a year: longer is a typo, and overflows the scheduler's waits
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DEFAULT_TASK_TIMEOUT_S = 3600.0
DEFAULT_BRANCH = "orchardist/{run}"


class Review(enum.StrEnum):
    """Who lets a task's verified patch onto the run branch (``review`` in a plan)."""

    AUTO = "auto"  # the merge train, as soon as it won
    HUMAN = "human"  # a person, with ``orchardist review`` (docs/review.md)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a plan, as written (defaults applied)."""

    id: str
    title: str
    prompt: str
    agent: str
    index: int
    depends_on: tuple[str, ...] = ()
    verify: tuple[str, ...] = ()  # empty: opted out with verify = "none"
    retries: int = 0
    timeout_s: float = DEFAULT_TASK_TIMEOUT_S
    priority: int = 0
    estimate: float = 1.0
    workdir: str = "."
    candidates: int = 1
    agents: tuple[str, ...] = ()  # one profile per candidate when ``agent`` is a list
    select: str = "smallest"  # "smallest": best of all passing; "first": first to pass
    check: str | None = None  # a reproduction: must fail on the base, pass on the candidate
    auto_verify: bool = False  # verify = "auto": tests discovered from the changed files
    max_cost_usd: float | None = None
    allow_empty: bool = False  # an attempt that changes nothing may pass (else: no_changes)
    network: bool = False  # its verify commands and check may use the network
    pipeline: str | None = None  # "debug" or "fix": run as stages (see pipeline.py)
    stages: Mapping[str, StageSpec] = field(default_factory=dict)  # stages.NAME overrides
    audit: bool = True  # stages.audit = false: the debug pipeline skips its audit stage
    stage: str = ""  # set on the tasks a pipeline task expands into (see pipeline.expand)
    pipeline_task: str = ""  # the pipeline task a stage task belongs to
    review: Review = Review.AUTO  # human: its winner waits for a person before it merges

    def agent_for(self, candidate: int) -> str:
        """The profile that runs candidate ``candidate``."""
        return self.agents[candidate % len(self.agents)] if self.agents else self.agent


class Reverify(enum.StrEnum):
    """When a winner's patch, merged onto a tip that moved, is verified again (``[run]
    reverify``)."""

    ALWAYS = "always"  # every merged tree that is not the verified one
    OVERLAP = "overlap"  # only when the patch and what landed since its base share a file


@dataclass(frozen=True)
class RunConfig:
    """The ``[run]`` table."""

    base: str = "HEAD"
    branch: str = DEFAULT_BRANCH
    max_parallel: int = field(default_factory=lambda: os.cpu_count() or 2)
    verify: tuple[str, ...] = ()
    workdir: str = "."
    deadline_s: float | None = None  # wall time from the run's creation
    max_cost_usd: float | None = None
    retry_backoff_s: float = 1.0  # first retry delay; doubles per failure, with jitter
    candidates: int = 1
    select: str = "smallest"
    regression: tuple[str, ...] = ()  # run on the run branch after merges
    regression_every: int = 1
    reverify: Reverify = Reverify.ALWAYS  # "overlap": disjoint patches land unverified
    max_patch_mb: float = 50.0  # a patch with a larger file fails
    guard_checkout: bool = True  # fail an attempt during which the user's checkout changed
    sandbox: bool = True  # false: the same as isolation = "off"
    isolation: Policy = Policy.AUTO  # namespaces, Landlock or nothing (see isolation.py)
    network: bool = False  # verify commands, checks and baselines may use the network
    workspace: Path | None = None  # root of the attempt folders (None: see worktree.workdir_root)
    environment: tuple[str, ...] = ()  # untracked folders of the checkout shown read-only
    executor: str = "local"  # where attempts run: a name in executors.EXECUTORS
    ray_address: str = "auto"  # the Ray cluster of executor "ray" (run --ray-address)
    notify: str | None = None  # a command or an http(s) URL told when the run ends
    notify_timeout_s: float = 30.0  # then the notify command's process group is killed
    review: Review = Review.AUTO  # every task's default


@dataclass(frozen=True)
class Plan:
    """A validated plan: tasks in file order, profiles by name, and where it came from."""

    path: Path
    repo: Path
    run: RunConfig
    agents: Mapping[str, AgentProfile]
    tasks: tuple[TaskSpec, ...]
    digest: str  # sha256 of the file's bytes, recorded with the run (resume compares task ids)
    scanners: Mapping[str, ScannerProfile] = field(default_factory=dict)  # [scanners.NAME]
    config_agents: frozenset[str] = frozenset()  # profiles from the config files, not the plan
    ignored: tuple[Ignored, ...] = ()  # what the repository's config file set and was not read

    def used_agents(self) -> set[str]:
        """The profiles its tasks and scanners run, and their fallbacks."""
        used = {name for t in self.tasks for name in (t.agent, *t.agents)}
        used |= {s.agent for s in self.scanners.values() if s.agent is not None}
        while True:
            fallbacks = (self.agents[n].fallback for n in used if n in self.agents)
            more = {n for n in fallbacks if n is not None} - used
            if not more:
                return used
            used |= more

    def task(self, task_id: str) -> TaskSpec:
        """Return the task called ``task_id``."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h30m"``; raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:  # TOML and YAML can spell inf and nan
            raise ValueError("a duration must be positive and finite")
        if value > MAX_DURATION_S:
            raise ValueError("a duration must be at most 366d")
        return float(value)
    if not isinstance(value, str):
        raise ValueError("expected a duration such as 90, '90s', '5m' or '1h'")
    text = value.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return parse_duration(float(text))
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"bad duration {value!r}: use e.g. 90, '90s', '5m', '1h' or '1h30m'")
    total = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if total <= 0:
        raise ValueError("a duration must be positive")
    if not total <= MAX_DURATION_S:
        raise ValueError(f"bad duration {value!r}: at most 366d")
    return total
