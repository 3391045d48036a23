"""Fuzzed plan files through `orchardist validate`, in-process: whatever the file holds, the
answer is "ok" (exit 0) or every problem located in the file (exit 2), never a traceback."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchardist.agents import KINDS, agent_class
from orchardist.cli import main
from orchardist.plan.loading import PROFILE_KEYS
from orchardist.plan.runtable import RUN_KEYS
from orchardist.plan.tasks import STAGE_KEYS, STAGE_NAMES, TASK_KEYS
from orchardist.scan.profiles import SCANNER_KEYS
from support import make_repo

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = (ROOT / "examples" / "quickstart" / "plan.toml").read_text()
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HEADER = re.compile(r"^error: the plan has (\d+) problem\(s\):$")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield make_repo(tmp_path_factory.mktemp("fuzz") / "repo", {"README.md": "hello\n"})


def validate(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", str(path)])
    return code, out.getvalue(), err.getvalue()


def assert_ok_or_located(path: Path) -> None:
    code, out, err = validate(path)
    if code == 0:
        assert out.startswith(f"{path}: ok ("), out
        return
    assert code == 2, (code, out, err)
    # Lines, split on newlines only (a key may hold other line breaks, shown escaped or as is).
    lines = [line for line in err.split("\n") if line and not line.startswith("warning: ")]
    header = HEADER.match(lines[0])
    assert header is not None, err
    # Each problem starts a line with the file (then its task and field); a message may go on
    # over more lines (YAML's own errors quote the offending line).
    located = [line for line in lines[1:] if line.startswith(f"  {path}: ")]
    assert len(located) == int(header.group(1)) > 0, err
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", err), "a raw control character"


# -- values of every shape, under the keys the validator knows (and some it does not) ------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["90s", "1h30m", "auto", "none", "shell", "{task}", "../x", "/abs", "0"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
ALL_KIND_KEYS = sorted(set().union(*(agent_class(k).profile_keys for k in KINDS)))


def tables(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """A table of some of ``keys`` (and the odd unknown one) with values of any shape."""
    names = st.one_of(st.sampled_from(keys), st.text(min_size=1, max_size=8))
    return st.dictionaries(names, values, max_size=5)


profiles = st.builds(
    lambda kind, rest: {**rest, "kind": kind} if kind is not None else rest,
    st.one_of(st.none(), st.sampled_from(sorted(KINDS)), st.text(max_size=6)),
    tables(sorted(PROFILE_KEYS) + ALL_KIND_KEYS),
)
stages = st.dictionaries(
    st.one_of(st.sampled_from(STAGE_NAMES), st.text(max_size=6)),
    st.one_of(tables(sorted(STAGE_KEYS)), st.booleans(), values),
    max_size=3,
)
tasks = st.builds(
    lambda raw, stage: {**raw, "stages": stage} if stage else raw,
    tables(sorted(TASK_KEYS)),
    st.one_of(st.none(), stages),
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "run": st.one_of(tables(sorted(RUN_KEYS)), values),
        "agents": st.one_of(st.dictionaries(st.text(max_size=6), profiles, max_size=3), values),
        "task": st.one_of(st.lists(tasks, max_size=4), values),
        "tasks": st.lists(tasks, max_size=2),
        "scanners": st.one_of(
            st.dictionaries(st.text(max_size=6), tables(sorted(SCANNER_KEYS)), max_size=2), values
        ),
        "extra": values,
    },
)


@FUZZ
@given(documents)
@example({"agents": {"p": {"kind": []}}})  # found by this test: a TypeError, not a problem
@example({"run": {"\x1e\x1b[2J": None}})  # found by this test: a raw control character
def test_any_yaml_plan_is_ok_or_gets_located_problems(repo: Path, document: dict[str, Any]) -> None:
    path = repo / "plan.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    assert_ok_or_located(path)


# -- the quickstart plan, damaged by a few random edits -------------------------------------------

edits = st.lists(
    st.tuples(
        st.integers(0, len(QUICKSTART)),
        st.integers(0, 20),
        st.text(alphabet="[]{}=\",.#\n'abcdefgh0123456789 _-:", max_size=10),
    ),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(edits)
def test_a_damaged_toml_plan_is_ok_or_gets_located_problems(
    repo: Path, changes: list[tuple[int, int, str]]
) -> None:
    text = QUICKSTART
    for at, cut, insert in changes:
        at = min(at, len(text))
        text = text[:at] + insert + text[at + cut :]
    path = repo / "plan.toml"
    path.write_text(text)
    assert_ok_or_located(path)


@FUZZ
@given(st.binary(max_size=64))
def test_any_bytes_are_ok_or_get_located_problems(repo: Path, raw: bytes) -> None:
    path = repo / "plan.toml"
    path.write_bytes(raw)
    assert_ok_or_located(path)
