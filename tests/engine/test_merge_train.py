"""The merge train alone, on the in-memory integrator: what happens to each winner on its way to
the run branch, as a typed step."""

from __future__ import annotations

from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.merge import (
    BranchMoved,
    Merged,
    MergeTrain,
    MoveFailed,
    NeedsVerify,
    Requeued,
    VerifyFailed,
)
from orchardist.executors import AttemptJob, Outcome, VerifyJob
from orchardist.state.records import AttemptState

BASE = "b" * 40


class Train:
    """A train on a MemoryIntegrator, recording what it reports through its callbacks."""

    def __init__(self) -> None:
        self.integrator = MemoryIntegrator(BASE)
        self.intended: list[tuple[str, str]] = []
        self.deleted: list[tuple[bool, str]] = []
        self.train = MergeTrain(
            self.integrator,
            "orchardist/r",
            lambda commit, job: self.intended.append((commit, job.task_id)),
            lambda restored, tip: self.deleted.append((restored, tip)),
        )
        self.train.tip = BASE


def won(task_id: str, base: str = BASE, verify: tuple[str, ...] = ("check",)) -> Outcome:
    job = AttemptJob(f"{task_id}.1", "r", task_id, 1, 0, base, task_id, "", None, verify, ".", 60.0,
              f"{task_id}: the message", "m")  # fmt: skip
    return Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=base)


def lands(task_id: str) -> bool:
    return True


def test_a_winner_on_an_unmoved_tip_lands_at_once_and_is_parked_for_a_later_replay() -> None:
    # Given: a train whose tip is the winner's base
    t = Train()
    t.train.enqueue(won("a"))
    # When: it moves
    step = t.train.next(lands)
    # Then: merged, the branch is at the new commit, which was recorded first
    assert isinstance(step, Merged) and step.commit == t.integrator.tip() == t.train.tip
    assert t.intended == [(step.commit, "a")]
    assert set(t.train.parked) == {"a"}
    assert t.train.next(lands) is None and not t.train.busy


def test_a_winner_on_a_moved_tip_is_verified_before_it_lands() -> None:
    t = Train()
    t.train.enqueue(won("a"))
    t.train.enqueue(won("b"))  # also made on BASE
    first = t.train.next(lands)
    assert isinstance(first, Merged)
    # When: b's turn comes: the tip moved since its base
    second = t.train.next(lands)
    # Then: it needs verifying on the new tip, and nothing else moves meanwhile
    assert isinstance(second, NeedsVerify) and second.tip == first.commit
    assert isinstance(second.job, VerifyJob) and second.job.purpose == "merge"
    assert second.job.baseline == first.commit and second.job.task_id == "b"
    assert t.train.busy and t.train.next(lands) is None
    assert t.integrator.tip() == first.commit
    # When: the verification passes; Then: it lands on top
    t.train.verified(Outcome(second.job, AttemptState.PASSED, 1.0, 2.0))
    landed = t.train.next(lands)
    assert isinstance(landed, Merged) and t.integrator.parent(t.train.tip) == first.commit


def test_a_merged_tree_that_fails_verification_does_not_land() -> None:
    t = Train()
    t.train.tip = "c" * 40  # the tip moved since BASE
    t.integrator.reset(t.train.tip, BASE)
    t.train.enqueue(won("a"))
    step = t.train.next(lands)
    assert isinstance(step, NeedsVerify)
    failed = Outcome(step.job, AttemptState.FAILED, 1.0, 2.0, detail="tests fail")
    t.train.verified(failed)
    result = t.train.next(lands)
    assert isinstance(result, VerifyFailed) and result.result is failed
    assert t.integrator.tip() == "c" * 40 and not t.train.parked


def test_a_task_that_lands_nothing_is_merged_without_a_commit() -> None:
    t = Train()
    t.train.enqueue(won("scan"))
    step = t.train.next(lambda task_id: False)
    assert isinstance(step, Merged) and step.commit is None
    assert t.integrator.tip() == BASE and not t.intended


def test_a_branch_moved_by_someone_else_is_put_back_and_the_winner_merged_again() -> None:
    # Given: someone moved the branch after the train last put it
    t = Train()
    t.integrator.reset("f" * 40, BASE)
    t.train.enqueue(won("a"))
    # When: the winner's turn comes
    step = t.train.next(lands)
    # Then: the branch is back where orchardist left it, and the winner waits again
    assert isinstance(step, BranchMoved) and step.found == "f" * 40 and step.restored
    assert t.integrator.tip() == BASE
    assert isinstance(t.train.next(lands), Merged)


def test_a_branch_deleted_under_the_run_is_made_again_and_the_winner_retried() -> None:
    t = Train()
    t.integrator.delete()
    t.train.enqueue(won("a"))
    assert isinstance(t.train.next(lands), Requeued)
    assert t.deleted == [(True, BASE)] and t.integrator.tip() == BASE
    assert isinstance(t.train.next(lands), Merged)


def test_a_branch_git_cannot_move_is_reported_and_the_winner_not_requeued() -> None:
    class Stuck(MemoryIntegrator):
        def advance(self, prepared: object) -> bool:
            return False

    t = Train()
    t.train.integrator = Stuck(BASE)
    t.train.enqueue(won("a"))
    assert isinstance(t.train.next(lands), MoveFailed)
    assert not t.train.busy


def test_a_rewind_moves_the_branch_back_only_from_where_orchardist_left_it() -> None:
    t = Train()
    t.train.enqueue(won("a"))
    merged = t.train.next(lands)
    assert isinstance(merged, Merged) and merged.commit is not None
    assert t.train.rewind(BASE) and t.train.tip == BASE == t.integrator.tip()
    t.integrator.reset("f" * 40, BASE)
    assert not t.train.rewind(merged.commit) and t.train.tip == BASE


def test_unpark_and_drop_move_a_tasks_patch_in_and_out_of_the_queue() -> None:
    t = Train()
    t.train.enqueue(won("a"))
    t.train.next(lands)
    assert t.train.unpark("a") and not t.train.unpark("a")
    assert [o.job.task_id for o in t.train.queue] == ["a"]
    t.train.drop("a")
    assert not t.train.queue
