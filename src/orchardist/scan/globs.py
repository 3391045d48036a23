"""Which files a scanner reads: its include and exclude globs, compiled to one regex each."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def select_files(
    entries: Mapping[str, str], include: Sequence[str], exclude: Sequence[str]
) -> list[str]:
    """Paths matching an ``include`` glob and no ``exclude`` glob, sorted."""
    inc, exc = compile_globs(include), compile_globs(exclude)
    return sorted(p for p in entries if inc.match(p) and not (exclude and exc.match(p)))


def compile_globs(patterns: Sequence[str]) -> re.Pattern[str]:
    """One regex for globs: ``**`` spans folders, ``*`` and ``?`` stay in one; a pattern
    without ``/`` matches a file name at any depth, unless it starts with ``/``."""
    parts = [_glob_regex(p) for p in patterns]
    return re.compile("|".join(f"(?:{p})" for p in parts) or "(?!)")


def _glob_regex(pattern: str) -> str:
    anchored = pattern.startswith("/")
    pattern = pattern.strip("/")
    if not anchored and "/" not in pattern and pattern != "**":
        pattern = "**/" + pattern
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out += re.escape("[")
                i += 1
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
                i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return out + r"\Z"
