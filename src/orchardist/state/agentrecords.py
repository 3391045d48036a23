"""What an agent is given and what it reports: the profile a plan names (kind, limits, circuit
breaker), the failure an attempt ends with and the usage it reports, with the caps kept on what
an agent says about itself.

Apart from the store's records (records.py) because a plan is read without them: ``validate``
and the plan loader need the profile, the agents its usage and failure, and each dataclass
costs about a millisecond to make (its methods are compiled from source at import).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True)
class Usage:
    """What an agent reported spending; None where it did not say."""

    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    session_id: str | None = None


# What orchardist keeps of what an agent says about itself (docs/security.md): a figure outside
# its range is dropped, never stored (SQLite's INTEGER is 64-bit: 2**70 tokens would end a run
# for good), and a string is cut to its cap (an agent could send megabytes of session id).
MAX_TOKENS = 10**12  # input or output tokens of one attempt
MAX_TURNS = 10**6
MAX_COST_USD = 10**6
USAGE_LIMITS = {
    "cost_usd": MAX_COST_USD,
    "input_tokens": MAX_TOKENS,
    "output_tokens": MAX_TOKENS,
    "turns": MAX_TURNS,
}
MAX_RETRY_AFTER_S = 8 * 86400  # a rate limit's reset: a weekly quota's is at most 7 days off
SESSION_ID_CHARS = 256
SUMMARY_CHARS = 2000  # an agent's summary of its work (it reaches dependents' prompts)
DETAIL_CHARS = 4000  # an attempt's detail (it can quote the agent's error message)
FEEDBACK_CHARS = 16000  # failing output kept for the next attempt's prompt


def checked_usage(usage: Usage) -> tuple[Usage, tuple[str, ...]]:
    """``usage`` without the figures outside ``USAGE_LIMITS`` (an agent could report NaN or
    -1e9 and switch budgets off, or 1e30 and overflow the store), and the names of those
    dropped; the session id cut to ``SESSION_ID_CHARS``."""
    kept: dict[str, Any] = {}
    dropped = []
    for name, limit in USAGE_LIMITS.items():
        value = getattr(usage, name)
        if value is None:
            continue
        if _within(value, limit):
            kept[name] = float(value) if name == "cost_usd" else int(value)
        else:
            dropped.append(name)
            kept[name] = None
    session = usage.session_id
    kept["session_id"] = None if session is None else capped(str(session), SESSION_ID_CHARS)
    return replace(usage, **kept), tuple(dropped)


def _within(value: Any, limit: int) -> bool:
    """A number from 0 to ``limit``; compared without converting (10**400 has no float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return 0 <= value <= limit


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
