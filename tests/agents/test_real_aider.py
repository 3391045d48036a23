"""The real aider (``aider-chat``, in ``.ci/tools/aider-venv``) against a fake OpenAI API.

aider reaches :class:`modelapi.openai.OpenAiServer` through ``OPENAI_API_BASE`` with an
``openai/`` model (non-streamed chat completions, as ``--no-stream`` asks) and edits in its
"whole file" format. Skipped when aider is not installed, failed instead when CI is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from real_support import buggy_project, run_task

from modelapi.openai import INPUT_TOKENS, OUTPUT_TOKENS, OpenAiServer, Text
from modelapi.openai import unauthorized as refused_key
from realtools import require_tool

# aider's "whole" edit format: the file name, then the whole new file in a fence
FIX = Text("calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n")


@pytest.fixture
def aider() -> Path:
    return require_tool("aider")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_project(tmp_path)


def run_aider(project: Path, aider: Path, api: OpenAiServer, tmp_path: Path) -> dict[str, Any]:
    """``orchardist run`` of the fix task with aider against ``api``; the task's status."""
    profile = {
        "kind": "aider",
        "command": str(aider),
        "model": "openai/gpt-fake-1",
        "args": ["--analytics-disable", "--no-show-model-warnings", "calc.py"],
    }
    env = {"OPENAI_API_BASE": f"{api.url}/v1", "OPENAI_API_KEY": "sk-fake-key"}
    return run_task(project, profile, env, tmp_path)


def test_aider_fixes_the_bug_and_the_fix_merges_with_its_reported_tokens(
    project: Path, aider: Path, tmp_path: Path
) -> None:
    # Given a fake OpenAI API that answers with the fixed file
    with OpenAiServer([FIX], side_requests=False) as api:
        task = run_aider(project, aider, api, tmp_path)
    # Then the fix is merged with the tokens aider reported, and the user's repository config
    # did not get aider's placeholder identity
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["state"]) == ("done", "merged"), task
    calls = len(api.model_calls)
    assert calls >= 1
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        INPUT_TOKENS * calls,
        OUTPUT_TOKENS * calls,
    )
    assert "Your Name" not in (project / ".git" / "config").read_text()


def test_a_refused_key_is_an_auth_error(aider: Path, project: Path, tmp_path: Path) -> None:
    # Given an API that refuses the key (401): aider exits 0, the error line fails it
    with OpenAiServer(fail=refused_key()) as api:
        task = run_aider(project, aider, api, tmp_path)
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "auth_error"), task
