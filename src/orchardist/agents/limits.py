"""Recognise rate-limit and credential failures in what an agent backend said, and when to retry.

Only error text is fed here (a tool's structured error events, its stderr, an HTTP error body),
never the model's own words: a task about rate limiting must not look rate limited.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..state.agentrecords import Failure

_AUTH = re.compile(
    r"\b401\b|unauthori[sz]ed|invalid[ _-]?(?:x-)?api[ _-]?key|incorrect api key|api key not valid"
    r"|authentication[ _]?error|failed to authenticate|not (?:logged|signed) in|run /login"
    r"|invalid (?:bearer|oauth|access) token|(?:oauth )?token (?:has )?expired"
    r"|(?:missing|no) api[ _-]?key|api[ _-]?key (?:is )?(?:missing|required|not set)"
    r"|must specify the \w+ environment variable|credit balance is too low",
    re.IGNORECASE,
)
_RATE = re.compile(
    r"\b429\b|rate[ _-]?limit|usage limit|too many requests|quota exceeded|exceeded your current"
    r" quota|resource[ _]?exhausted|exhausted your capacity|you['\u2019]ve hit your (?:\w+ )?limit"
    r"|\b(?:5-hour|five.hour|weekly|daily|session) limit",
    re.IGNORECASE,
)

_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART = r"(\d+(?:\.\d+)?)\s*(days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s|ms)(?![a-z])"
_DURATION = re.compile(rf"(?:{_PART}[\s,]*(?:and\s+)?)+", re.IGNORECASE)
_PARTS = re.compile(_PART, re.IGNORECASE)
_IN = re.compile(
    r"(?:try again|retry|resets?|available again|wait)\s+(?:in|after)\s+",
    re.IGNORECASE,
)
_HEADER = re.compile(r"retry[-_]after\W{0,4}(\d+(?:\.\d+)?)(?![\d.]|\s*[a-z])", re.IGNORECASE)
_DELAY = re.compile(r"retry_?delay\W{0,4}(\d+(?:\.\d+)?)s", re.IGNORECASE)
_EPOCH = re.compile(r"(?:limit reached\||resets_?at\W{0,4})(\d{10,13})\b", re.IGNORECASE)
_CLOCK = re.compile(
    r"(?:try again at|resets?(?: at)?|available again at)\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm)?"
    r"(?:\s*\(([\w/+-]+)\)|\s+(UTC|GMT)\b)?",
    re.IGNORECASE,
)
_DATE = re.compile(
    r"(?:try again|resets?|available again)\s+(?:(?:at|on)\s+)?([A-Z][a-z]{2})[a-z]*\.?\s+(\d{1,2})"
    r"(?:st|nd|rd|th)?,?(?:\s+(\d{4}))?(?:,?\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm)?)?",
    re.IGNORECASE,
)
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]


def classify(text: str, status: int | None = None) -> Failure | None:
    """RATE_LIMITED or AUTH_ERROR when an HTTP status or an error message says so, else None."""
    if status == 429:
        return Failure.RATE_LIMITED
    if status in (401, 403):
        return Failure.AUTH_ERROR
    if _AUTH.search(text):
        return Failure.AUTH_ERROR
    if _RATE.search(text):
        return Failure.RATE_LIMITED
    return None


def retry_after_s(text: str, now: datetime | None = None) -> float | None:
    """Seconds until the backend said to come back, from the forms tools print; None if none.

    Understands ``Retry-After: 30``, ``"retryDelay": "35s"``, ``try again in 3 days 6 hours``,
    ``reset after 2h3m15s``, ``limit reached|1750000000`` (epoch), ``try again at 3:28 PM``,
    ``resets 3pm (Europe/Berlin)``, ``resets at 15:00 UTC`` and ``try again at Aug 8th, 2026
    12:30 PM``. Times without a zone are local; a clock time already past means tomorrow.
    """
    now = now or datetime.now(UTC)
    if match := _HEADER.search(text):
        return float(match.group(1))
    if match := _DELAY.search(text):
        return float(match.group(1))
    for found in _IN.finditer(text):
        if span := _DURATION.match(text, found.end()):
            return _duration_s(span.group(0))
    if match := _EPOCH.search(text):
        return _until(epoch_datetime(float(match.group(1))), now)
    if match := _DATE.search(text):
        when = _date(match, now)
        if when is not None:
            return _until(when, now)
    for match in _CLOCK.finditer(text):
        when = _clock(match, now)
        if when is not None:
            return _until(when, now)
    return None


def epoch_datetime(value: float) -> datetime:
    """A UTC datetime from epoch seconds or milliseconds."""
    return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, UTC)


def _until(when: datetime, now: datetime) -> float:
    return max(0.0, (when - now).total_seconds())


def _duration_s(text: str) -> float:
    total = 0.0
    for number, unit in _PARTS.findall(text):
        unit = unit.lower()
        key = "ms" if unit == "ms" else "m" if unit.startswith("mi") or unit == "m" else unit[0]
        total += float(number) * _UNIT_S[key]
    return total


def _zone(name: str | None, now: datetime) -> tzinfo:
    if name is None:
        return now.astimezone().tzinfo or UTC
    if name.upper() in ("UTC", "GMT"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return now.astimezone().tzinfo or UTC


def _hour(hour: int, ampm: str | None) -> int:
    if ampm is None:
        return hour
    return hour % 12 + (12 if ampm.lower() == "pm" else 0)


def _clock(match: re.Match[str], now: datetime) -> datetime | None:
    hour, minute, ampm, zone_name, utc = match.groups()
    if ampm is None and minute is None:
        return None  # a bare number ("resets 3") is not a time
    hour_24 = _hour(int(hour), ampm)
    if hour_24 > 23 or int(minute or 0) > 59:
        return None
    zone = _zone(zone_name or utc, now)
    local_now = now.astimezone(zone)
    when = local_now.replace(hour=hour_24, minute=int(minute or 0), second=0, microsecond=0)
    return when + timedelta(days=1) if when <= local_now else when


def _date(match: re.Match[str], now: datetime) -> datetime | None:
    month_name, day, year, hour, minute, ampm = match.groups()
    if month_name.lower() not in _MONTHS:
        return None
    zone = _zone(None, now)
    local_now = now.astimezone(zone)
    try:
        when = datetime(
            int(year) if year else local_now.year,
            _MONTHS.index(month_name.lower()) + 1,
            int(day),
            _hour(int(hour), ampm) if hour else 0,
            int(minute or 0),
            tzinfo=zone,
        )
    except ValueError:
        return None
    if year is None and when < local_now - timedelta(days=1):
        when = when.replace(year=when.year + 1)
    return when
