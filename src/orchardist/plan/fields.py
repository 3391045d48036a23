"""The field checks a plan's validator is built on: each reads one value, records a located
problem (file, task, field) when it is wrong, and returns what can be used meanwhile, so that
validation goes on and reports every problem at once."""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import Problem, unknown_key
from ..placeholders import VERIFY_PLACEHOLDERS, fill, placeholder_problems
from ..specs import MAX_RETRIES, Review, parse_duration

SELECT_RULES = ("smallest", "first")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
NOTIFY_SCHEMES = ("http", "https")
D = TypeVar("D")


class Fields:
    """Problems found so far in one file, and the checks that add to them."""

    def __init__(self, shown: str, path: Path, data: dict[str, Any]) -> None:
        self.shown, self.path, self.data = shown, path, data
        self.problems: list[Problem] = []

    def problem(self, message: str, task: str | None = None, fld: str | None = None) -> None:
        """Record a problem at ``task`` and ``fld`` of this file."""
        self.problems.append(Problem(self.shown, message, task, fld))

    def _table(self, value: object, fld: str, task: str | None = None) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        self.problem("expected a table", task, fld)
        return {}

    def _unknown_keys(
        self, raw: Mapping[str, Any], allowed: set[str], where: str, task: str | None = None
    ) -> None:
        for key in sorted(set(raw) - allowed):
            fld = key if task is not None else f"{where}.{key}"
            self.problem(unknown_key(key, allowed), task, fld)

    def _checked(
        self, value: object, fld: str, task: str | None, check: Callable[[object], Any]
    ) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            self.problem(str(exc), task, fld)
            return None

    def _str(self, value: object, fld: str, task: str | None = None) -> str | None:
        return self._checked(value, fld, task, _expect_str)  # type: ignore[no-any-return]

    def _duration(self, value: object, fld: str, task: str | None = None) -> float | None:
        return self._checked(value, fld, task, parse_duration)  # type: ignore[no-any-return]

    def _positive_int(self, value: object, fld: str, task: str | None = None) -> int | None:
        return self._checked(value, fld, task, _expect_positive_int)  # type: ignore[no-any-return]

    def _money(self, value: object, fld: str, task: str | None = None) -> float | None:
        return self._checked(value, fld, task, _expect_positive_number)  # type: ignore[no-any-return]

    def _workdir(self, value: object, fld: str, task: str | None = None) -> str | None:
        """A relative path that stays inside the repository."""
        text = self._str(value, fld, task)
        if text is None:
            return None
        if os.path.isabs(text):
            self.problem("must be a path relative to the repository, not absolute", task, fld)
            return None
        normal = os.path.normpath(text)
        if normal == ".." or normal.startswith("../"):
            self.problem(f"{text!r} leaves the repository", task, fld)
            return None
        return text

    def _placeholders(self, command: str, task_id: str, fld: str, task: str) -> str:
        """``command`` with ``{task}`` filled, as agent commands are (one rule for both, see
        :mod:`orchardist.placeholders`); as written, with its problems recorded, otherwise."""
        problems = placeholder_problems(command, VERIFY_PLACEHOLDERS, "verify and check")
        for message in problems:
            self.problem(message, task, fld)
        return command if problems else fill(command, {"task": task_id})

    def _select(self, value: object, fld: str, task: str | None = None) -> str | None:
        if value not in SELECT_RULES:
            self.problem(f"expected one of {', '.join(SELECT_RULES)}", task, fld)
            return None
        return str(value)

    def _review(self, value: object, fld: str, task: str | None = None) -> Review | None:
        """Who lets a verified patch merge: "auto" or "human"."""
        if value not in tuple(Review):
            names = " or ".join(f'"{r.value}"' for r in Review)
            self.problem(f"expected {names}, got {value!r}", task, fld)
            return None
        return Review(str(value))

    def _count(self, value: object, fld: str, task: str | None = None) -> int:
        count: int = self._checked(value, fld, task, _expect_count) or 0
        return count

    def _retries(self, value: object, fld: str, task: str | None = None) -> int:
        """A retry count: a whole number from 0 to MAX_RETRIES."""
        count = self._count(value, fld, task)
        if count > MAX_RETRIES:
            self.problem(f"at most {MAX_RETRIES} (each retry is another agent run)", task, fld)
            return MAX_RETRIES
        return count

    def _str_list(self, value: object, fld: str, task: str | None = None) -> list[str]:
        items: list[str] = self._checked(value, fld, task, _expect_str_list) or []
        return items

    def _commands(self, value: object, fld: str, task: str | None = None) -> tuple[str, ...] | None:
        if value == "none":
            return ()
        if isinstance(value, str):
            value = [value]
        commands = self._checked(value, fld, task, _expect_str_list)
        if commands is None:
            return None
        if any(not c.strip() for c in commands):
            self.problem("commands must not be empty", task, fld)
        return tuple(commands)

    def _notify(self, value: object, fld: str) -> str | None:
        """``[run] notify``: a shell command, or an http(s) URL with a host."""
        text = self._str(value, fld)
        if text is None:
            return None
        if not text.strip():
            self.problem("must not be empty: give a command or an http(s) URL", fld=fld)
            return None
        if not is_url(text):
            return text
        parts = urllib.parse.urlsplit(text.strip())
        if parts.scheme.lower() not in NOTIFY_SCHEMES:
            self.problem(
                f"{parts.scheme}:// is not supported: give an http(s) URL or a command", fld=fld
            )
            return None
        if not parts.hostname:
            self.problem("the URL names no host", fld=fld)
            return None
        return text.strip()

    def _flag(self, value: object, default: D, fld: str, task: str | None = None) -> bool | D:
        """A true/false field (``default`` when it is neither)."""
        if isinstance(value, bool):
            return value
        self.problem("expected true or false", task, fld)
        return default


def is_url(target: str) -> bool:
    """Whether a notify target is a URL (``scheme://``) rather than a command."""
    return _SCHEME.match(target.strip()) is not None


def _expect_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _expect_positive_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("expected a whole number ≥ 1")
    return value


def _expect_positive_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError("expected a positive number")
    if not math.isfinite(value):  # TOML and YAML can spell inf and nan
        raise ValueError("expected a finite number")
    return float(value)


def _expect_count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("expected a whole number ≥ 0")
    return value


def _expect_str_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a string or a list of strings")
    return list(value)
