"""The merge queue on the in-memory integrator: batches verified once on everything ahead of
them, stacked in the slots it is given, bisected on failure; what lands is what was verified,
once, in the order the winners won."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.merge import (
    Bisected,
    BranchMoved,
    Merged,
    MergeStep,
    MergeTrain,
    NeedsVerify,
    VerifyFailed,
)
from orchardist.executors import AttemptJob, Outcome, VerifyJob
from orchardist.specs import Reverify
from orchardist.state.records import AttemptState

BASE = "b" * 40
MOVED = "c" * 40  # a tip that moved since every winner's base


class Queue:
    """A train whose branch moved to MOVED before any winner arrived, with what it intended,
    cancelled and every verification it asked for (in order)."""

    def __init__(self, reverify: Reverify = Reverify.ALWAYS, ways: int = 2) -> None:
        self.integrator = MemoryIntegrator(BASE)
        self.integrator.reset(MOVED, BASE)
        self.intended: list[str] = []
        self.cancelled: list[str] = []
        self.train = MergeTrain(
            self.integrator,
            "orchardist/r",
            lambda commit, job: self.intended.append(commit),
            lambda restored, tip: None,
            cancel=self.cancelled.append,
            reverify=reverify,
            ways=ways,
        )
        self.train.tip = MOVED
        self.out: list[VerifyJob] = []  # verifications asked for and not ended, oldest first
        self.asked: list[NeedsVerify] = []
        self.passed: list[str] = []  # commits whose verification passed

    def tasks_in(self, commit: str) -> list[str]:
        """The winners whose patches the commit's tree holds, oldest first."""
        landed = self.integrator.first_parent_commits(MOVED, commit)
        return [self.integrator.messages[c].split(":")[0] for c in landed]

    def step(self, room: int) -> MergeStep | None:
        step = self.train.next(lands, room)
        if isinstance(step, NeedsVerify):
            self.out.append(step.job)
            self.asked.append(step)
        return step

    def end(self, job: VerifyJob, passes: bool) -> None:
        self.out.remove(job)
        if passes:
            self.passed.append(job.base_commit)
        state = AttemptState.PASSED if passes else AttemptState.FAILED
        self.train.verified(Outcome(job, state, 0.0, 1.0, detail="tests fail"))

    def drain(self, room: int, passes: Callable[[list[str]], bool]) -> list[MergeStep]:
        """Step until nothing moves, ending the oldest verification out (it passes when
        ``passes`` says so of the tasks its tree holds) whenever the train waits."""
        steps: list[MergeStep] = []
        while self.train.busy:
            step = self.step(room - len(self.out))
            if step is not None:
                steps.append(step)
                continue
            live = [j for j in self.out if j.id not in self.cancelled]
            for job in [j for j in self.out if j.id in self.cancelled]:
                self.end(job, False)  # a cancelled verification reports, late
            assert live, "the train waits for nothing"
            self.end(live[0], passes(self.tasks_in(live[0].base_commit)))
        return steps


def won(task_id: str, files: frozenset[str] = frozenset()) -> Outcome:
    job = AttemptJob(f"{task_id}.1", "r", task_id, 1, 0, BASE, task_id, "", None, ("check",),
                     ".", 60.0, f"{task_id}: the message", "m")  # fmt: skip
    return Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=f"{task_id:0>40}")


def lands(task_id: str) -> bool:
    return True


def merged(steps: list[MergeStep]) -> list[str]:
    return [s.outcome.job.task_id for s in steps if isinstance(s, Merged)]


def test_winners_waiting_together_are_verified_once_as_a_batch_and_land_in_order() -> None:
    # Given: three winners made on BASE, waiting while the tip moved
    q = Queue()
    for task in "abc":
        q.train.enqueue(won(task))
    # When: a slot is free
    step = q.step(room=1)
    # Then: one verification, of the tree holding all three on the tip, judged against the tip
    assert isinstance(step, NeedsVerify)
    assert [o.job.task_id for o in step.batch] == ["a", "b", "c"]
    assert q.tasks_in(step.job.base_commit) == ["a", "b", "c"]
    assert step.job.baseline == MOVED and step.tip == MOVED
    assert q.step(room=1) is None and q.integrator.tip() == MOVED  # nothing lands unverified
    # When: it passes; Then: each lands, in order, and the branch ends at the verified tree
    q.end(step.job, True)
    steps = [q.step(room=1) for _ in "abc"]
    assert merged([s for s in steps if s is not None]) == ["a", "b", "c"]
    assert q.integrator.tip() == step.job.base_commit == q.intended[-1]
    assert q.intended == q.integrator.first_parent_commits(MOVED, q.integrator.tip())
    assert not q.train.busy


def test_without_a_free_slot_no_verification_starts_but_a_verified_tree_still_lands() -> None:
    # Given: a winner on the moved tip, and no slot
    q = Queue()
    q.train.enqueue(won("a"))
    # Then: it waits
    assert q.step(room=0) is None and q.train.queue
    # Given: a winner made on the tip itself (its tree is the one verified)
    q2 = Queue()
    q2.train.tip = BASE
    q2.integrator.reset(BASE, MOVED)
    q2.train.enqueue(won("a"))
    # Then: it lands without a slot
    assert isinstance(q2.step(room=0), Merged)


def test_a_failing_batch_is_bisected_until_the_culprit_stands_alone_and_only_it_is_blamed() -> None:
    # Given: eight winners; the tree fails whenever it holds "e"
    q = Queue(ways=2)
    for task in "abcdefgh":
        q.train.enqueue(won(task))
    # When: the queue runs with two slots
    steps = q.drain(room=2, passes=lambda tasks: "e" not in tasks)
    # Then: e alone is blamed, with its verification's result; everyone else landed, in order
    failed = [s for s in steps if isinstance(s, VerifyFailed)]
    assert [s.outcome.job.task_id for s in failed] == ["e"]
    assert failed[0].result.state is AttemptState.FAILED
    assert merged(steps) == ["a", "b", "c", "d", "f", "g", "h"]
    assert q.tasks_in(q.integrator.tip()) == ["a", "b", "c", "d", "f", "g", "h"]
    # And: the failing batches were split, not blamed
    assert next(s.sizes for s in steps if isinstance(s, Bisected)) == (4, 4)
    # And: merged = verified: every landed commit is in a tree that passed (itself or an
    # ancestor of it along the branch), and none landed twice
    for commit in q.intended:
        assert any(commit in q.integrator.first_parent_commits(MOVED, p) for p in q.passed)
    assert len(set(q.intended)) == len(q.intended)
    # And: fewer verifications than a merge each (8), bisection included
    assert len(q.asked) < 8 + 3


def test_batches_stacked_behind_a_failing_one_are_cancelled_and_verified_again_without_it() -> None:
    # Given: a's batch, and b's stacked on it in a second slot
    q = Queue()
    q.train.enqueue(won("a"))
    first = q.step(room=2)
    q.train.enqueue(won("b"))
    second = q.step(room=1)
    assert isinstance(first, NeedsVerify) and isinstance(second, NeedsVerify)
    assert q.tasks_in(second.job.base_commit) == ["a", "b"]
    assert second.job.baseline == first.job.base_commit  # judged against the tree under it
    assert q.train.verifying == 2
    # When: a's verification fails
    q.end(first.job, False)
    blamed = q.step(room=0)
    # Then: a is blamed; b's verification is cancelled (it still holds its slot until it ends)
    assert isinstance(blamed, VerifyFailed) and blamed.outcome.job.task_id == "a"
    assert q.cancelled == [second.job.id]
    assert q.train.owns(second.job.id) and q.train.verifying == 1
    # And: its late result, even a pass, lands nothing
    q.end(second.job, True)
    assert q.step(room=0) is None and q.integrator.tip() == MOVED
    assert not q.train.owns(second.job.id) and q.train.verifying == 0
    # When: a slot frees; Then: b is verified again on the tip, without a
    again = q.step(room=1)
    assert isinstance(again, NeedsVerify) and q.tasks_in(again.job.base_commit) == ["b"]
    q.end(again.job, True)
    landed = q.step(room=1)
    assert isinstance(landed, Merged) and q.integrator.parent(q.integrator.tip()) == MOVED


def test_with_reverify_overlap_a_patch_disjoint_from_what_landed_lands_unverified() -> None:
    # Given: "overlap"; a landed a.txt on the moved tip; b touches b.txt, c touches a.txt
    q = Queue(Reverify.OVERLAP)
    q.integrator.touched = {MOVED: frozenset({"moved.txt"})}
    for task in "abc":
        q.integrator.touched[f"{task:0>40}"] = frozenset({f"{'a' if task == 'c' else task}.txt"})
        q.train.enqueue(won(task))
    # When: the queue moves, with no slot at all
    first, second, third = (q.step(room=0) for _ in range(3))
    # Then: a and b land unverified; c shares a.txt with a, which landed since its base
    assert isinstance(first, Merged) and isinstance(second, Merged)
    assert third is None and [o.job.task_id for o in q.train.queue] == ["c"]
    assert isinstance(q.step(room=1), NeedsVerify)


def test_with_reverify_always_the_same_disjoint_patch_is_verified() -> None:
    q = Queue(Reverify.ALWAYS)
    q.integrator.touched = {MOVED: frozenset({"moved.txt"}), "b".rjust(40, "0"): frozenset({"b"})}
    q.train.enqueue(won("b"))
    assert q.step(room=0) is None
    assert isinstance(q.step(room=1), NeedsVerify)


def test_a_halted_queue_forgets_its_entries_but_counts_its_verifications_until_they_end() -> None:
    q = Queue()
    q.train.enqueue(won("a"))
    step = q.step(room=1)
    q.train.enqueue(won("b"))
    assert isinstance(step, NeedsVerify)
    assert q.train.halt() == [step.job]
    assert not q.train.queue and q.train.verifying == 1 and q.train.owns(step.job.id)
    q.end(step.job, True)
    assert q.train.verifying == 0 and q.step(room=1) is None and q.integrator.tip() == MOVED


def test_winners_needing_no_verification_wait_behind_a_batch_and_land_after_it_in_order() -> None:
    # Given: a batch being verified, then 1500 winners of tasks without verify commands
    q = Queue()
    q.train.enqueue(won("a"))
    first = q.step(room=1)
    assert isinstance(first, NeedsVerify)
    for i in range(1500):
        unchecked = won(f"n{i}")
        q.train.enqueue(replace(unchecked, job=replace(unchecked.job, verify=())))
    # When: the queue moves without a slot; Then: nothing lands before a
    assert q.step(room=0) is None and q.integrator.tip() == MOVED
    # When: a passes; Then: a lands, then each of the others, in order, without verification
    q.end(first.job, True)
    steps = q.drain(room=0, passes=lambda tasks: True)
    assert merged(steps) == ["a", *(f"n{i}" for i in range(1500))]
    assert len(q.asked) == 1


def test_a_branch_moved_under_a_passed_batch_is_put_back_and_the_whole_stack_queued_again() -> None:
    # Given: a passed batch of a and b, and c's batch stacked on it, still out
    q = Queue()
    q.train.enqueue(won("a"))
    q.train.enqueue(won("b"))
    first = q.step(room=2)
    q.train.enqueue(won("c"))
    second = q.step(room=1)
    assert isinstance(first, NeedsVerify) and isinstance(second, NeedsVerify)
    q.end(first.job, True)
    # When: someone else moves the branch before a lands
    q.integrator.reset("f" * 40, MOVED)
    step = q.step(room=0)
    # Then: the branch is put back; nothing landed; c's verification is cancelled; a, b and c
    # wait again, in order, to be verified on the tip as it is
    assert isinstance(step, BranchMoved) and step.restored
    assert q.integrator.tip() == MOVED == q.train.tip
    assert q.cancelled == [second.job.id]
    assert [o.job.task_id for o in q.train.queue] == ["a", "b", "c"]
    assert not q.train.stack
