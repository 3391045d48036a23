"""Task state transitions alone: retries after a back-off, failing for good and blocking what
depends on it, bounded re-runs, landing and releasing dependents. On an in-memory store and the
in-memory integrator; the decisions are built here as the rounds would make them."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from orchardist.engine.hooks import Hooks
from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.jobs import Briefs, started
from orchardist.engine.ledger import Ledger
from orchardist.engine.lifecycle import Lifecycle
from orchardist.engine.merge import (
    Bisected,
    BranchMoved,
    Conflict,
    Merged,
    MergeStep,
    MergeTrain,
    MoveFailed,
    NeedsVerify,
    VerifyFailed,
    merge_verify_job,
)
from orchardist.engine.policy import Backoff
from orchardist.engine.regression import Culprit, Rewind
from orchardist.engine.review import Gate
from orchardist.engine.rounds import Decision, Rounds, Unit
from orchardist.executors import AttemptJob, Outcome
from orchardist.pipelines.expand import Pipelines, expand
from orchardist.plan.graph import Graph
from orchardist.seams import Prepared
from orchardist.specs import Plan, Review, RunConfig, TaskSpec
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.state.records import (
    AttemptState,
    LineComment,
    ReviewDecision,
    Run,
    RunState,
    StoredDecision,
    TaskRecord,
    TaskState,
    Verdict,
)
from orchardist.state.store import Store

BASE = "b" * 40


class World:
    """a -> b -> c, each with one retry; the parts a Lifecycle works with, in memory."""

    def __init__(
        self,
        review: Review = Review.AUTO,
        candidates: int = 1,
        deps: dict[str, tuple[str, ...]] | None = None,
        fixes: frozenset[str] = frozenset(),
    ) -> None:
        deps = deps or {"a": (), "b": ("a",), "c": ("b",)}
        tasks: tuple[TaskSpec, ...] = tuple(
            TaskSpec(
                id=t,
                title=t,
                prompt=t,
                agent="bot",
                index=i,
                depends_on=d,
                retries=1,
                review=review,
                candidates=candidates,
                pipeline="fix" if t in fixes else None,
            )
            for i, (t, d) in enumerate(deps.items())
        )
        self.profile = profile = AgentProfile("bot", "shell", options={"command": "false"})
        tasks, _ = expand(tasks, {"bot": profile})  # a pipeline task as its stage tasks
        deps = {t.id: t.depends_on for t in tasks}
        self.plan = Plan(Path("/x/plan.toml"), Path("/x"), RunConfig(), {"bot": profile}, tasks, "")
        self.store = Store.in_memory()
        run = Run("r", "plan.toml", "", "/x", BASE, "orchardist/r", RunState.RUNNING, 0.0)
        with self.store.transaction() as tx:
            tx.add_run(run)
            for t in tasks:
                tx.add_task(TaskRecord("r", t.id, TaskState.PENDING, t.index))
        specs = {t.id: t for t in tasks}
        graph = Graph(list(specs), deps)
        self.ledger = Ledger(self.store, Hooks(), "r", lambda: 0.0)
        self.ledger.load()
        self.rounds = Rounds(specs, graph.ranks)
        self.train = MergeTrain(MemoryIntegrator(BASE), "orchardist/r", self.ledger.intend,
                                self.ledger.deleted)  # fmt: skip
        self.train.tip = BASE
        pipelines = Pipelines(specs, self.store, "r", self.train.start_on)
        self.gate = Gate(specs, pipelines.lands, self.train.start_on)
        self.retries: list[tuple[float, str]] = []
        self.cancelled: list[tuple[str, str]] = []
        self.life = Lifecycle(
            specs=specs,
            graph=graph,
            ledger=self.ledger,
            rounds=self.rounds,
            train=self.train,
            briefs=Briefs(self.plan, "r"),
            pipelines=pipelines,
            gate=self.gate,
            backoff=Backoff(base_s=10.0),
            rng=random.Random(0),
            retry_in=lambda delay_s, task_id: self.retries.append((delay_s, task_id)),
            cancel=lambda task_id, why: self.cancelled.append((task_id, why)),
        )
        self.life.count_waiting(lambda task_id: False)

    def state(self, task_id: str) -> TaskState:
        return self.ledger.tasks[task_id].state

    def start(self) -> None:
        with self.ledger.tx() as tx:
            self.life.restore(tx, {})

    def attempt(
        self, task_id: str, state: AttemptState, verify: tuple[str, ...] = (), candidate: int = 0
    ) -> Outcome:
        """Attempt n of a task by the bot, started from the train's tip, ended in ``state``."""
        n, tip = self.rounds.next_attempt(task_id), self.train.tip
        title = f"{task_id}'s title"
        job = AttemptJob(f"{task_id}.{n}", "r", task_id, n, candidate, tip, title, "", self.profile,
                         verify, ".", 9.0, task_id, "m")  # fmt: skip
        failed = state is AttemptState.FAILED
        outcome = Outcome(job, state, 0.0, 1.0, failure=Failure.VERIFY_FAILED if failed else None,
                          detail="tests fail" if failed else "", patch_commit=BASE)  # fmt: skip
        with self.ledger.tx() as tx:  # started and ended, as the loop records them
            tx.add_attempt(started(job, "bot", 0.0, ""))
            tx.ended(outcome, state)
        return outcome

    def decide(self, decision: Decision) -> None:
        with self.ledger.tx() as tx:
            self.life.decided(tx, decision)

    def review(self, task_id: str, n: int, decision: ReviewDecision) -> StoredDecision:
        """A person's decision on attempt ``n``, recorded (as ``orchardist review`` does)."""
        stored = StoredDecision("r", task_id, n, decision, 5.0, diff="+a line")
        with self.store.transaction() as tx:
            assert tx.add_decision(stored)
        return stored

    def apply(self, stored: StoredDecision) -> None:
        with self.ledger.tx() as tx:
            self.life.reviewed(tx, stored, 7.0)


def lost(outcome: Outcome) -> Decision:
    return Decision(outcome.job.task_id, None, "", ((outcome, "failed"),),
                    failure=Failure.VERIFY_FAILED, detail="tests fail")  # fmt: skip


def test_only_a_task_without_dependencies_starts_and_the_others_wait() -> None:
    world = World()
    world.start()
    assert [world.state(t) for t in "abc"] == [
        TaskState.READY,
        TaskState.PENDING,
        TaskState.PENDING,
    ]
    assert world.rounds.ready.pop(lambda pool: True) == Unit("a", 0)


def test_a_failed_round_retries_after_a_back_off_then_fails_for_good_and_blocks_dependents() -> (
    None
):
    # Given: a started; its first round fails
    world = World()
    world.start()
    world.decide(lost(world.attempt("a", AttemptState.FAILED)))
    # Then: it waits for its retry, which is due after the back-off (10 s, jittered)
    assert world.state("a") is TaskState.READY and world.ledger.tasks["a"].failures == 1
    ((delay_s, task_id),) = world.retries
    assert task_id == "a" and 5.0 <= delay_s <= 10.0
    assert world.cancelled == [("a", "another candidate was chosen")]
    # When: the retry fails too
    world.decide(lost(world.attempt("a", AttemptState.FAILED)))
    # Then: a failed for good, and everything that depends on it is blocked
    assert world.state("a") is TaskState.FAILED
    assert world.state("b") is world.state("c") is TaskState.BLOCKED
    assert world.ledger.tasks["b"].reason == "dependency a failed"


def test_rounds_lost_to_rate_limits_cost_none_of_the_tasks_retries() -> None:
    # Given: a, with one retry, started
    world = World()
    world.start()
    # When: two rounds in a row end rate limited (a failure with a budget of its own)
    for _ in range(2):
        outcome = world.attempt("a", AttemptState.FAILED)
        limited = ((outcome, "failed"),)
        world.decide(Decision("a", None, "", limited, failure=Failure.RATE_LIMITED, detail="429"))
    # Then: a is still to be retried, its count of failures untouched
    assert world.state("a") is TaskState.READY
    assert world.ledger.tasks["a"].failures == 0 and len(world.retries) == 2


def test_a_winner_queues_to_merge_and_landing_it_releases_its_dependent() -> None:
    world = World()
    world.start()
    won = world.attempt("a", AttemptState.PASSED)
    world.decide(Decision("a", won, "only passing candidate", ((won, "won: only"),)))
    assert world.state("a") is TaskState.MERGING and list(world.train.queue) == [won]
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged)
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    assert world.state("a") is TaskState.DONE and world.ledger.tasks["a"].commit == step.commit
    assert world.state("b") is TaskState.READY and world.state("c") is TaskState.PENDING
    assert [a.state for a in world.store.attempts("r", "a")] == [AttemptState.MERGED]


def test_a_task_is_re_run_at_most_three_times_then_fails_and_blocks_its_dependents() -> None:
    # Given: a started; its tip moves under it three times (the README: "at most 3 re-runs")
    world = World()
    world.start()
    for k in (1, 2, 3):
        with world.ledger.tx() as tx:
            world.life.rerun(tx, "a", "the tip moved")
        # Then: each time it is ready for a fresh round, not counted as a failure
        assert world.state("a") is TaskState.READY
        assert (world.ledger.tasks["a"].reruns, world.ledger.tasks["a"].failures) == (k, 0)
    # When: a fourth re-run is asked for
    with world.ledger.tx() as tx:
        world.life.rerun(tx, "a", "the tip moved")
    # Then: a failed for good, and what depends on it is blocked
    assert world.state("a") is TaskState.FAILED
    assert world.ledger.tasks["a"].reason == "the tip moved (gave up after 3 re-runs)"
    assert world.state("b") is TaskState.BLOCKED


def test_a_back_off_that_ends_after_a_rewind_starts_no_round_for_a_task_that_waits_again() -> None:
    # Given: a landed, b lost a round and waits out its back-off
    world = World()
    world.start()
    won = world.attempt("a", AttemptState.PASSED)
    world.decide(Decision("a", won, "only passing candidate", ((won, "won: only"),)))
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged) and step.commit is not None
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    world.decide(lost(world.attempt("b", AttemptState.FAILED)))
    assert world.state("b") is TaskState.READY and [t for _, t in world.retries] == ["b"]
    # When: a regression rewind takes a off the branch, and then b's back-off ends
    culprit = Rewind(Culprit(step.commit, 1, "boom"), "a", ((step.commit, "a"),), frozenset("bc"))
    with world.ledger.tx() as tx:
        world.life.replay(tx, culprit)
    with world.ledger.tx() as tx:
        world.life.retry_due(tx, "b")
    # Then: b waits for a's re-run, it does not start a round of its own
    assert world.state("a") is TaskState.READY and world.state("b") is TaskState.PENDING
    # When: a's re-runs give up (b is blocked), and a second back-off of b ends
    for _ in range(3):  # the culprit re-run was its first of three; the fourth gives up
        with world.ledger.tx() as tx:
            world.life.rerun(tx, "a", "regression culprit")
    assert world.state("a") is TaskState.FAILED and world.state("b") is TaskState.BLOCKED
    with world.ledger.tx() as tx:
        world.life.retry_due(tx, "b")
    # Then: b stays blocked (its table has no move from blocked to ready)
    assert world.state("b") is TaskState.BLOCKED


# -- review gates --------------------------------------------------------------------------------


def won(world: World, task_id: str) -> Outcome:
    """A passing attempt that wins its round."""
    outcome = world.attempt(task_id, AttemptState.PASSED)
    world.decide(Decision(task_id, outcome, "only passing candidate", ((outcome, "won"),)))
    return outcome


def test_a_reviewed_winner_waits_and_an_approval_acted_on_twice_queues_it_once() -> None:
    # Given: a reviewed task whose winner passed
    world = World(review=Review.HUMAN)
    world.start()
    winner = won(world, "a")
    # Then: it waits for a person, not for the merge train
    assert world.state("a") is TaskState.AWAITING_REVIEW and not world.train.queue
    # When: an approval is acted on, and acted on again (a second wake-up, a restart)
    stored = world.review("a", 1, ReviewDecision(Verdict.APPROVE, who="ann"))
    world.apply(stored)
    world.apply(stored)
    # Then: the task merges once, and the decision is marked applied
    assert world.state("a") is TaskState.MERGING
    assert world.ledger.tasks["a"].reason == "approved by ann"
    assert list(world.train.queue) == [winner]
    assert [d.applied_at for d in world.store.decisions("r")] == [7.0]
    states = [e.data["state"] for e in world.store.events("r") if e.kind == "review"]
    assert states == ["review_requested", "applied"]


def test_a_rejection_fails_the_task_and_blocks_what_depends_on_it() -> None:
    world = World(review=Review.HUMAN)
    world.start()
    won(world, "a")
    world.apply(world.review("a", 1, ReviewDecision(Verdict.REJECT, "too big", who="ann")))
    assert world.state("a") is TaskState.FAILED
    assert world.ledger.tasks["a"].reason == "rejected by ann: too big"
    assert world.state("b") is world.state("c") is TaskState.BLOCKED
    (attempt,) = world.store.attempts("r", "a")
    assert (attempt.won, attempt.selection) == (False, "rejected by ann")


def test_a_change_request_runs_one_candidate_of_the_reviewed_agent_from_the_reviewed_patch() -> (
    None
):
    # Given: a reviewed task of two candidates whose winner passed
    world = World(review=Review.HUMAN, candidates=2)
    world.start()
    world.rounds.ready.discard(Unit("a", 1))
    winner = won(world, "a")
    # When: changes are asked for, with a comment on a line
    comment = LineComment("a.txt", 2, "why two?", quote="> 2 | two")
    ask = ReviewDecision(Verdict.CHANGES, "Use three.", (comment,), who="ann")
    world.apply(world.review("a", 1, ask))
    # Then: a round of one candidate, run by the reviewed attempt's agent
    assert world.state("a") is TaskState.READY
    assert world.rounds.ready.pop(lambda pool: True) == Unit("a", 0)
    assert world.rounds.ready.pop(lambda pool: True) is None
    assert world.gate.agent("a", "someone-else") == "bot"
    # And: its job is told the request and starts from the reviewed patch on the tip
    job = world.gate.shape(world.life.briefs.attempt(world.plan.tasks[0], 2, 0, "bot", BASE, None))
    assert "Use three." in job.prompt and "> 2 | two" in job.prompt and "+a line" in job.prompt
    # And: an agent that continues its own session is told the request alone, not the brief
    assert "Use three." in job.followup and "> 2 | two" in job.followup
    assert job.prompt.endswith(job.followup) and len(job.followup) < len(job.prompt)
    assert job.start_commit is not None and job.start_commit != BASE
    assert job.base_commit == BASE  # the new patch is taken against the tip: it holds both
    assert winner.job.attempt == 1


# -- what is written beside a state: reasons, event fields, briefs ------------------------------


def task_events(world: World, task_id: str) -> list[dict[str, object]]:
    """The data of the task's state events, in order (what `orchardist events` shows)."""
    return [dict(e.data) for e in world.store.events("r") if e.kind == "task" and
            e.task_id == task_id]  # fmt: skip


def next_prompt(world: World, task_id: str) -> str:
    """The prompt the task's next attempt would be given."""
    spec = next(t for t in world.plan.tasks if t.id == task_id)
    return world.life.briefs.attempt(spec, 9, 0, "bot", BASE, None).prompt


def land(world: World, task_id: str) -> str:
    """The task's attempt wins its round and lands on the run branch; the commit it made."""
    won(world, task_id)
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged) and step.commit is not None
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    return step.commit


def test_a_retry_says_when_it_is_due_and_the_next_attempt_is_told_why_the_last_one_failed() -> None:
    # Given: a started; When: its round is lost to failing tests
    world = World()
    world.start()
    world.decide(lost(world.attempt("a", AttemptState.FAILED)))
    # Then: its event says which retry it waits for and in how long, with the failure as reason
    ((delay_s, _),) = world.retries
    ready = task_events(world, "a")[-1]
    assert ready == {"state": "ready", "retry": 1, "retry_in_s": round(delay_s, 2),
                     "reason": "tests fail"}  # fmt: skip
    assert world.ledger.tasks["a"].reason == "tests fail"
    # And: the next attempt's brief tells what failed
    assert "Why: tests fail\n" in next_prompt(world, "a")


def test_a_round_lost_without_a_named_failure_fails_for_good_as_failed() -> None:
    # Given: a started, with one retry; When: two rounds end with no failure named
    world = World()
    world.start()
    for _ in range(2):
        outcome = world.attempt("a", AttemptState.FAILED)
        world.decide(Decision("a", None, "", ((outcome, "failed"),), detail="no winner"))
    # Then: both count, and the task failed for good with a reason that says only that
    assert world.state("a") is TaskState.FAILED and world.ledger.tasks["a"].failures == 2
    assert world.ledger.tasks["a"].reason == "failed: no winner"


def test_each_re_run_says_its_number_and_why_and_the_one_that_gives_up_is_counted() -> None:
    world = World()
    world.start()
    for _ in range(4):
        with world.ledger.tx() as tx:
            world.life.rerun(tx, "a", "the tip moved")
    reruns = [e for e in task_events(world, "a") if e["state"] == "ready" and "rerun" in e]
    assert reruns == [{"state": "ready", "rerun": k, "reason": "the tip moved"} for k in (1, 2, 3)]
    assert world.ledger.tasks["a"].reruns == 4


def test_a_rewind_re_runs_the_culprit_replays_later_merges_and_releases_dependents_in_turn() -> (
    None
):
    # Given: z, then a (the culprit to be), x and b (a's dependent) landed in that order;
    # c, which needs b and z, is running
    deps: dict[str, tuple[str, ...]] = {
        "z": (), "a": (), "x": (), "b": ("a",), "c": ("b", "z"), "d": ("a",),
    }  # fmt: skip
    world = World(deps=deps)
    world.start()
    for task_id in "zaxb":
        land(world, task_id)
    won(world, "d")  # d, which needs a too, waits to merge
    commits = {t: world.ledger.tasks[t].commit or "" for t in "axb"}
    assert world.state("c") is TaskState.READY
    culprit_attempt = world.store.attempts("r", "a")[-1].n
    # When: the regression check names a's merge and the run rewinds past it
    replay = tuple((commits[t], t) for t in "axb")
    plan = Rewind(Culprit(commits["a"], 1, "boom"), "a", replay, frozenset("bcd"))
    with world.ledger.tx() as tx:
        world.life.replay(tx, plan)
    # Then: a runs again, told why, and its merged attempt is marked as taken off the branch
    assert world.state("a") is TaskState.READY and world.ledger.tasks["a"].reruns == 1
    assert world.ledger.tasks["a"].reason == f"regression culprit (commit {commits['a'][:12]})"
    why = "Why: the regression check failed after this task was merged\n"
    assert why in next_prompt(world, "a")
    assert "boom" in next_prompt(world, "a")
    (undone,) = [r for r in world.store.attempts("r", "a") if r.n == culprit_attempt]
    assert (undone.state, undone.failure, undone.won) == (
        AttemptState.FAILED,
        Failure.VERIFY_FAILED,
        False,
    )
    assert undone.selection == "taken off the run branch: regression culprit"
    # And: x, independent of a, queues its merged patch again; z, merged before, stays done
    assert world.state("x") is TaskState.MERGING
    assert world.ledger.tasks["x"].reason == "replayed after rewind"
    assert [o.job.task_id for o in world.train.queue] == ["x"]
    assert world.state("z") is TaskState.DONE
    # And: b waits for a's re-run; c, running, and d, merging, are stopped and wait too
    assert world.state("b") is world.state("c") is world.state("d") is TaskState.PENDING
    assert world.ledger.tasks["b"].reason == "waits for a re-run"
    assert world.ledger.tasks["c"].reason == "waits for a re-run dependency"
    assert ("c", "a dependency was taken off the run branch") in world.cancelled
    ready = list(iter(lambda: world.rounds.ready.pop(lambda pool: True), None))
    assert Unit("a", 0) in ready and not [u for u in ready if u.task_id == "c"]  # c's is gone
    # When: x lands again (it is ahead in the queue), then a's re-run wins and lands
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged) and step.outcome.job.task_id == "x"
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    assert world.state("b") is TaskState.PENDING
    land(world, "a")
    # Then: b's merged patch is verified again on the new tip, and when it lands c starts
    assert world.state("b") is TaskState.MERGING
    assert world.ledger.tasks["b"].reason == "re-verifying its patch"
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged) and step.outcome.job.task_id == "b"
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    assert world.state("c") is TaskState.READY


# -- what the merge train reports, and what the task does about it -------------------------------


def merge_events(world: World) -> list[tuple[str | None, int | None, dict[str, object]]]:
    """Each merge event's task, attempt and data, in order."""
    return [(e.task_id, e.attempt, dict(e.data)) for e in world.store.events("r")
            if e.kind == "merge"]  # fmt: skip


def step(world: World, made: MergeStep, stopping: bool = False) -> None:
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, made, stopping)


def queued(world: World, task_id: str) -> Outcome:
    """The task's winner, taken off the train's queue as the train does when it acts on it."""
    winner = won(world, task_id)
    world.train.drop(task_id)
    return winner


def test_a_conflict_fails_the_winner_and_re_runs_its_task_from_the_new_tip() -> None:
    world = World()
    world.start()
    winner = queued(world, "a")
    step(world, Conflict(winner, ("x.py", "y.py")))
    assert merge_events(world) == [("a", 1, {"state": "conflict", "paths": ["x.py", "y.py"]})]
    (attempt,) = world.store.attempts("r", "a")
    assert (attempt.state, attempt.failure) == (AttemptState.FAILED, Failure.CONFLICT)
    assert attempt.detail == "conflict in x.py, y.py"
    assert world.state("a") is TaskState.READY and world.ledger.tasks["a"].reruns == 1
    assert world.ledger.tasks["a"].reason == "conflict in x.py, y.py"


def test_each_task_of_a_batch_verified_again_is_told_so_with_the_tip_and_the_batch_size() -> None:
    deps: dict[str, tuple[str, ...]] = {"a": (), "x": ()}
    world = World(deps=deps)
    world.start()
    first, second = queued(world, "a"), queued(world, "x")
    tip = "c" * 40
    job = merge_verify_job(second, Prepared(tip, "d" * 40), 1, tip)
    step(world, NeedsVerify(second, job, tip, (first, second)))
    step(world, NeedsVerify(first, job, tip))  # alone: the batch is the winner itself
    told = {"state": "verifying", "tip": "c" * 12, "job": job.id}
    assert merge_events(world) == [
        ("a", 1, {**told, "batch": 2}),
        ("x", 1, {**told, "batch": 2}),
        ("a", 1, {**told, "batch": 1}),
    ]


def test_a_merged_tree_that_fails_verify_re_runs_its_task_told_why_unless_the_run_stops() -> None:
    deps: dict[str, tuple[str, ...]] = {"a": (), "x": ()}
    world = World(deps=deps)
    world.start()
    winners = {t: queued(world, t) for t in ("a", "x")}
    said = {"state": AttemptState.FAILED, "detail": "2 tests fail", "feedback": "E assert 1 == 2"}
    failed = {t: replace(w, **said) for t, w in winners.items()}
    # When: the run stops as x's merged tree fails, it stays merging (a resume retries it)
    step(world, VerifyFailed(winners["x"], failed["x"]), stopping=True)
    assert world.state("x") is TaskState.MERGING
    # When: a's merged tree fails while the run goes on, it runs again, told why
    step(world, VerifyFailed(winners["a"], failed["a"]))
    assert merge_events(world) == [
        ("x", 1, {"state": "failed", "detail": "2 tests fail"}),
        ("a", 1, {"state": "failed", "detail": "2 tests fail"}),
    ]
    assert world.state("a") is TaskState.READY and world.ledger.tasks["a"].reruns == 1
    assert world.ledger.tasks["a"].reason == "merged tree failed verify: 2 tests fail"
    prompt = next_prompt(world, "a")
    assert "Why: after merging with the moved run branch: 2 tests fail\n" in prompt
    assert "E assert 1 == 2" in prompt


def test_a_branch_that_cannot_move_re_runs_the_task_and_a_moved_or_bisected_one_is_recorded() -> (
    None
):
    world = World()
    world.start()
    winner = queued(world, "a")
    step(world, BranchMoved(winner, "e" * 40, restored=True))
    step(world, Bisected(winner, replace(winner, detail="batch failed"), (2, 1)))
    assert world.state("a") is TaskState.MERGING  # both leave the winner queued
    step(world, MoveFailed(winner))
    assert merge_events(world) == [
        ("a", 1, {"state": "branch_moved", "found": "e" * 40, "restored": True}),
        ("a", 1, {"state": "bisecting", "detail": "batch failed", "sizes": [2, 1]}),
        ("a", 1, {"state": "failed", "reason": "could not move the run branch"}),
    ]
    assert world.state("a") is TaskState.READY
    assert world.ledger.tasks["a"].reason == "could not move the run branch"


def test_a_task_that_lands_after_a_failed_round_is_done_with_its_commit_and_no_reason() -> None:
    world = World()
    world.start()
    world.decide(lost(world.attempt("a", AttemptState.FAILED)))
    commit = land(world, "a")
    assert merge_events(world) == [("a", 2, {"state": "merged", "commit": commit})]
    assert world.state("a") is TaskState.DONE and world.ledger.tasks["a"].reason == ""
    assert task_events(world, "a")[-1] == {"state": "done", "commit": commit}


def test_a_winner_awaiting_review_says_who_made_it_and_which_commands_verified_it() -> None:
    world = World(review=Review.HUMAN)
    world.start()
    outcome = world.attempt("a", AttemptState.PASSED, verify=("make test",))
    world.decide(Decision("a", outcome, "only passing candidate", ((outcome, "won"),)))
    (requested,) = [e for e in world.store.events("r") if e.kind == "review"]
    assert (requested.task_id, requested.attempt) == ("a", 1)
    said = {"agent": "bot", "title": "a's title", "verdict": "", "commands": ["make test"]}
    assert dict(requested.data) == {"state": "review_requested", **said}


def test_a_decision_acted_on_says_what_was_decided_and_by_whom() -> None:
    world = World(review=Review.HUMAN)
    world.start()
    won(world, "a")
    world.apply(world.review("a", 1, ReviewDecision(Verdict.APPROVE, "LGTM", who="ann")))
    applied = [e for e in world.store.events("r") if e.kind == "review"][-1]
    assert (applied.task_id, applied.attempt) == ("a", 1)
    assert dict(applied.data) == {"state": "applied", "verdict": "approve", "who": "ann"}
    assert world.ledger.tasks["a"].reason == "approved by ann: LGTM"
    assert world.gate.awaiting == {}


def test_a_rejection_without_a_word_says_only_who_rejected() -> None:
    world = World(review=Review.HUMAN)
    world.start()
    won(world, "a")
    world.apply(world.review("a", 1, ReviewDecision(Verdict.REJECT, who="ann")))
    assert world.ledger.tasks["a"].reason == "rejected by ann"
    assert world.gate.awaiting == {}


def test_a_change_request_marks_the_reviewed_winner_lost_and_an_approval_ends_the_request() -> None:
    # Given: a reviewed task of two candidates (beside another, which ran too); changes are
    # asked of its winner
    world = World(review=Review.HUMAN, candidates=2, deps={"a": (), "x": ()})
    world.start()
    world.attempt("x", AttemptState.FAILED)
    won(world, "a")
    world.apply(world.review("a", 1, ReviewDecision(Verdict.CHANGES, "Use three.", who="ann")))
    (reviewed,) = world.store.attempts("r", "a")
    assert (reviewed.won, reviewed.selection) == (False, "changes requested by ann")
    assert world.ledger.tasks["a"].reason == "changes requested by ann"
    # When: the new winner is approved, then its merge conflicts
    second = won(world, "a")
    world.apply(world.review("a", 2, ReviewDecision(Verdict.APPROVE, who="ann")))
    assert world.ledger.tasks["a"].reason == "approved by ann"
    world.train.drop("a")
    list(iter(lambda: world.rounds.ready.pop(lambda pool: True), None))  # the earlier rounds'
    step(world, Conflict(second, ("x.py",)))
    # Then: its re-run is a round of all its candidates again, the request done with
    ready = list(iter(lambda: world.rounds.ready.pop(lambda pool: True), None))
    assert ready == [Unit("a", 0), Unit("a", 1)]


# -- rounds decided, runs restored --------------------------------------------------------------


def test_a_decided_round_records_each_candidates_selection_and_the_winners_event() -> None:
    world = World(candidates=2)
    world.start()
    lost_one = world.attempt("a", AttemptState.FAILED)
    winner = world.attempt("a", AttemptState.PASSED, candidate=1)
    picks = ((lost_one, "lost: tests fail"), (winner, "won: smallest"))
    world.decide(Decision("a", winner, "the smallest patch", picks))
    attempts = {r.n: (r.won, r.selection) for r in world.store.attempts("r", "a")}
    assert attempts == {1: (False, "lost: tests fail"), 2: (True, "won: smallest")}
    (round_won,) = [e for e in world.store.events("r") if e.kind == "round"]
    assert (round_won.task_id, round_won.attempt) == ("a", 2)
    assert dict(round_won.data) == {"state": "won", "candidate": 1, "reason": "the smallest patch"}


def test_a_final_decision_fails_the_task_at_once_whatever_retries_are_left() -> None:
    world = World()  # a has one retry
    world.start()
    outcome = world.attempt("a", AttemptState.FAILED)
    picks = ((outcome, "failed"),)
    final = Decision("a", None, "", picks, Failure.VERIFY_FAILED, "passes on the base", final=True)
    world.decide(final)
    assert world.state("a") is TaskState.FAILED and world.retries == []


def test_a_resumed_run_requeues_merging_winners_restarts_the_rest_and_keeps_what_ended() -> None:
    # Given: z landed; a landed and was sent back to verify its patch again (b, its dependent,
    # had started); m won and waits to merge, c waits for it; q's winner conflicted; k was
    # cancelled
    deps: dict[str, tuple[str, ...]] = {
        "z": (), "a": (), "b": ("a",), "m": (), "c": ("m",), "k": (), "q": (),
    }  # fmt: skip
    world = World(deps=deps)
    world.start()
    land(world, "z")
    land(world, "a")
    with world.ledger.tx() as tx:
        world.life.rerun(tx, "a", "the tip moved")
        tx.state("k", TaskState.CANCELLED)
    won(world, "m")
    step(world, Conflict(queued(world, "q"), ("x.py",)))
    assert world.state("a") is TaskState.MERGING and world.state("b") is TaskState.READY
    winners = {t: world.store.attempts("r", t)[-1] for t in ("a", "m", "q")}
    # When: the run resumes (the train forgot its queue, the rounds their ready candidates)
    world.train.halt()
    list(iter(lambda: world.rounds.ready.pop(lambda pool: True), None))
    world.life.count_waiting(lambda task_id: world.state(task_id) is TaskState.DONE)
    with world.ledger.tx() as tx:
        world.life.restore(tx, winners)
    # Then: the merging winners queue again; q and the cancelled k start rounds; b and c wait
    assert sorted(o.job.task_id for o in world.train.queue) == ["a", "m"]
    ready = list(iter(lambda: world.rounds.ready.pop(lambda pool: True), None))
    assert sorted(u.task_id for u in ready) == ["k", "q"]
    assert {t: world.state(t) for t in "zbck"} == {
        "z": TaskState.DONE,
        "b": TaskState.PENDING,
        "c": TaskState.PENDING,
        "k": TaskState.READY,
    }


# -- a fix pipeline's shot ------------------------------------------------------------------------


def test_a_shot_that_fails_verify_escalates_to_the_debug_stages_with_its_output() -> None:
    # Given: a fix pipeline, its single shot started (a shot has no retries)
    world = World(deps={"bug": ()}, fixes=frozenset({"bug"}))
    world.start()
    assert world.state("bug.shot") is TaskState.READY
    # When: its round fails verification
    outcome = world.attempt("bug.shot", AttemptState.FAILED)
    world.decide(Decision("bug.shot", None, "", ((outcome, "failed"),), Failure.VERIFY_FAILED,
                          "tests fail", feedback="E assert 1 == 2"))  # fmt: skip
    # Then: the shot is skipped, counted, and the debug stages start with its output
    shot = world.ledger.tasks["bug.shot"]
    assert (shot.state, shot.failures) == (TaskState.SKIPPED, 1)
    assert shot.reason == "escalated to the debug pipeline: verify_failed: tests fail"
    (escalated,) = [e for e in world.store.events("r") if e.kind == "escalation"]
    assert (escalated.task_id, escalated.attempt) == ("bug", None)
    assert dict(escalated.data) == {"state": "escalated", "to": "debug", "shot": "bug.shot",
                                    "detail": "verify_failed: tests fail",
                                    "output": "E assert 1 == 2"}  # fmt: skip
    assert world.state("bug.reproduce") is TaskState.READY
    assert world.state("bug") is TaskState.PENDING


def test_a_shot_whose_agent_crashed_fails_as_any_task_and_blocks_the_pipeline() -> None:
    world = World(deps={"bug": ()}, fixes=frozenset({"bug"}))
    world.start()
    outcome = world.attempt("bug.shot", AttemptState.FAILED)
    world.decide(Decision("bug.shot", None, "", ((outcome, "failed"),), Failure.AGENT_ERROR,
                          "exit 1"))  # fmt: skip
    assert world.state("bug.shot") is TaskState.FAILED
    assert world.ledger.tasks["bug.shot"].reason == "agent_error: exit 1"
    assert world.state("bug.reproduce") is world.state("bug") is TaskState.BLOCKED


def test_a_shot_that_lands_skips_the_debug_stages_and_its_task_done_releases_dependents() -> None:
    world = World(deps={"bug": (), "after": ("bug",)}, fixes=frozenset({"bug"}))
    world.start()
    commit = land(world, "bug.shot")
    skipped = [world.ledger.tasks[f"bug.{s}"] for s in ("reproduce", "audit", "localize")]
    assert [(r.state, r.reason) for r in skipped] == [
        (TaskState.SKIPPED, "the single shot landed")
    ] * 3
    assert world.state("bug") is TaskState.DONE
    assert (
        world.ledger.tasks["bug"].reason
        == f"landed by its single shot (bug.shot, commit {commit[:12]})"
    )
    assert world.state("after") is TaskState.READY


def test_a_culprit_that_fails_for_good_blocks_its_replayed_dependent_and_drops_its_patch() -> None:
    # Given: a and b (which needs a) landed; a rewind past a parks b's patch for a replay
    world = World()
    world.start()
    commits = {t: land(world, t) for t in "ab"}
    replay = tuple((commits[t], t) for t in "ab")
    with world.ledger.tx() as tx:
        world.life.replay(
            tx, Rewind(Culprit(commits["a"], 1, "boom"), "a", replay, frozenset("bc"))
        )
    assert "b" in world.train.parked
    # When: a's re-runs give up
    for _ in range(3):
        with world.ledger.tx() as tx:
            world.life.rerun(tx, "a", "regression culprit")
    # Then: b and c are blocked, and b's patch waits for no replay
    assert world.state("a") is TaskState.FAILED
    assert world.state("b") is world.state("c") is TaskState.BLOCKED
    assert "b" not in world.train.parked


def test_a_rewind_past_its_dependency_withdraws_a_winner_awaiting_review() -> None:
    # Given: reviewed tasks; a was approved and landed, b's winner waits for a person
    world = World(review=Review.HUMAN)
    world.start()
    won(world, "a")
    world.apply(world.review("a", 1, ReviewDecision(Verdict.APPROVE, who="ann")))
    step = world.train.next(lambda task_id: True)
    assert isinstance(step, Merged) and step.commit is not None
    with world.ledger.tx() as tx:
        world.life.merge_step(tx, step, stopping=False)
    won(world, "b")
    assert world.state("b") is TaskState.AWAITING_REVIEW and list(world.gate.awaiting) == ["b"]
    # When: a's merge is taken off the branch
    culprit = Rewind(Culprit(step.commit, 1, "boom"), "a", ((step.commit, "a"),), frozenset("bc"))
    with world.ledger.tx() as tx:
        world.life.replay(tx, culprit)
    # Then: b waits for a again, and no longer for a person: its patch was made on what went
    assert world.state("b") is TaskState.PENDING and world.gate.awaiting == {}
