"""Choosing the Ray executor on the command line and in the plan (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.cli import main
from orchardist.executors import executor_class
from orchardist.plan import load_plan
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
