"""Choosing the Ray executor on the command line and in the plan, and what the executor sends
where (no cluster needed)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from orchardist.cli import main
from orchardist.executors import AttemptJob, VerifyJob, executor_class
from orchardist.plan.loading import load_plan
from support import write_plan

PLAN = """\
[run]
{run}
[agents.sh]
kind = "shell"
command = "true"
[[task]]
id = "one"
title = "One"
prompt = "p"
agent = "sh"
"""


def test_ray_address_without_the_ray_executor_is_a_usage_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(repo, PLAN.format(run=""), commit=True)

    code = main(["run", str(plan), "--ray-address", "127.0.0.1:1"])

    assert code == 2
    assert "--ray-address needs the ray executor" in capsys.readouterr().err


def test_an_unknown_executor_on_the_command_line_names_the_known_ones(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(repo, PLAN.format(run=""), commit=True)

    with pytest.raises(SystemExit) as exit_:
        main(["run", str(plan), "--executor", "cluster"])

    assert exit_.value.code == 2
    assert "'local', 'ray'" in capsys.readouterr().err


def test_the_plan_names_the_ray_executor_and_its_cluster(repo: Path) -> None:
    plan = write_plan(
        repo, PLAN.format(run='executor = "ray"\nray_address = " 10.0.0.5:6379 "'), commit=True
    )

    settings = load_plan(plan).run

    assert (settings.executor, settings.ray_address) == ("ray", "10.0.0.5:6379")
    assert executor_class("ray").__name__ == "RayExecutor"  # type: ignore[attr-defined]


def test_an_empty_ray_address_in_the_plan_is_a_located_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(repo, PLAN.format(run='ray_address = " "'), commit=True)

    code = main(["validate", str(plan)])

    assert code == 2
    assert "run.ray_address" in capsys.readouterr().err


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on every address of this machine that refuses connections (bound, not listening)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        yield int(sock.getsockname()[1])


def test_an_unreachable_ray_address_fails_the_run_fast_and_makes_no_run(
    repo: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a plan for the ray executor, and an address where nothing listens
    pytest.importorskip("ray")
    plan = write_plan(repo, PLAN.format(run='executor = "ray"'), commit=True)
    address = f"127.0.0.1:{closed_port}"

    # When it is run there
    code = main(["run", str(plan), "--ray-address", address])

    # Then it is a usage error naming the address, and no run was made
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Ray cluster at '{address}'" in err
    assert "refused" in err
    assert not (repo / ".git" / "orchardist").exists()


def test_doctor_gives_up_on_an_address_where_no_ray_cluster_answers(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an address that accepts connections and never answers (Ray's own connect would
    # retry it for many minutes)
    pytest.importorskip("ray")
    from orchardist.executors import rayconnect

    monkeypatch.setattr(rayconnect, "CONNECT_TIMEOUT_S", 2.0)  # nothing ever answers there
    plan = write_plan(repo, PLAN.format(run=""), commit=True)
    with socket.socket() as silent:
        silent.bind(("0.0.0.0", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"

        # When doctor checks the cluster there
        code = main(["doctor", str(plan), "--executor", "ray", "--ray-address", address])

    # Then it is a usage error naming the address and saying nothing answered, and no thread
    # of the check stays behind in Ray's client (which would block there for tens of seconds)
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Ray cluster at '{address}'" in err
    assert "no Ray cluster answered" in err
    assert [t.name for t in threading.enumerate() if t.name == "ray-probe"] == []


def test_a_profile_asks_the_cluster_for_cpus_and_memory(repo: Path) -> None:
    # Given a profile asking two CPUs and 512 MiB per attempt
    plan = write_plan(
        repo,
        PLAN.format(run="").replace(
            'command = "true"', 'command = "true"\nnum_cpus = 2\nmemory_mb = 512'
        ),
        commit=True,
    )

    # When the plan is read, then the profile holds both (1 CPU and no memory by default)
    profile = load_plan(plan).agents["sh"]
    assert (profile.num_cpus, profile.memory_mb) == (2.0, 512.0)
    default = load_plan(write_plan(repo, PLAN.format(run=""), commit=True)).agents["sh"]
    assert (default.num_cpus, default.memory_mb) == (1.0, None)


def test_cpus_and_memory_that_are_not_positive_numbers_are_located_errors(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(
        repo,
        PLAN.format(run="").replace(
            'command = "true"', 'command = "true"\nnum_cpus = 0\nmemory_mb = "lots"'
        ),
        commit=True,
    )

    code = main(["validate", str(plan)])

    assert code == 2
    err = capsys.readouterr().err
    assert "agents.sh.num_cpus" in err
    assert "agents.sh.memory_mb" in err


def test_the_schema_documents_cpus_and_memory_per_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    out = capsys.readouterr().out
    assert '"num_cpus"' in out
    assert '"memory_mb"' in out


def test_only_a_job_that_may_ask_a_baseline_needs_the_runs_baseline_board() -> None:
    # Given an attempt verified by pytest, with a base to judge its failures against
    from orchardist.executors.ray import may_ask_baselines

    base = "b" * 40
    job = AttemptJob(
        id="t.1",
        run_id="r",
        task_id="t",
        attempt=1,
        candidate=0,
        base_commit=base,
        title="t",
        prompt="p",
        profile=None,
        verify=("python -m pytest -q",),
        workdir=".",
        timeout_s=60.0,
        message="t\n",
        marker="m",
        baseline=base,
    )

    # Then it may ask a baseline, as may one with only a check or found tests to run
    assert may_ask_baselines(job)
    assert may_ask_baselines(replace(job, verify=(), check="python repro.py", check_baseline=base))
    assert may_ask_baselines(replace(job, verify=(), auto_verify=True))

    # And without commands, with commands that run no pytest (a failure fails whatever the
    # base did), or without a base commit, it cannot: no board is started for it
    assert not may_ask_baselines(replace(job, verify=()))
    assert not may_ask_baselines(replace(job, verify=("test -f done.txt", "make lint")))
    assert not may_ask_baselines(replace(job, baseline=None))
    merge = VerifyJob(
        purpose="merge",
        id="m.1",
        run_id="r",
        task_id="t",
        attempt=1,
        candidate=0,
        base_commit=base,
        verify=("python -m pytest -q",),
        workdir=".",
        timeout_s=60.0,
        marker="m",
    )
    assert not may_ask_baselines(merge)
    assert may_ask_baselines(replace(merge, baseline=base))


def test_kills_go_only_to_the_live_nodes_that_may_run_a_job() -> None:
    # Given a head without CPUs, a worker node, and a worker node Ray lists as dead
    from orchardist.executors.ray import job_nodes

    nodes = [
        {"NodeID": "head", "Alive": True, "Resources": {"memory": 1e9, "object_store_memory": 1e8}},
        {"NodeID": "one", "Alive": True, "Resources": {"CPU": 2.0, "memory": 1e9}},
        {"NodeID": "gone", "Alive": False, "Resources": {"CPU": 2.0}},
    ]

    # Then only the live node with CPUs is sent a kill (a task on the head would start a
    # Python worker there for nothing)
    assert [node["NodeID"] for node in job_nodes(nodes)] == ["one"]
