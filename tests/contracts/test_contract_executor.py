"""The Executor seam's contract, run against every executor: the local one and the inline fake
here, the Ray executor on a real local cluster in test_contract_executor_ray.py (slow).

Each implementation comes with a harness that knows how to let time pass for it: the local
executor's jobs are real processes (the test waits for their outcome, never on a deadline under
10 s), the inline executor's jobs take time on a fake clock the test moves.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

from orchardist import RunState, Workspace, create_run, execute, load_plan
from orchardist.clocks import FakeClock
from orchardist.confine.procs import new_marker
from orchardist.errors import PlanError
from orchardist.executors import (
    EXECUTORS,
    AttemptJob,
    Executor,
    Job,
    Outcome,
    Phase,
    executor_class,
)
from orchardist.executors.inline import InlineExecutor
from orchardist.executors.local import LocalExecutor
from orchardist.git.repo import Repo
from orchardist.specs import RunConfig
from orchardist.state.agentrecords import AgentProfile
from orchardist.state.records import AttemptState
from orchardist.state.store import Store
from support import make_repo, write_plan

WAIT_S = 60.0  # generous: the machine may be busy; nothing waits this long when all is well


@dataclass
class Heard:
    """What an executor reported, per job, in order."""

    messages: dict[str, list[Phase | Outcome]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: dict[str, threading.Event] = field(default_factory=dict)

    def expect(self, job_id: str) -> None:
        self.done[job_id] = threading.Event()

    def __call__(self, message: Phase | Outcome) -> None:
        with self.lock:
            self.messages.setdefault(message.job.id, []).append(message)
        if isinstance(message, Outcome):
            self.done[message.job.id].set()

    def outcomes(self, job_id: str) -> list[Outcome]:
        with self.lock:
            return [m for m in self.messages.get(job_id, []) if isinstance(m, Outcome)]


class Harness(Protocol):
    executor: Executor

    def job(self, task_id: str, work: str, *, quick: bool = True) -> Job:
        """A job whose agent changes a file; ``quick=False``: one that runs until cancelled."""
        ...

    def started(self, job: Job) -> None:
        """Return once the job's agent is under way (so that a cancel interrupts it)."""
        ...

    def finish(self, heard: Heard, job_id: str) -> None:
        """Let time pass until the job has reported its outcome."""
        ...


def _job(task_id: str, base: str, profile: AgentProfile, timeout_s: float = 120.0) -> Job:
    return AttemptJob(
        id=f"{task_id}.1",
        run_id="run1",
        task_id=task_id,
        attempt=1,
        candidate=0,
        base_commit=base,
        title=task_id,
        prompt=f"do {task_id}",
        profile=profile,
        verify=("test -f done.txt",),
        workdir=".",
        timeout_s=timeout_s,
        message=f"{task_id}\n",
        marker=new_marker(),
    )


class LocalHarness:
    """Real processes in a real repository, sandbox as the machine allows."""

    def __init__(self, tmp_path: Path) -> None:
        root = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
        self.repo = Repo(root)
        self.base = self.repo.rev_parse("HEAD")
        self.store = Store.in_memory()
        self.fifo = tmp_path / "started"
        os.mkfifo(self.fifo)
        # Unconfined, so that the agent can reach the FIFO outside its worktree.
        self.executor = LocalExecutor(
            self.repo, tmp_path / "state", store=self.store, guard_checkout=False, sandbox=False
        )

    def job(self, task_id: str, work: str, *, quick: bool = True) -> Job:
        command = f"echo {work} > done.txt"
        if not quick:  # says it started, then waits to be stopped
            command = f"echo started > {self.fifo} && exec sleep 600"
        profile = AgentProfile("sh", "shell", options={"command": command})
        return _job(task_id, self.base, profile)

    def started(self, job: Job) -> None:
        # The agent's first act is to write into a FIFO the test listens on (no polling).
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            readable, _, _ = select.select([fd], [], [], WAIT_S)
            assert readable, "the agent never started"
        finally:
            os.close(fd)

    def finish(self, heard: Heard, job_id: str) -> None:
        assert heard.done[job_id].wait(WAIT_S), f"{job_id} never reported"

    def close(self) -> None:
        self.executor.close()
        self.store.close()


class InlineHarness:
    """Jobs that take 5 s of fake time; the clock moves only when the harness says."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock(1000.0)
        self.executor = InlineExecutor(self.clock, {"slow": 3600.0}, failures={})
        self.base = "0" * 40
        for task in ("a", "b", "c"):
            self.executor.durations_s[task] = 5.0

    def job(self, task_id: str, work: str, *, quick: bool = True) -> Job:
        task = task_id if quick else "slow"
        return _job(task, self.base, AgentProfile("fake", "shell"))

    def started(self, job: Job) -> None:
        assert job.id in self.executor.running()

    def finish(self, heard: Heard, job_id: str) -> None:
        self.clock.advance(10.0)
        assert heard.done[job_id].is_set(), f"{job_id} never reported"

    def close(self) -> None:
        self.executor.close()


@pytest.fixture(params=["local", "inline"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """The local and the inline executor; the Ray executor's harness is in
    test_contract_executor_ray.py (it needs a cluster, and is slow)."""
    made = LocalHarness(tmp_path) if request.param == "local" else InlineHarness(tmp_path)
    try:
        yield made
    finally:
        made.close()


class ExecutorContract:
    """What every executor does; a subclass named ``Test...`` runs it, given a ``harness``."""

    def test_a_job_reports_verifying_then_one_passed_outcome(self, harness: Harness) -> None:
        # Given: a job whose agent writes the file its verify command looks for
        heard = Heard()
        job = harness.job("a", "first")
        heard.expect(job.id)
        # When: it is submitted and time passes
        harness.executor.submit(job, heard)
        harness.finish(heard, job.id)
        # Then: it entered verification, then ended once, passed, with a patch and times in order
        messages = heard.messages[job.id]
        assert [type(m).__name__ for m in messages] == ["Phase", "Outcome"]
        phase, outcome = messages
        assert isinstance(phase, Phase) and phase.phase == "verifying"
        assert isinstance(outcome, Outcome) and outcome.job == job
        assert outcome.state is AttemptState.PASSED, outcome.detail
        assert outcome.failure is None and outcome.patch_commit is not None
        assert outcome.started_at <= outcome.ended_at

    def test_jobs_run_side_by_side_and_each_reports_its_own_outcome(self, harness: Harness) -> None:
        # Given: three jobs submitted together
        heard = Heard()
        jobs = [harness.job(task, task) for task in ("a", "b", "c")]
        for job in jobs:
            heard.expect(job.id)
            harness.executor.submit(job, heard)
        # When: time passes
        for job in jobs:
            harness.finish(heard, job.id)
        # Then: every job reported exactly one outcome, its own
        for job in jobs:
            outcomes = heard.outcomes(job.id)
            assert len(outcomes) == 1 and outcomes[0].job is job
            assert outcomes[0].state is AttemptState.PASSED, outcomes[0].detail

    def test_a_cancelled_job_reports_cancelled_once_and_no_pass(self, harness: Harness) -> None:
        # Given: a job that would run for a long time, under way
        heard = Heard()
        job = harness.job("slow", "never", quick=False)
        heard.expect(job.id)
        harness.executor.submit(job, heard)
        harness.started(job)
        # When: it is cancelled
        harness.executor.cancel(job.id, "no longer needed")
        harness.finish(heard, job.id)
        harness.executor.close()
        # Then: it reported one outcome, cancelled, and nothing after it
        outcomes = heard.outcomes(job.id)
        assert [o.state for o in outcomes] == [AttemptState.CANCELLED]
        assert isinstance(heard.messages[job.id][-1], Outcome)

    def test_cancelling_an_unknown_job_is_ignored(self, harness: Harness) -> None:
        # Given: nothing submitted; When: a job id nobody knows is cancelled; Then: no error
        harness.executor.cancel("nobody.1", "why not")

    def test_close_waits_until_every_submitted_job_has_reported(self, harness: Harness) -> None:
        # Given: two jobs submitted
        heard = Heard()
        jobs = [harness.job(task, task) for task in ("a", "b")]
        for job in jobs:
            heard.expect(job.id)
            harness.executor.submit(job, heard)
        # When: the executor is closed
        harness.executor.close()
        # Then: both had reported by the time close returned
        assert all(len(heard.outcomes(job.id)) == 1 for job in jobs)


class TestLocalAndInline(ExecutorContract):
    """The contract on the local executor and the inline fake (the ``harness`` fixture above)."""


# -- the executor table ----------------------------------------------------------------------


# "ray" connects to a cluster as it is built: tests/executors/test_ray.py builds it on one.
@pytest.mark.parametrize("name", sorted(set(EXECUTORS) - {"ray"}))
def test_every_executor_in_the_table_builds_from_a_runs_settings(name: str, tmp_path: Path) -> None:
    # Given: a repository and default [run] settings
    repo = Repo(make_repo(tmp_path / "repo", {"README.md": "hello\n"}))
    store = Store.in_memory()
    # When: the executor is built by its name
    executor = executor_class(name).for_run(repo, tmp_path / "state", store, RunConfig(), time.time)
    # Then: it is an executor, and closes with nothing submitted
    assert callable(executor.submit) and callable(executor.cancel)
    executor.close()
    store.close()


def test_an_unknown_executor_name_lists_the_known_ones() -> None:
    with pytest.raises(Exception, match=r"unknown executor 'cluster'; known executors: local, ray"):
        executor_class("cluster")


def test_a_plan_naming_an_unknown_executor_gets_a_located_problem(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    text = '[run]\nexecutor = "cluster"\n\n[agents.sh]\ncommand = "true"\n\n'
    plan = write_plan(repo, text + '[[task]]\nid = "a"\nprompt = "p"\nagent = "sh"\n')
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    assert [(p.field, p.message) for p in caught.value.problems] == [
        ("run.executor", 'unknown executor \'cluster\'; known executors: "local", "ray"')
    ]


def test_a_run_uses_the_executor_its_plan_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: the inline executor entered in the table, and a plan that asks for it, whose
    # agent would fail if it ever ran
    monkeypatch.setitem(EXECUTORS, "inline", "orchardist.executors.inline:InlineExecutor")
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    plan_path = write_plan(
        repo,
        '[run]\nexecutor = "inline"\nverify = "false"\n\n[agents.broken]\nkind = "shell"\n'
        'command = "exit 9"\n\n[[task]]\nid = "a"\nprompt = "p"\nagent = "broken"\n\n'
        '[[task]]\nid = "b"\nprompt = "p"\nagent = "broken"\ndepends_on = ["a"]\n',
    )
    plan = load_plan(plan_path)
    ws = Workspace.open(repo)
    run = create_run(ws, plan)
    # When: the run is executed without an executor given
    state = execute(ws, plan, run)
    # Then: the inline executor ran it (every attempt passes, no process ran), in order
    assert state is RunState.DONE
    attempts = ws.store.attempts(run.id)
    assert [(a.task_id, a.detail) for a in attempts] == [
        ("a", "inline: took its duration"),
        ("b", "inline: took its duration"),
    ]
    ws.store.close()
