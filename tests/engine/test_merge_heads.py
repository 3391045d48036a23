"""Attempts verified where they land (engine/heads.py) and the merge queue that lands them, on
the in-memory integrator: a winner whose merged tree is the one its attempt verified lands with
no verification of its own; any other tree is verified (or, seen failing, blamed) first."""

from __future__ import annotations

from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.merge import Merged, MergeStep, MergeTrain, NeedsVerify, VerifyFailed
from orchardist.executors import AttemptJob, Outcome
from orchardist.specs import Reverify
from orchardist.state.records import AttemptState

BASE = "b" * 40
MOVED = "c" * 40  # a tip that moved since every attempt's base


class Run:
    """A train on a branch at ``tip``, its head following it, with the attempts it was shown."""

    def __init__(self, tip: str = MOVED, reverify: Reverify = Reverify.ALWAYS) -> None:
        self.integrator = MemoryIntegrator(BASE)
        self.integrator.reset(tip, BASE)
        self.train = MergeTrain(
            self.integrator,
            "orchardist/r",
            lambda commit, job: None,
            lambda restored, tip: None,
            reverify=reverify,
            stacks=set("abcdx"),
        )
        self.train.follow()
        self.heads = self.train.heads

    def attempt(self, task_id: str) -> tuple[AttemptJob, str]:
        """An attempt of ``task_id`` made on BASE whose agent ended: its job and patch."""
        job = AttemptJob(f"{task_id}.1", "r", task_id, 1, 0, BASE, task_id, "", None,
                         ("check",), ".", 60.0, f"{task_id}: the message", "m")  # fmt: skip
        return job, f"{task_id:0>40}"

    def verified(self, task_id: str) -> Outcome:
        """The attempt stacked on the head as its agent ends, and passing there."""
        job, patch = self.attempt(task_id)
        on = self.heads.stack(job, patch)
        verified_on = None if on is None else on.commit
        return Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch,
                       verified_on=verified_on)  # fmt: skip

    def tasks_in(self, commit: str, since: str = MOVED) -> list[str]:
        landed = self.integrator.first_parent_commits(since, commit)
        return [self.integrator.messages[c].split(":")[0] for c in landed]

    def steps(self, room: int = 0) -> list[MergeStep]:
        """Every step the train takes now, with ``room`` slots for verifications."""
        out: list[MergeStep] = []
        while (step := self.train.next(lambda task: True, room)) is not None:
            out.append(step)
        return out


def landed(steps: list[MergeStep]) -> list[str]:
    return [s.outcome.job.task_id for s in steps if isinstance(s, Merged)]


def test_each_attempt_is_verified_on_the_tip_and_every_patch_stacked_before_it() -> None:
    # Given: a tip that moved since the attempts' base
    run = Run()
    # When: three agents end one after the other
    a, b, c = (run.verified(t) for t in "abc")
    # Then: each is verified on the tip with the patches stacked before it, judged against it
    assert a.verified_on and b.verified_on and c.verified_on
    assert run.tasks_in(a.verified_on) == ["a"]
    assert run.tasks_in(b.verified_on) == ["a", "b"]
    assert run.tasks_in(c.verified_on) == ["a", "b", "c"]
    assert run.heads.head == c.verified_on


def test_winners_verified_on_the_head_land_in_stacking_order_with_no_merge_verification() -> None:
    # Given: a, b, c verified stacked; c wins first, then a, then b
    run = Run()
    a, b, c = (run.verified(t) for t in "abc")
    run.train.enqueue(c)
    # Then: c waits for the patches under it, even with slots free: nothing is verified
    assert run.steps(room=4) == [] and run.integrator.tip() == MOVED
    run.train.enqueue(a)
    run.train.enqueue(b)
    steps = run.steps(room=0)
    # Then: all three land in the order they were stacked, without a single verification
    assert landed(steps) == ["a", "b", "c"]
    assert not any(isinstance(s, NeedsVerify) for s in steps)
    # And: the branch holds exactly the tree c's attempt verified
    assert run.integrator.same_tree(run.integrator.tip(), c.verified_on or "")
    assert run.tasks_in(run.integrator.tip()) == ["a", "b", "c"]
    assert not run.train.busy and run.heads.head == run.integrator.tip()


def test_a_winner_stacked_on_a_patch_that_failed_is_verified_again_on_the_tree_it_lands_on() -> (
    None
):
    # Given: a and b verified stacked; a's attempt failed after all (it leaves the head)
    run = Run()
    run.verified("a")
    b = run.verified("b")
    run.heads.dropped("a.1")
    # When: b wins
    run.train.enqueue(b)
    # Then: it no longer waits for a, and its tree on the tip (without a) is verified first
    (step,) = run.steps(room=1)
    assert isinstance(step, NeedsVerify) and run.tasks_in(step.job.base_commit) == ["b"]
    assert run.integrator.tip() == MOVED
    # And: the next attempt stacks on the tip again, not on a
    c = run.verified("c")
    assert c.verified_on is not None and run.tasks_in(c.verified_on) == ["c"]


def test_a_winner_verified_on_the_head_is_verified_again_even_on_its_own_base() -> None:
    # Given: the tip is the attempts' base; x stacked, then a on it; x does not land
    run = Run(tip=BASE)
    run.verified("x")
    a = run.verified("a")
    assert a.verified_on is not None
    run.heads.dropped("x.1")
    # When: a wins
    run.train.enqueue(a)
    # Then: its own tree (never verified: it was verified with x) is verified before it lands
    (step,) = run.steps(room=1)
    assert isinstance(step, NeedsVerify)
    assert run.tasks_in(step.job.base_commit, since=BASE) == ["a"]


def test_a_merged_tree_its_attempt_saw_fail_is_blamed_at_once_and_never_lands() -> None:
    # Given: a's patch failed on the tip (then passed on its own base): the tree it failed on
    run = Run()
    job, patch = run.attempt("a")
    on = run.heads.stack(job, patch)
    assert on is not None
    run.heads.dropped(job.id)
    failed = Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch, failed_on=on.commit,
                     feedback="tests fail with what landed")  # fmt: skip
    # When: it wins, with no slot free
    run.train.enqueue(failed)
    (step,) = run.steps(room=0)
    # Then: it is blamed with that failure, without a verification, and nothing lands
    assert isinstance(step, VerifyFailed) and step.result.state is AttemptState.FAILED
    assert step.result.feedback == "tests fail with what landed"
    assert run.integrator.tip() == MOVED and not run.train.busy


def test_a_tree_seen_failing_under_patches_that_did_not_land_is_verified_like_any_other() -> None:
    # Given: a failed on the tip with x under it; x never landed
    run = Run()
    run.verified("x")
    job, patch = run.attempt("a")
    on = run.heads.stack(job, patch)
    assert on is not None
    run.heads.dropped("x.1")
    outcome = Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch, failed_on=on.commit)
    # When: it wins
    run.train.enqueue(outcome)
    # Then: its tree on the tip is another tree: verified, not blamed
    (step,) = run.steps(room=1)
    assert isinstance(step, NeedsVerify) and run.tasks_in(step.job.base_commit) == ["a"]


def test_a_patch_landing_on_another_tree_than_stacked_empties_the_head() -> None:
    # Given: on the base, a stacked and b on it; d, never stacked, won first
    run = Run(tip=BASE)
    job, patch = run.attempt("d")
    d = Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch)
    run.verified("a")
    b = run.verified("b")
    assert run.heads.waits("b.1")
    # When: d lands
    run.train.enqueue(d)
    assert landed(run.steps(room=0)) == ["d"]
    # Then: nothing waits for what was stacked, the head is the tip, and b is verified again
    assert not run.heads.waits("b.1") and run.heads.head == run.integrator.tip()
    run.train.enqueue(b)
    (step,) = run.steps(room=1)
    assert isinstance(step, NeedsVerify)
    assert run.tasks_in(step.job.base_commit, since=BASE) == ["d", "b"]


def test_with_reverify_overlap_no_attempt_is_stacked() -> None:
    # Given: "overlap" (its own trees land unverified when disjoint)
    run = Run(reverify=Reverify.OVERLAP)
    # Then: attempts are verified on their own base
    assert run.verified("a").verified_on is None


def test_a_winner_rebuilt_from_the_store_is_verified_even_on_its_own_base() -> None:
    # Given: a restart; a's winner rebuilt from the store (where it was verified is not kept)
    run = Run(tip=BASE)
    job, patch = run.attempt("a")
    rebuilt = Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch, verified_on="")
    # When: it is queued again on a tip that is still its base
    run.train.enqueue(rebuilt)
    # Then: its own tree is verified before it lands (its attempt may have seen another)
    (step,) = run.steps(room=1)
    assert isinstance(step, NeedsVerify) and run.integrator.tip() == BASE


def test_a_patch_failing_on_a_head_whose_patch_under_it_failed_is_stacked_again_without_it() -> (
    None
):
    # Given: x stacked, a on it; x's verification failed (it left the head)
    run = Run()
    run.verified("x")
    job, patch = run.attempt("a")
    first = run.heads.stack(job, patch)
    assert first is not None and run.tasks_in(first.commit) == ["x", "a"]
    run.heads.dropped("x.1")
    # When: a fails there too
    again = run.heads.failed(job, patch)
    # Then: it is verified again on the head as it is now, without x
    assert again is not None and run.tasks_in(again.commit) == ["a"]
    assert run.heads.head == again.commit


def test_a_patch_failing_on_a_head_that_still_stands_leaves_it_for_its_own_base() -> None:
    # Given: x stacked, a on it, x still verifying
    run = Run()
    run.verified("x")
    job, patch = run.attempt("a")
    on = run.heads.stack(job, patch)
    # When: a fails there
    # Then: its own base judges it (no new stack), and the head is x again
    assert run.heads.failed(job, patch) is None
    assert on is not None and run.heads.head == run.integrator.parent(on.commit)


def test_a_winner_that_failed_on_a_tree_the_branch_held_is_rerun_without_a_verification() -> None:
    # Given: a failed on the tip (then passed on its own base); b landed since
    run = Run()
    job, patch = run.attempt("a")
    on = run.heads.stack(job, patch)
    assert on is not None
    run.heads.dropped(job.id)
    run.train.enqueue(run.verified("b"))
    assert landed(run.steps(room=0)) == ["b"]
    failed = Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch, failed_on=on.commit)
    # When: a wins
    run.train.enqueue(failed)
    # Then: it failed on the branch as it was: blamed (re-run from the tip), nothing verified
    (step,) = run.steps(room=1)
    assert isinstance(step, VerifyFailed)
    assert run.tasks_in(run.integrator.tip()) == ["b"]


def test_a_patch_stacked_on_a_tip_that_landed_as_stacked_is_judged_by_that_tree_s_outcomes() -> (
    None
):
    # Given: a verified stacked on the tip, and landed as it was
    run = Run()
    a = run.verified("a")
    run.train.enqueue(a)
    assert landed(run.steps(room=0)) == ["a"]
    # When: b stacks on the tip
    job, patch = run.attempt("b")
    on = run.heads.stack(job, patch)
    # Then: b's failures are judged against a's verified commit (its kept outcomes), the same
    # tree as the tip (another commit)
    assert on is not None and on.head == a.verified_on != run.integrator.tip()
    assert run.integrator.same_tree(on.head, run.integrator.tip())
