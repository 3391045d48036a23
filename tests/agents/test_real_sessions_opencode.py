"""A retry continues OpenCode's own session, or starts afresh when it cannot be kept: the real
CLI against a fake OpenAI API (how the evidence is read: real_sessions.py). A file of its own:
its two runs are the longest of the session tests, and xdist runs a file on one worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_sessions import check_continued, check_fresh, opencode_env, run_openai_tool

from modelapi.openai import Call
from modelapi.openai import Text as OText
from realtools import require_tool

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kept", [True, False], ids=["continued", "fresh"])
def test_opencode_continues_its_session_on_the_retry_or_starts_afresh_without_it(
    tmp_path: Path, kept: bool
) -> None:
    exe = require_tool("opencode")

    def sed(new: str) -> Call:
        return Call("bash", {"command": f"sed -i 's/a - b/{new}/' calc.py", "description": "Fix"})

    script = [sed("a * b"), OText("Made add() multiply."), sed("a + b"), OText("Fixed add().")]

    project, bodies = run_openai_tool(
        tmp_path,
        script,
        lambda url: {"kind": "opencode", "command": str(exe), "model": "fake/gpt-fake-1"},
        lambda url: {"OPENAI_API_KEY": "sk-fake-key", **opencode_env(url)},
        kept=kept,
    )
    (check_continued if kept else check_fresh)(project, bodies, "opencode")
