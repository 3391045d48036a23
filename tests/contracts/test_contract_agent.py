"""The Agent seam's contract: every kind in the table declares itself alike; the kinds that need
no outside tool (the shell agent and the scripted fake) also run the same attempts alike."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from orchardist.agents import KINDS, Agent, agent_class, make_agent
from orchardist.agents.context import AgentContext
from orchardist.confine.procs import CancelToken, new_marker
from orchardist.confine.scrubbed import scrubbed_env
from orchardist.plan.loading import PROFILE_KEYS
from orchardist.state.agentrecords import AgentProfile, Failure


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_declares_its_name_keys_and_environment(kind: str) -> None:
    cls = agent_class(kind)
    assert cls.kind == kind
    assert isinstance(cls.profile_keys, frozenset)
    assert not cls.profile_keys & PROFILE_KEYS, "a kind's keys must not shadow the common ones"
    # what an untrusted repository's config may not set: keys the kind really has
    assert isinstance(cls.widening_keys, frozenset) and cls.widening_keys <= cls.profile_keys
    for names in (cls.env_keys, cls.home_files, cls.home_state):
        assert isinstance(names, tuple) and all(isinstance(n, str) and n for n in names)
    # Wrong-typed options are reported as (message, key) pairs, never raised.
    bad = dict.fromkeys(cls.profile_keys, object())
    problems = cls.check_options(bad)
    assert all(isinstance(m, str) and key in cls.profile_keys for m, key in problems)


# What "write done.txt", "exit 3" and "hang" look like in each runnable kind's options.
STEPS: dict[str, dict[str, dict[str, Any]]] = {
    "shell": {
        "write": {"command": "echo done > done.txt"},
        "fail": {"command": "echo oops; exit 3"},
        "hang": {"command": "exec sleep 600"},
    },
    "scripted": {
        "write": {"script": {"*": {"write": {"done.txt": "done\n"}}}},
        "fail": {"script": {"*": {"print": "oops", "exit": 3}}},
        "hang": {"script": {"*": {"sleep": 600}}},
    },
}


def agent(kind: str, step: str) -> Agent:
    options = STEPS[kind][step]
    assert agent_class(kind).check_options(options) == []
    return make_agent(AgentProfile("p", kind, options=options))


@pytest.fixture(params=sorted(STEPS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_ctx(
    worktree: Path, kind: str, timeout_s: float = 60.0, cancel: CancelToken | None = None
) -> AgentContext:
    """An attempt's context as the local executor builds one, minus the sandbox."""
    log = worktree.parent / "attempt.log"
    prompt = "write done.txt"
    prompt_file = worktree.parent / "prompt.md"
    prompt_file.write_text(prompt)
    output_file = worktree.parent / "output.json"
    env = scrubbed_env(agent_class(kind).env_keys)
    env.update(ORCHARDIST_TASK="t1", ORCHARDIST_WORKTREE=str(worktree), ORCHARDIST_PROMPT=prompt)
    return AgentContext(
        run_id="run1",
        task_id="t1",
        attempt=1,
        candidate=0,
        title="write done.txt",
        prompt=prompt,
        worktree=worktree,
        cwd=worktree,
        prompt_file=prompt_file,
        output_file=output_file,
        log=log,
        env=env,
        timeout_s=timeout_s,
        cancel=cancel or CancelToken(),
        marker=new_marker(),
    )


def tree(tmp_path: Path) -> Path:
    path = tmp_path / "tree"
    path.mkdir()
    return path


def test_an_agent_changes_its_worktree_and_ends_normally(kind: str, tmp_path: Path) -> None:
    worktree = tree(tmp_path)
    result = agent(kind, "write").run(make_ctx(worktree, kind))
    assert (result.exit_code, result.failure, result.cancelled) == (0, None, False)
    assert (worktree / "done.txt").read_text() == "done\n"


def test_a_non_zero_exit_is_an_agent_error_with_its_output_logged(
    kind: str, tmp_path: Path
) -> None:
    ctx = make_ctx(tree(tmp_path), kind)
    result = agent(kind, "fail").run(ctx)
    assert (result.exit_code, result.failure) == (3, Failure.AGENT_ERROR)
    assert "oops" in ctx.log.read_text()


def test_an_agent_past_its_timeout_is_stopped_as_timed_out(kind: str, tmp_path: Path) -> None:
    result = agent(kind, "hang").run(make_ctx(tree(tmp_path), kind, timeout_s=1.0))
    assert result.failure is Failure.TIMEOUT and not result.cancelled


def test_a_cancelled_agent_stops_and_says_it_was_cancelled(kind: str, tmp_path: Path) -> None:
    token = CancelToken()
    ctx = make_ctx(tree(tmp_path), kind, timeout_s=300.0, cancel=token)
    timer = threading.Timer(0.5, token.cancel, args=("no longer needed",))
    timer.start()
    try:
        result = agent(kind, "hang").run(ctx)
    finally:
        timer.cancel()
        token.close()
    assert result.cancelled
