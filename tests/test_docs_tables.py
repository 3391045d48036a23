"""The documentation as a first-day reader meets it (issue 32): every Markdown table renders as
one table, and a scanner profile that asks bandit for SARIF says it needs ``bandit[sarif]``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
EXAMPLES = sorted((ROOT / "examples").rglob("*.toml"))


def split_tables(text: str) -> list[int]:
    """Line numbers of table rows cut off from the table above them by a blank line: Markdown
    ends the table at the blank line and shows the rest as plain text with pipes."""
    lines = text.splitlines()
    cut = []
    for n in range(2, len(lines)):
        row, blank, above = lines[n], lines[n - 1], lines[n - 2]
        starts_table = n + 1 < len(lines) and re.match(r"\|\s*:?-", lines[n + 1])
        if row.startswith("|") and not blank.strip() and above.startswith("|") and not starts_table:
            cut.append(n + 1)
    return cut


def test_no_table_in_the_docs_is_cut_by_a_blank_line() -> None:
    cut = {page.name: split_tables(page.read_text()) for page in PAGES}
    assert {name: lines for name, lines in cut.items() if lines} == {}


def test_the_check_sees_a_table_cut_by_a_blank_line() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n| x | y |\n|---|---|\n"
    assert split_tables(text) == [5]


def test_every_bandit_sarif_profile_says_it_needs_the_sarif_extra() -> None:
    for path in [*PAGES, *EXAMPLES]:
        text = path.read_text()
        if re.search(r"bandit\b[^\n]*-f sarif", text):
            assert "bandit[sarif]" in text, (
                f"{path.relative_to(ROOT)}: say pip install 'bandit[sarif]'"
            )
