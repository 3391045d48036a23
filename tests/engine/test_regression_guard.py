"""The regression guard alone: when the run branch is checked, how a failure is bisected to its
merge, and the rewind plan past it. Jobs are not run: the test reports their outcomes."""

from __future__ import annotations

from orchardist.engine.integrators import MemoryIntegrator
from orchardist.engine.regression import Culprit, RegressionGuard, plan_rewind
from orchardist.executors import Job, Outcome, VerifyJob
from orchardist.specs import RunConfig
from orchardist.state.agentrecords import Failure
from orchardist.state.records import AttemptState

BASE = "b" * 40


def guard_on(integrator: MemoryIntegrator, every: int = 1) -> RegressionGuard:
    settings = RunConfig(regression=("pytest -q",), regression_every=every)
    return RegressionGuard(settings, "r", BASE, 60.0, integrator)


def merges(integrator: MemoryIntegrator, n: int) -> list[str]:
    """``n`` commits landed on the branch, oldest first."""
    for k in range(n):
        prepared = integrator.prepare(BASE, BASE, f"task {k}", integrator.tip())
        assert integrator.advance(prepared)
    return integrator.first_parent_commits(BASE, integrator.tip())


def report(job: Job, passed: bool, failure: Failure | None = None) -> Outcome:
    state = AttemptState.PASSED if passed else AttemptState.FAILED
    return Outcome(job, state, 0.0, 1.0, failure=failure, detail="d", feedback=f"out {job.id}")


def test_the_check_is_due_every_n_merges_or_at_the_end() -> None:
    integrator = MemoryIntegrator(BASE)
    guard = guard_on(integrator, every=2)
    assert guard.check(BASE, final=True) is None  # nothing merged yet
    guard.merged()
    assert guard.check(BASE) is None
    job = guard.check(BASE, final=True)
    assert isinstance(job, VerifyJob) and job.purpose == "regression" and job.baseline == BASE
    assert guard.check(BASE, final=True) is None  # one at a time


def test_a_passing_check_makes_its_commit_the_last_green_one() -> None:
    integrator = MemoryIntegrator(BASE)
    (tip,) = merges(integrator, 1)
    guard = guard_on(integrator)
    guard.resumed(1)
    job = guard.check(tip)
    assert job is not None
    step = guard.ended(report(job, True), stopping=False)
    assert step is not None and step.checked is not None and step.checked.passed
    assert guard.last_green == tip and guard.unchecked == 0 and guard.in_flight is None


def test_a_failing_check_bisects_to_the_first_bad_merge() -> None:
    # Given: eight merges; the check fails from the sixth on
    integrator = MemoryIntegrator(BASE)
    commits = merges(integrator, 8)
    bad = set(commits[5:])
    guard = guard_on(integrator)
    guard.unchecked = 8
    job = guard.check(commits[-1])
    assert job is not None
    # When: each probe reports as the commit it ran on is
    step = guard.ended(report(job, False), stopping=False)
    assert step is not None and step.checked is not None and not step.checked.passed
    probes = 0
    while step is not None and step.probe is not None:
        probes += 1
        step = guard.ended(report(step.probe, step.probe.base_commit not in bad), stopping=False)
    # Then: the culprit is the sixth merge, found in about log2(9) probes
    assert step is not None and step.culprit is not None
    assert step.culprit.commit == commits[5] and step.culprit.probes == probes <= 4
    assert guard.in_flight is None


def test_a_check_that_fails_on_the_base_switches_the_guard_off() -> None:
    integrator = MemoryIntegrator(BASE)
    (tip,) = merges(integrator, 1)
    guard = guard_on(integrator)
    guard.resumed(1)
    job = guard.check(tip)
    assert job is not None
    step = guard.ended(report(job, False), stopping=False)
    assert step is not None and step.probe is not None and step.probe.base_commit == BASE
    step = guard.ended(report(step.probe, False), stopping=False)
    assert step is not None and step.off == "the regression command already fails on the run's base"
    assert guard.off and guard.check(tip, final=True) is None


def test_a_check_that_cannot_run_twice_switches_the_guard_off() -> None:
    integrator = MemoryIntegrator(BASE)
    guard = guard_on(integrator)
    for expected_off in (None, "the regression check could not run"):
        guard.resumed(1)
        job = guard.check(BASE)
        assert job is not None
        step = guard.ended(report(job, False, Failure.INFRA_ERROR), stopping=False)
        assert step is not None and step.not_run == "d" and step.off == expected_off


def test_a_check_cancelled_by_a_stop_says_nothing() -> None:
    integrator = MemoryIntegrator(BASE)
    guard = guard_on(integrator)
    guard.resumed(1)
    job = guard.check(BASE)
    assert job is not None
    assert guard.ended(report(job, False), stopping=True) is None and guard.in_flight is None


def test_a_rewind_replays_the_merges_after_the_culprit_in_branch_order() -> None:
    culprit = Culprit("c2", probes=2, output="boom")
    commits = {"a": "c1", "b": "c2", "c": "c4", "d": "c3", "e": None}
    dependents = {"b": ["c"]}
    plan = plan_rewind(culprit, ["c3", "c4"], commits, lambda t: dependents.get(t, []))
    assert plan.task_id == "b"
    assert plan.replay == (("c2", "b"), ("c3", "d"), ("c4", "c"))
    assert plan.affected == {"c"}


def test_a_culprit_that_is_no_tasks_merge_has_no_task_to_rerun() -> None:
    plan = plan_rewind(Culprit("x", 1, ""), ["c1"], {"a": "c1"}, lambda task_id: ())
    assert plan.task_id is None and plan.replay == (("c1", "a"),) and not plan.affected
