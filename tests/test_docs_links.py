"""The README is a front door: short, every page of docs/ reachable from it, every relative link
in it and in the docs resolving (file and heading), and its two commands the ones that are run:
the test command by .ci/run, the quickstart's plan by tests/test_quickstart.py."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from orchardist.cli import main
from quickstart_support import EXAMPLE

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def pages() -> list[Path]:
    """The Markdown pages a reader is sent to: the README, CONTRIBUTING.md and docs/."""
    found = [README, *sorted((ROOT / "docs").glob("*.md"))]
    contributing = ROOT / "CONTRIBUTING.md"
    return [*found, contributing] if contributing.exists() else found


def prose(text: str) -> str:
    """The text with code blocks and inline code blanked out (links there are examples)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    result = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def relative_links(page: Path) -> list[str]:
    """The targets of the page's links and images that are not URLs."""
    targets = LINK.findall(prose(page.read_text()))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file, or whose heading in that file, is missing."""
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {file.name}")
    return broken


def test_every_relative_link_in_the_readme_and_the_docs_resolves() -> None:
    problems = [f"{page.relative_to(ROOT)}: {p}" for page in pages() for p in broken_links(page)]
    assert problems == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    # Given a page with good links, two broken ones (one's text wrapped over two lines), and a
    # link inside code, which is an example and ignored
    (tmp_path / "other.md").write_text("# Other\n\n## Some `code` here, and more\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#some-code-here-and-more) [self](#page)\n"
        "[gone](missing.md) [no\nheading](other.md#nowhere)\n\n```\n[in code](nothing.md)\n```\n"
    )
    # When its links are checked, Then exactly the two broken ones are reported
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#nowhere"]


def linked_pages(page: Path) -> set[Path]:
    """The Markdown files of this repository that ``page`` links to."""
    found = set()
    for target in relative_links(page):
        file = (page.parent / target.partition("#")[0]).resolve()
        if file.suffix == ".md" and file.is_file() and ROOT in file.parents:
            found.add(file)
    return found


def test_every_docs_page_and_contributing_is_reachable_from_the_readme() -> None:
    reached, todo = {README}, [README]
    while todo:
        for found in linked_pages(todo.pop()) - reached:
            reached.add(found)
            todo.append(found)
    unreached = [str(p.relative_to(ROOT)) for p in pages() if p not in reached]
    assert unreached == []
    assert ROOT / "CONTRIBUTING.md" in reached


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move reference to docs/"


def sh_block_after(heading: str) -> str:
    """The first ``sh`` block of the README section under ``heading``, joined into one line."""
    text = README.read_text()
    section = text[text.index(f"\n## {heading}\n") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, f"no sh block under ## {heading}"
    return " ".join(block.group(1).replace("\\\n", " ").split())


def ci_commands() -> list[str]:
    """The commands .ci/run runs, one per line, without comments and stdin redirections."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    plain = [line.split(" #")[0].strip() for line in lines if not line.lstrip().startswith("#")]
    return [re.sub(r"\s*</dev/null$", "", line) for line in plain if line]


def test_ci_runs_the_readme_test_command_exactly_in_order() -> None:
    # Given the README's test command, a chain of commands joined by &&
    steps = sh_block_after("Tests").split(" && ")
    assert steps[-1].startswith("python -m pytest"), steps
    # Then .ci/run runs the same commands, in that order, one after another
    ran = ci_commands()
    start = ran.index(steps[0])
    assert ran[start : start + len(steps)] == steps


def test_the_readme_quickstart_installs_pytest_and_runs_the_plan_the_tests_run() -> None:
    # Given the README's quickstart command
    steps = sh_block_after("Quickstart").split(" && ")
    # Then it installs orchardist from the clone and pytest, which the example's checks run ...
    install = next(shlex.split(s) for s in steps if s.startswith("pip install"))
    assert {"-e", ".", "pytest"} <= set(install)
    assert "pytest" in (EXAMPLE / "plan.toml").read_text()
    # ... and runs the very plan tests/test_quickstart.py runs end to end
    run = shlex.split(steps[-1])
    assert run[:2] == ["orchardist", "run"]
    assert (ROOT / run[2]).resolve() == (EXAMPLE / "plan.toml").resolve()


def test_the_readme_fix_one_liner_would_run_one_fix_pipeline_task_of_its_profile(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the README's fix one-liner, and a repository whose .orchardist.toml has its profile
    command = shlex.split(sh_block_after("Fixing a bug without writing a plan"))
    assert command[:2] == ["orchardist", "fix"]
    agent = command[command.index("--agent") + 1]
    (repo / ".orchardist.toml").write_text(f'[agents.{agent}]\nkind = "{agent}"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    monkeypatch.chdir(repo)
    # When it runs there with --dry-run, which prints the plan it would run and runs nothing
    code = main([*command[1:], "--dry-run"])
    out, err = capsys.readouterr()
    # Then that plan is one task of the fix pipeline: the report, the profile, the verify command
    assert code == 0, out + err
    [task] = tomllib.loads(out)["task"]
    assert (task["pipeline"], task["agent"], task["prompt"]) == ("fix", agent, command[2])
    assert task["verify"] == [command[command.index("--verify") + 1]]
