"""The transition tables next to the state enums, and the one function every move passes."""

from __future__ import annotations

import enum
from collections.abc import Mapping

import pytest

from orchardist.errors import OrchardistError, TransitionError
from orchardist.state.records import (
    ATTEMPT_MOVES,
    RUN_MOVES,
    TASK_MOVES,
    AttemptState,
    RunState,
    TaskState,
    moved,
)

TABLES: list[Mapping[enum.StrEnum, frozenset[enum.StrEnum]]] = [
    RUN_MOVES,  # type: ignore[list-item]
    TASK_MOVES,  # type: ignore[list-item]
    ATTEMPT_MOVES,  # type: ignore[list-item]
]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (TaskState.DONE, TaskState.RUNNING),  # a merged task runs only after a new round
        (TaskState.FAILED, TaskState.READY),  # a failed task comes back only by a retry
        (TaskState.PENDING, TaskState.VERIFYING),  # nothing verifies before it ran
        (AttemptState.MERGED, AttemptState.RUNNING),  # an attempt never runs twice
        (AttemptState.INTERRUPTED, AttemptState.PASSED),
        (RunState.DONE, RunState.RUNNING),  # a run that is done is neither resumed nor retried
        (RunState.FAILED, RunState.DONE),  # only a running run ends
    ],
)
def test_a_move_its_table_lacks_raises_a_transition_error_naming_what_moved(
    old: enum.StrEnum, new: enum.StrEnum
) -> None:
    # When an illegal move is asked for, Then it raises an orchardist error naming both states
    with pytest.raises(TransitionError, match=rf"task x: .* {old.value} -> {new.value}") as raised:
        moved(old, new, "task x")
    assert isinstance(raised.value, OrchardistError)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (TaskState.PENDING, TaskState.READY),
        (TaskState.MERGING, TaskState.DONE),
        (TaskState.DONE, TaskState.PENDING),  # a regression rewind: waits for a re-run culprit
        (TaskState.CANCELLED, TaskState.PENDING),  # retried
        (AttemptState.RUNNING, AttemptState.PASSED),
        (AttemptState.PASSED, AttemptState.MERGED),
        (RunState.INTERRUPTED, RunState.RUNNING),  # resumed
    ],
)
def test_a_move_in_its_table_returns_the_new_state(old: enum.StrEnum, new: enum.StrEnum) -> None:
    assert moved(old, new, "it") is new


@pytest.mark.parametrize("state", [*RunState, *TaskState, *AttemptState])
def test_staying_in_a_state_is_no_move(state: enum.StrEnum) -> None:
    # (a stored change of a reason or a counter keeps the state)
    assert moved(state, state, "it") is state


@pytest.mark.parametrize("table", TABLES)
def test_every_state_has_a_row_and_moves_only_to_states_of_its_own_enum(
    table: Mapping[enum.StrEnum, frozenset[enum.StrEnum]],
) -> None:
    kind = type(next(iter(table)))
    assert set(table) == set(kind)
    assert all(new in table and new is not old for old, news in table.items() for new in news)
