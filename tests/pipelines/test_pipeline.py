"""The handoff contract and how a stage is judged: real files, real commands, no agent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchardist.confine.procs import CancelToken
from orchardist.executors import AttemptJob
from orchardist.pipelines.expand import Pipelines
from orchardist.pipelines.stages import (
    AUDIT,
    DOES_NOT_REPRODUCE,
    FIX,
    LOCALIZE,
    REPRODUCE,
    HandoffError,
    Judgement,
    StageRun,
    judge_stage,
    read_handoff,
    stage_prompt,
)
from orchardist.plan.loading import load_plan
from orchardist.specs import TaskSpec
from orchardist.state.records import AttemptRecord, AttemptState
from orchardist.state.store import Store

PATH = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # python is this interpreter


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A worktree with one source file and a test that fails."""
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text("x = 1\n")
    (root / "fails.sh").write_text("echo the bug is here; exit 1\n")
    (root / "passes.sh").write_text("echo all good\n")
    return root


@pytest.fixture
def token() -> Iterator[CancelToken]:
    cancel = CancelToken()
    yield cancel
    cancel.close()


def judge(
    tree: Path, token: CancelToken, stage: str, output: object, unchanged: bool = True, **kw: str
) -> Judgement:
    """Judge a stage whose agent wrote ``output`` (a str is written as is, else as JSON)."""
    out = tree.parent / "output.json"
    if output is not None:
        out.write_text(output if isinstance(output, str) else json.dumps(output))
    job = AttemptJob(
        id="bug.1",
        run_id="r",
        task_id="bug",
        attempt=1,
        candidate=0,
        base_commit="0" * 40,
        title="t",
        prompt="p",
        profile=None,
        verify=(),
        workdir=".",
        timeout_s=30,
        message="m",
        marker="mk",
        stage=stage,
        inputs=kw.get("inputs", ""),
    )
    run = StageRun(
        tree,
        tree,
        out,
        PATH,
        tree.parent / "log",
        time.monotonic() + 30,
        token,
        None,
    )
    return judge_stage(job, run, unchanged)


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (None, "no handoff: the agent wrote nothing"),
        ("not json {", "malformed handoff: the JSON file at $ORCHARDIST_OUTPUT is not JSON"),
        ({"summary": "done"}, 'no handoff: the JSON file at $ORCHARDIST_OUTPUT has no "handoff"'),
        ({"handoff": {"failing_test": "t"}}, "malformed handoff: repro_cmd is required"),
        ({"handoff": {"repro_cmd": 3}}, "malformed handoff: repro_cmd is required"),
        ({"handoff": {"repro_cmd": "x", "notes": ["a"]}}, "malformed handoff: notes is a"),
        ({"handoff": {"repro_cmd": "x" * 8001}}, "malformed handoff: repro_cmd is over 8000"),
        ({"handoff": {"repro_cmd": "x", "notes": "n" * 8001}}, "malformed handoff: notes is over"),
    ],
)
def test_a_missing_or_malformed_reproduce_handoff_fails_with_the_reason_and_the_contract(
    tree: Path, token: CancelToken, output: object, says: str
) -> None:
    judged = judge(tree, token, REPRODUCE, output)
    assert judged.failure.startswith(says)
    assert "$ORCHARDIST_OUTPUT" in judged.feedback and "repro_cmd (required)" in judged.feedback


def test_a_reproduction_that_fails_on_the_base_passes_with_its_handoff(
    tree: Path, token: CancelToken
) -> None:
    handoff = {"repro_cmd": "sh fails.sh", "failing_test": "fails.sh"}
    judged = judge(tree, token, REPRODUCE, {"handoff": handoff, "summary": "wrote it"})
    assert judged.failure == ""
    assert json.loads(judged.handoff) == handoff
    assert judged.detail == "reproduces: `sh fails.sh` fails on the base (exit 1)"


def test_a_handoff_keeps_its_stages_keys_only_and_strings_up_to_their_cap(
    tree: Path, token: CancelToken
) -> None:
    # Given: a reproduction's handoff with an 8,000-character command and megabytes of extras
    handoff = {"repro_cmd": "sh fails.sh #" + "x" * 7987, "junk": "j" * 200_000, "n": [1] * 9}
    # When it is judged; Then only the contract's keys are kept, the command whole
    judged = judge(tree, token, REPRODUCE, {"handoff": handoff})
    assert judged.failure == ""
    assert json.loads(judged.handoff) == {"repro_cmd": handoff["repro_cmd"]}


@pytest.mark.parametrize(
    "files",
    [["src/calc.py"] * 201, ["src/calc.py", "s" * 1001]],
)
def test_a_localize_handoff_with_too_many_or_too_long_names_is_refused(
    tree: Path, token: CancelToken, files: list[str]
) -> None:
    judged = judge(tree, token, LOCALIZE, {"handoff": {"files": files}})
    assert judged.failure.startswith("malformed handoff: files holds at most 200 entries of")


def test_a_reproduction_that_passes_on_the_base_does_not_reproduce_and_says_what_it_printed(
    tree: Path, token: CancelToken
) -> None:
    judged = judge(tree, token, REPRODUCE, {"handoff": {"repro_cmd": "sh passes.sh"}})
    assert judged.failure.startswith(f"{DOES_NOT_REPRODUCE}: `sh passes.sh` passed on the base")
    assert judged.flag == DOES_NOT_REPRODUCE
    assert "all good" in judged.feedback
    assert judged.handoff == ""


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("no-such-command-here", "the reproduction's command was not found"),
        ("python -m pytest -q no_tests_here.py", "the reproduction did not run: pytest"),
    ],
)
def test_a_reproduction_that_cannot_run_is_not_a_failing_one(
    tree: Path, token: CancelToken, command: str, says: str
) -> None:
    judged = judge(tree, token, REPRODUCE, {"handoff": {"repro_cmd": command}})
    assert judged.failure.startswith(says), judged.failure
    assert judged.flag == ""


def test_an_audit_needs_a_verdict_and_its_replacement_must_still_fail(
    tree: Path, token: CancelToken
) -> None:
    inputs = json.dumps({REPRODUCE: {"repro_cmd": "sh fails.sh"}})
    no_verdict = judge(tree, token, AUDIT, {"handoff": {"notes": "fine"}}, inputs=inputs)
    assert no_verdict.failure == 'malformed handoff: verdict must be "ok" or "weak"'
    # an ok audit keeps the reproduction, which still fails
    kept = judge(tree, token, AUDIT, {"handoff": {"verdict": "ok"}}, inputs=inputs)
    assert kept.failure == "" and json.loads(kept.handoff) == {"verdict": "ok"}
    # a replacement that passes on the base is refused
    weak = {"handoff": {"verdict": "weak", "repro_cmd": "sh passes.sh"}}
    replaced = judge(tree, token, AUDIT, weak, inputs=inputs)
    assert replaced.flag == DOES_NOT_REPRODUCE


def test_localize_names_existing_files_and_changes_none(tree: Path, token: CancelToken) -> None:
    good = {"handoff": {"files": ["src/calc.py"], "symbols": ["x"]}}
    assert judge(tree, token, LOCALIZE, good).detail == "names src/calc.py"
    changed = judge(tree, token, LOCALIZE, good, unchanged=False)
    assert changed.failure.startswith("localize changed files: this stage is read-only")
    for files in (["src/nope.py"], ["../outside.py"], [str(tree / "src" / "calc.py")], ["src"]):
        bad = judge(tree, token, LOCALIZE, {"handoff": {"files": files}})
        assert bad.failure.startswith("malformed handoff: files not in the repository"), files
    empty = judge(tree, token, LOCALIZE, {"handoff": {"files": []}})
    assert empty.failure == "malformed handoff: files must be a non-empty list of strings"


def test_read_handoff_refuses_a_handoff_that_is_not_an_object(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text('{"handoff": ["repro_cmd"]}')
    with pytest.raises(HandoffError, match='no "handoff" object'):
        read_handoff(out, REPRODUCE)


def test_a_stage_prompt_holds_the_report_the_duty_the_inputs_and_how_to_hand_over() -> None:
    inputs = {
        "reproduce": {"repro_cmd": "pytest -q tests/test_bug.py"},
        "localize": {"files": ["a.py"]},
    }
    localize = stage_prompt(LOCALIZE, "the bug report", {})
    assert localize.startswith("the bug report\n\n## Pipeline stage: localize")
    assert "Do not change any file" in localize
    assert "ORCHARDIST_OUTPUT" in localize and '"files"' in localize
    fix = stage_prompt(FIX, "the bug report", inputs)
    assert "$ORCHARDIST_INPUTS" in fix and '"a.py"' in fix
    assert "The reproduction `pytest -q tests/test_bug.py` must pass" in fix
    assert "## Your handoff" not in fix  # the fix is judged by its diff


# -- shaping a stage's job from the store ------------------------------------------------------

R0, REPRO_COMMIT, AUDITED, TIP, START = ("0" * 40, "1" * 40, "2" * 40, "3" * 40, "4" * 40)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "state.db")
    yield opened
    opened.close()


def debug_specs(tmp_path: Path) -> dict[str, TaskSpec]:
    """The stage tasks of one debug task, as load_plan expands them."""
    (tmp_path / "repo").mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    plan = tmp_path / "repo" / "plan.toml"
    plan.write_text(
        '[agents.bot]\nkind = "shell"\ncommand = "true"\n\n'
        '[[task]]\nid = "bug"\nprompt = "the report"\npipeline = "debug"\ncandidates = 3\n'
    )
    return {t.id: t for t in load_plan(plan).tasks}


def won(store: Store, task_id: str, base: str, patch: str, handoff: dict[str, Any]) -> None:
    """Record a stage's winning attempt, as the scheduler leaves it."""
    with store.transaction() as tx:
        tx.add_attempt(
            AttemptRecord(
                "run", task_id, 1, 0, "bot", AttemptState.MERGED, base, 0.0,
                patch_commit=patch, selection="won: only passing candidate", won=True,
                handoff=json.dumps(handoff),
            )
        )  # fmt: skip


def job_for(spec: TaskSpec) -> AttemptJob:
    return AttemptJob(
        id=f"{spec.id}.1", run_id="run", task_id=spec.id, attempt=1, candidate=0,
        base_commit=TIP, title=spec.title, prompt=spec.prompt, profile=None, verify=spec.verify,
        workdir=".", timeout_s=60, message="m", marker="mk", baseline=TIP, check=spec.check,
    )  # fmt: skip


def test_each_stage_starts_where_the_earlier_ones_left_and_sees_their_handoffs(
    tmp_path: Path, store: Store
) -> None:
    # Given: a reproduction (on R0) and an audit of it (on top of the reproduction) that won
    specs = debug_specs(tmp_path)
    asked: list[tuple[str, str, str, str]] = []

    def prepare(base: str, patch: str, message: str, tip: str) -> str:
        asked.append((base, patch, message, tip))
        return START

    pipelines = Pipelines(specs, store, "run", prepare)
    won(store, "bug.reproduce", R0, REPRO_COMMIT, {"repro_cmd": "pytest -q t.py"})
    won(store, "bug.audit", REPRO_COMMIT, AUDITED, {"verdict": "weak", "repro_cmd": "pytest t2.py"})
    won(store, "bug.localize", AUDITED, AUDITED, {"files": ["a.py"]})

    # When: the localize and fix stages' jobs are shaped
    localize = pipelines.shape(job_for(specs["bug.localize"]), specs["bug.localize"])
    fixes = [pipelines.shape(job_for(specs["bug"]), specs["bug"]) for _ in range(3)]

    # Then: localize reads the audited reproduction's tree, with both handoffs
    assert (localize.stage, localize.base_commit) == ("localize", AUDITED)
    assert set(json.loads(localize.inputs)) == {"reproduce", "audit"}
    # and each fix candidate starts from the run branch plus the audited reproduction (made
    # once for all three), lands on the branch, is verified against it, and is checked with the
    # audit's command against the branch plus the reproduction
    fix = fixes[0]
    assert asked == [(R0, AUDITED, "reproduction", TIP)]
    assert (fix.stage, fix.base_commit, fix.start_commit) == ("fix", TIP, START)
    assert (fix.baseline, fix.check, fix.check_baseline) == (TIP, "pytest t2.py", START)
    assert set(json.loads(fix.inputs)) == {"reproduce", "audit", "localize"}
    assert "The reproduction `pytest t2.py` must pass" in fix.prompt
    assert all(f == fix for f in fixes)
    # and a plain task's job is left as it was
    plain = replace(specs["bug"], stage="", pipeline_task="")
    assert pipelines.shape(job_for(plain), plain) == job_for(plain)
