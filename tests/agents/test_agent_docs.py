"""docs/agents.md: every profile example loads as a valid plan, and every kind has a section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchardist.agents import KINDS, agent_class
from orchardist.plan.loading import load_plan
from support import write_plan

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
EXAMPLES = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.DOTALL)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda text: text.split("]")[0].strip("["))
def test_each_profile_example_is_a_valid_plan(example: str, repo: Path) -> None:
    name = re.search(r"\[agents\.(\w+)\]", example)
    assert name is not None
    task = f'[[task]]\nid = "t"\nprompt = "p"\nagent = "{name[1]}"\n'
    plan = load_plan(write_plan(repo, f"{example}\n{task}"))
    assert set(plan.agents) >= {name[1]}


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"shell", "scripted"}))
def test_each_kind_has_a_section_with_an_example(kind: str) -> None:
    text = DOC.read_text()
    assert f'(`kind = "{kind}"`)' in text
    assert any(f'kind = "{kind}"' in example for example in EXAMPLES)


CLI_KINDS = ("claude", "codex", "aider", "gemini", "opencode")


def section(kind: str) -> str:
    """The text of a kind's section, up to the next one."""
    text = DOC.read_text()
    start = text.index(f'(`kind = "{kind}"`)')
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else None]


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_each_cli_section_gives_version_install_variables_home_files_and_known_issues(
    kind: str,
) -> None:
    text = section(kind)
    for heading in (
        "**Tested with:**",
        "Install:",
        "**Environment passed:**",
        "**Files in its private home:**",
        "**Known issues:**",
    ):
        assert heading in text, heading
    cls = agent_class(kind)
    # the exact variables the adapter passes, and the files it copies into the private home
    for name in cls.env_keys:
        assert f"`{name}`" in text, name
    for path in cls.home_files:
        assert f"`~/{path}`" in text, path
    for folder in cls.home_state:
        assert f"`~/{folder}/`" in text, folder
