"""What an agent reported spending on an attempt, and the caps kept on it: a record of its own
(not beside the profile in agentrecords.py) because reading a plan never makes one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .agentrecords import SESSION_ID_CHARS, capped


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
