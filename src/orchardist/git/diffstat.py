"""What ``git diff`` prints, read: its raw and numstat records."""

from __future__ import annotations

from collections.abc import Sequence


def raw_and_numstat(out: str) -> tuple[list[tuple[list[str], str]], list[str]]:
    """The records of ``git diff --raw --numstat -z`` (without renames): ``(meta fields, path)``
    of each raw one (``:`` first, its path the next field), then each numstat one."""
    fields = iter(out.split("\0"))
    changes, numstat = [], []
    for field in fields:
        if field.startswith(":"):
            path = next(fields, "")
            if len(field.split()) >= 5:
                changes.append((field.split(), path))
        elif field:
            numstat.append(field)
    return changes, numstat


def numstat_total(records: Sequence[str]) -> int:
    """Lines added plus removed in ``git diff --numstat`` records; a binary file counts 1."""
    total = 0
    for line in records:
        added, removed, _ = line.split("\t", 2)
        total += 1 if added == "-" else int(added) + int(removed)
    return total
