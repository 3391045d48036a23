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
from orchardist.plan.loading import load_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"


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
    assert firsts == ["# .orchardist.toml", "# plan", "# ~/.config/orchardist/config.toml"]


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


def test_the_user_config_example_trusts_the_repositories_it_names(repo: Path) -> None:
    # Given: the example as the user's file, its first repository being this one
    example = toml_block("# ~/.config/orchardist/config.toml")
    assert '"/src/app"' in example
    user = user_config()
    user.parent.mkdir(parents=True)
    user.write_text(example.replace("/src/app", str(repo)))
    (repo / ".orchardist.toml").write_text(
        '[agents.helper]\nkind = "shell"\ncommand = "true"\nenv = ["HOME"]\n'
    )

    config = load_config(repo)

    # Then: the repository's profile is read whole, and wins over the user's
    assert (config.profiles["helper"].kind, config.profiles["helper"].env) == ("shell", ("HOME",))
    assert config.ignored == ()


def test_the_ignored_lines_example_is_what_a_command_prints(repo: Path) -> None:
    # Given: the situation of the example: a user's helper, and a repository config that
    # redefines it and asks for the user's variable as an API key
    text = DOC.read_text()
    example = [line for line in text.splitlines() if line.startswith("orchardist: ")]
    assert len(example) == 3
    user = user_config()
    user.parent.mkdir(parents=True)
    user.write_text('[agents.helper]\nkind = "shell"\ncommand = "true"\n')
    (repo / ".orchardist.toml").write_text(
        '[agents.helper]\nkind = "shell"\ncommand = "true"\n'
        '[agents.cheap]\nkind = "llm"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        'api_key_env = "GITHUB_TOKEN"\n'
    )
    (repo / "plan.toml").write_text('[[task]]\nid = "t"\nprompt = "p"\nagent = "helper"\n')

    # When
    out = subprocess.run(
        [sys.executable, "-m", "orchardist", "validate", "plan.toml"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    )

    # Then: those three lines, in the example's order; the plan is valid all the same
    assert out.returncode == 0, out.stderr
    printed = [line for line in out.stderr.splitlines() if line.startswith("orchardist: ")]
    here = {"/src/app": str(repo), "/home/me/.config/orchardist/config.toml": str(user)}
    expected = []
    for line in example:
        for shown, real in here.items():
            line = line.replace(shown, real)
        expected.append(line)
    assert printed == expected
