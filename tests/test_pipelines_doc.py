"""docs/pipelines.md is checked: its config file and plan validate, its handoffs are what the
contract asks, its option table is the command's, and its error example is what we print."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchardist import load_plan
from orchardist.config import user_config
from orchardist.plan import load_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "pipelines.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)


def toml_block(first_line: str) -> str:
    [found] = [b for b in blocks("toml") if b.startswith(first_line + "\n")]
    return found


@pytest.fixture(autouse=True)
def _no_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def test_the_config_file_example_is_a_valid_config(repo: Path) -> None:
    (repo / ".orchardist.toml").write_text(toml_block("# .orchardist.toml"))
    config = load_config(repo)
    assert {n: p.kind for n, p in config.profiles.items()} == {"claude": "claude", "cheap": "llm"}


def test_the_plan_example_validates_with_its_pipelines_and_routing(repo: Path) -> None:
    (repo / "plan.toml").write_text(toml_block("# plan"))
    plan = load_plan(repo / "plan.toml")
    ids = {t.id for t in plan.tasks}
    assert {"feb30", "csv-last-row", "changelog"} <= ids
    assert plan.task("feb30").pipeline == "debug"
    assert plan.task("csv-last-row").pipeline == "fix"
    assert plan.task("changelog").depends_on == ("feb30", "csv-last-row")


def test_every_toml_block_is_checked() -> None:
    firsts = sorted(b.splitlines()[0] for b in blocks("toml"))
    assert firsts == ["# .orchardist.toml", "# plan"]


def test_each_handoff_example_has_its_stages_required_keys() -> None:
    text = DOC.read_text()
    section = text[text.index("## The handoff contract") : text.index("### What each agent")]
    found = re.findall(r"^\*\*(\w+)\*\*:.*?^```json\n(.*?)^```$", section, flags=re.S | re.M)
    required = {"reproduce": "repro_cmd", "audit": "verdict", "localize": "files"}
    assert [stage for stage, _ in found] == list(required)
    for stage, body in found:
        handoff = json.loads(body)["handoff"]
        assert isinstance(handoff, dict) and required[stage] in handoff, stage


def test_the_option_table_is_the_commands(repo: Path) -> None:
    text = DOC.read_text()
    table = text[text.index("| option | meaning |") : text.index("The command writes")]
    options = re.findall(r"^\| `(--[a-z-]+)", table, flags=re.M)
    shown = subprocess.run(
        [sys.executable, "-m", "orchardist", "fix", "--help"],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    ).stdout
    assert len(options) >= 9
    for option in options:
        assert option in shown, option


def test_the_config_error_example_is_what_validate_prints(repo: Path) -> None:
    text = DOC.read_text()
    example = re.search(r"^  (\S*config\.toml: agents\.cheap\.kind: .*?)\.\.\.$", text, re.M)
    assert example is not None
    path = user_config()
    path.parent.mkdir(parents=True)
    path.write_text('[agents.cheap]\nkind = "lmm"\n')
    (repo / "plan.toml").write_text('[[task]]\nid = "t"\nprompt = "p"\nagent = "cheap"\n')

    out = subprocess.run(
        [sys.executable, "-m", "orchardist", "validate", "plan.toml"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    )

    assert out.returncode == 2
    expected = example.group(1).replace("/home/me/.config/orchardist/config.toml", str(path))
    assert expected in out.stderr
