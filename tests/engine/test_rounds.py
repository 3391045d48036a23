"""Candidate rounds alone: which candidate wins, why each lost, and how a round without a winner
ends. No executor, no store: outcomes are built here as an executor would report them."""

from __future__ import annotations

from dataclasses import replace

from orchardist.engine.rounds import Rounds, Unit
from orchardist.executors import AttemptJob, Outcome
from orchardist.plan.graph import Graph
from orchardist.specs import TaskSpec
from orchardist.state.agentrecords import Failure
from orchardist.state.records import AttemptState
from orchardist.verify.oracle import CHECK_DOES_NOT_REPRODUCE


def rounds_of(*specs: TaskSpec) -> Rounds:
    by_id = {s.id: s for s in specs}
    graph = Graph(list(by_id), {s.id: s.depends_on for s in specs})
    return Rounds(by_id, graph.ranks)


def spec(task_id: str, candidates: int = 1, select: str = "smallest", index: int = 0) -> TaskSpec:
    return TaskSpec(
        id=task_id,
        title=task_id,
        prompt="",
        agent="bot",
        index=index,
        candidates=candidates,
        select=select,
    )


def ended(
    rounds: Rounds,
    unit: Unit,
    state: AttemptState,
    lines: int = 1,
    took_s: float = 1.0,
    failure: Failure | None = None,
    started: float = 0.0,
) -> Outcome:
    n = rounds.next_attempt(unit.task_id)
    job = AttemptJob(f"{unit.task_id}.{n}", "r", unit.task_id, n, unit.candidate, "b", "", "",
                     None, (), ".", 60.0, "", "m")  # fmt: skip
    ended_at = started + took_s
    return Outcome(
        job, state, started, ended_at, failure=failure, changed_lines=lines, detail=f"#{n}"
    )


def drain(rounds: Rounds) -> list[Unit]:
    units = []
    while (unit := rounds.ready.pop(lambda pool: True)) is not None:
        units.append(unit)
    return units


def test_a_round_makes_each_candidate_ready_as_its_own_unit() -> None:
    rounds = rounds_of(spec("a", candidates=3))
    rounds.start("a")
    assert drain(rounds) == [Unit("a", 0), Unit("a", 1), Unit("a", 2)]


def test_the_smallest_passing_diff_wins_once_every_candidate_finished() -> None:
    # Given: three candidates; 0 passes with 5 lines, 1 fails, 2 passes with 2 lines
    rounds = rounds_of(spec("a", candidates=3))
    rounds.start("a")
    big = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=5)
    bad = ended(rounds, Unit("a", 1), AttemptState.FAILED, failure=Failure.VERIFY_FAILED)
    small = ended(rounds, Unit("a", 2), AttemptState.PASSED, lines=2)
    # When: they finish; Then: the round is decided only by the last
    assert rounds.record(big) is None
    assert rounds.record(bad) is None
    decision = rounds.record(small)
    assert decision is not None and decision.winner is small
    assert decision.why == "smallest passing diff"
    assert dict((o.job.candidate, why) for o, why in decision.selections) == {
        0: "lost to candidate 2: larger diff (5 vs 2 lines)",
        1: "failed",
        2: "won: smallest passing diff",
    }
    # And: an attempt of the decided round no longer belongs to it
    assert rounds.current(big.job) is None


def test_between_diffs_of_one_size_the_shortest_attempt_wins_then_the_lowest_index() -> None:
    # Given: three candidates passing with 4 lines each; 0 and 2 took 5 s, 1 took 2 s
    rounds = rounds_of(spec("a", candidates=3))
    rounds.start("a")
    slow = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=4, took_s=5.0)
    quick = ended(rounds, Unit("a", 1), AttemptState.PASSED, lines=4, took_s=2.0)
    also_slow = ended(rounds, Unit("a", 2), AttemptState.PASSED, lines=4, took_s=5.0)
    # When: they finish, the slow ones first and last
    assert rounds.record(slow) is None
    assert rounds.record(also_slow) is None
    decision = rounds.record(quick)
    # Then: the quickest wins, though it has neither the lowest index nor finished first
    assert decision is not None and decision.winner is quick
    assert dict((o.job.candidate, why) for o, why in decision.selections) == {
        0: "lost to candidate 1: same diff size, slower",
        1: "won: smallest passing diff",
        2: "lost to candidate 1: same diff size, slower",
    }


def test_between_diffs_of_one_size_and_duration_the_lowest_index_wins() -> None:
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    second = ended(rounds, Unit("a", 1), AttemptState.PASSED, lines=4, took_s=3.0)
    first = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=4, took_s=3.0)
    assert rounds.record(second) is None
    decision = rounds.record(first)
    assert decision is not None and decision.winner is first
    assert dict((o.job.candidate, why) for o, why in decision.selections)[1] == (
        "lost to candidate 0: same diff size and duration, higher index"
    )


def test_each_attempts_duration_counts_from_its_own_start_not_the_rounds() -> None:
    # Given: two candidates passing with 4 lines; 0 ran 10 s from 0, 1 ran 3 s from 8 (it
    # waited for a slot), so 1 ended last but took least
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    long = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=4, took_s=10.0)
    short = ended(rounds, Unit("a", 1), AttemptState.PASSED, lines=4, took_s=3.0, started=8.0)
    # When: both finish
    assert rounds.record(long) is None
    decision = rounds.record(short)
    # Then: the shorter attempt wins, and the other lost as the slower
    assert decision is not None and decision.winner is short
    assert dict((o.job.candidate, why) for o, why in decision.selections)[0] == (
        "lost to candidate 1: same diff size, slower"
    )


def test_attempts_of_one_duration_started_at_different_times_tie_on_duration() -> None:
    # Given: two candidates, 4 lines, 3 s each; 0 started at 1 s, 1 at 5 s
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    first = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=4, took_s=3.0, started=1.0)
    later = ended(rounds, Unit("a", 1), AttemptState.PASSED, lines=4, took_s=3.0, started=5.0)
    assert rounds.record(first) is None
    decision = rounds.record(later)
    # Then: the lower index wins, and the loser is told why: not slower, a higher index
    assert decision is not None and decision.winner is first
    assert dict((o.job.candidate, why) for o, why in decision.selections)[1] == (
        "lost to candidate 0: same diff size and duration, higher index"
    )


def test_select_first_decides_at_the_first_pass_and_takes_the_rest_off_the_ready_set() -> None:
    rounds = rounds_of(spec("a", candidates=3, select="first"))
    rounds.start("a")
    assert rounds.ready.pop(lambda pool: True) == Unit("a", 0)
    first = ended(rounds, Unit("a", 0), AttemptState.PASSED, lines=9)
    decision = rounds.record(first)
    assert decision is not None and decision.winner is first
    assert decision.why == "first candidate to pass"
    assert drain(rounds) == []


def test_a_round_without_a_pass_reports_the_last_failure_to_end() -> None:
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    late = ended(rounds, Unit("a", 0), AttemptState.FAILED, took_s=9.0, failure=Failure.TIMEOUT)
    early = ended(rounds, Unit("a", 1), AttemptState.FAILED, failure=Failure.AGENT_ERROR)
    assert rounds.record(late) is None
    decision = rounds.record(early)
    assert decision is not None and decision.winner is None
    assert decision.failure is Failure.TIMEOUT
    assert decision.detail == "no candidate passed (2 tried); last: #1"
    assert not decision.final


def test_a_lone_pass_among_failures_wins_as_the_only_passing_candidate() -> None:
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    failed = ended(rounds, Unit("a", 0), AttemptState.FAILED, failure=Failure.VERIFY_FAILED)
    passed = ended(rounds, Unit("a", 1), AttemptState.PASSED)
    assert rounds.record(failed) is None
    decision = rounds.record(passed)
    assert decision is not None and decision.winner is passed
    assert decision.why == "only passing candidate"


def test_a_round_whose_checks_all_pass_on_the_base_ends_for_good_with_the_last_feedback() -> None:
    # Given: both candidates failed because their check passes on the base already
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    first, last = (
        replace(
            ended(rounds, Unit("a", k), AttemptState.FAILED, took_s=k + 1.0),
            failure=Failure.VERIFY_FAILED,
            flag=CHECK_DOES_NOT_REPRODUCE,
            feedback=f"feedback {k}",
        )
        for k in range(2)
    )
    assert rounds.record(first) is None
    decision = rounds.record(last)
    # Then: no new candidate can change that: the failure is final, with the last feedback
    assert decision is not None and decision.winner is None
    assert decision.final and decision.feedback == "feedback 1"
    assert decision.failure is Failure.VERIFY_FAILED


def test_a_round_held_before_any_candidate_finished_ends_without_a_winner() -> None:
    # Given: a round whose one candidate runs; When: held, and the candidate cancelled
    rounds = rounds_of(spec("a"))
    rounds.start("a")
    assert rounds.hold("a", running=[0]) is None
    decision = rounds.decide("a")
    # Then: no winner, nothing finished: an agent error, never final
    assert decision.winner is None and decision.detail == "no candidate finished"
    assert decision.failure is Failure.AGENT_ERROR and not decision.final


def test_attempts_of_an_earlier_round_do_not_belong_to_the_next() -> None:
    rounds = rounds_of(spec("a"))
    rounds.start("a")
    old = ended(rounds, Unit("a", 0), AttemptState.FAILED, failure=Failure.AGENT_ERROR)
    rounds.start("a")  # a retry
    assert rounds.current(old.job) is None
    new = ended(rounds, Unit("a", 0), AttemptState.PASSED)
    assert rounds.current(new.job) is not None


def test_holding_a_task_ends_its_round_with_the_pass_it_has_when_nothing_else_runs() -> None:
    # Given: two candidates; 0 passed, 1 is still queued
    rounds = rounds_of(spec("a", candidates=2))
    rounds.start("a")
    passed = ended(rounds, Unit("a", 0), AttemptState.PASSED)
    assert rounds.record(passed) is None
    # When: the task is held with nothing running
    decision = rounds.hold("a", running=[])
    # Then: the pass wins and the queued candidate never starts
    assert decision is not None and decision.winner is passed
    assert drain(rounds) == []


def test_holding_a_task_with_a_candidate_running_waits_for_it() -> None:
    rounds = rounds_of(spec("a", candidates=3))
    rounds.start("a")
    assert rounds.hold("a", running=[1]) is None
    assert drain(rounds) == []
    decision = rounds.record(ended(rounds, Unit("a", 1), AttemptState.FAILED))
    assert decision is not None and decision.winner is None


def test_holding_a_task_whose_round_is_decided_decides_nothing_again() -> None:
    # Given: a round decided by its one passing candidate
    rounds = rounds_of(spec("a"))
    rounds.start("a")
    assert rounds.record(ended(rounds, Unit("a", 0), AttemptState.PASSED)) is not None
    # When: the task is held afterwards (say, the run stops); Then: no second decision
    assert rounds.hold("a", running=[]) is None


def test_work_of_a_round_a_rewind_dropped_belongs_to_no_round() -> None:
    # Given: a candidate under way when its task's round is dropped (a rewind)
    rounds = rounds_of(spec("a"))
    rounds.start("a")
    running = ended(rounds, Unit("a", 0), AttemptState.PASSED)
    assert rounds.current(running.job) is not None
    rounds.drop("a")
    # Then: its outcome, when it comes, counts in no round, and nothing of the task is ready
    assert rounds.current(running.job) is None
    assert drain(rounds) == []


def test_units_order_by_task_rank_then_candidate_number() -> None:
    rounds = rounds_of(spec("a", candidates=12, index=0), spec("b", index=1))
    rounds.start("b")
    rounds.start("a")
    assert drain(rounds) == [*(Unit("a", k) for k in range(12)), Unit("b", 0)]
