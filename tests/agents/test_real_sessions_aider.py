"""A retry continues aider's own chat, or starts afresh when it cannot be kept: the real CLI
against a fake OpenAI API (how the evidence is read: real_sessions.py). A file of its own: its two
runs are among the longest of the session tests, and xdist runs a file on one worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_sessions import check_continued, check_fresh, run_openai_tool

from modelapi.openai import Text as OText
from realtools import require_tool

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_aider_continues_its_chat_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, kept: bool
) -> None:
    exe = require_tool("aider")

    def whole(body: str) -> OText:  # aider's "whole file" edit format
        return OText(f"calc.py\n```python\ndef add(a, b):\n    return {body}\n```\n")

    project, bodies = run_openai_tool(
        tmp_path,
        [whole("a * b"), whole("a + b")],
        lambda url: {
            "kind": "aider",
            "command": str(exe),
            "model": "openai/gpt-fake-1",
            "args": ["--analytics-disable", "--no-show-model-warnings", "calc.py"],
        },
        lambda url: {"OPENAI_API_BASE": f"{url}/v1", "OPENAI_API_KEY": "sk-fake-key"},
        side_requests=False,
        kept=kept,
    )
    (check_continued if kept else check_fresh)(project, bodies, "aider")
