"""Splitting text into words."""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z0-9]+")


def words(text: str) -> list[str]:
    """The words of ``text``: runs of ASCII letters and digits."""
    return _WORD.findall(text)


def word_count(text: str) -> int:
    """How many words ``text`` has."""
    return len(words(text))
