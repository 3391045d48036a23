"""The outcome of a three-way merge of trees (:meth:`.repo.Repo.merge_trees`).

Apart from the repository's module, which every command that opens a repository imports: only
a run merges, and the record costs a millisecond to make where a plan is only read (validate).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MergeResult:
    """Outcome of a three-way tree merge: a tree id, or the conflicting paths."""

    tree: str | None
    conflicts: tuple[str, ...] = ()
