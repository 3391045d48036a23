"""What an agent is given and what it reports: the profile a plan names (kind, limits, circuit
breaker), the failure an attempt ends with, and the caps kept on what an agent says about
itself (its usage, with the caps on its figures: usage.py).

Apart from the store's records (records.py) because a plan is read without them: ``validate``
and the plan loader need the profile, the agents the failure, and each dataclass costs about a
millisecond to make (its methods are compiled from source at import).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Failure(enum.StrEnum):
    AGENT_ERROR = "agent_error"  # the agent exited non-zero or crashed
    TIMEOUT = "timeout"  # the attempt ran past its timeout
    VERIFY_FAILED = "verify_failed"  # a verify command failed
    NO_CHANGES = "no_changes"  # the agent changed no file (and the task does not allow that)
    CONFLICT = "conflict"  # the patch does not apply to the moved run branch
    RATE_LIMITED = "rate_limited"  # the agent's backend refused for rate limits
    AUTH_ERROR = "auth_error"  # the agent's backend refused the credentials
    INFRA_ERROR = "infra_error"  # git, disk, or the executor failed


MAX_RETRY_AFTER_S = 8 * 86400  # a rate limit's reset: a weekly quota's is at most 7 days off
SESSION_ID_CHARS = 256
SUMMARY_CHARS = 2000  # an agent's summary of its work (it reaches dependents' prompts)
DETAIL_CHARS = 4000  # an attempt's detail (it can quote the agent's error message)
FEEDBACK_CHARS = 16000  # failing output kept for the next attempt's prompt


def capped(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… [{len(text) - max_chars} characters cut]"


# An agent profile's defaults, each written here once (the plan loader and the policy read them).
BREAKER_THRESHOLD = 3  # consecutive failures that open a profile's circuit breaker
BREAKER_COOLDOWN_S = 60.0  # how long an open breaker keeps attempts away
NUM_CPUS = 1.0  # Ray CPUs an attempt holds on its node


@dataclass(frozen=True)
class AgentProfile:
    """A named agent profile: which kind of agent, and how to run it."""

    name: str
    kind: str
    timeout_s: float | None = None
    max_parallel: int | None = None
    env: tuple[str, ...] = ()
    launch_interval_s: float = 0.0
    fallback: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # kind-specific keys
    breaker_threshold: int = BREAKER_THRESHOLD  # 0: no breaker
    breaker_cooldown_s: float = BREAKER_COOLDOWN_S
    num_cpus: float = NUM_CPUS  # CPUs an attempt holds on its node (executor ray)
    memory_mb: float | None = None  # memory an attempt reserves on its node (executor ray)
