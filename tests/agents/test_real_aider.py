"""The real aider (``aider-chat``, in ``.ci/tools/aider-venv``) against a fake OpenAI API.

aider reaches :class:`modelapi.openai.OpenAiServer` through ``OPENAI_API_BASE`` with an
``openai/`` model (non-streamed chat completions, as ``--no-stream`` asks) and edits in its
"whole file" format. Skipped when aider is not installed, failed instead when CI is set. Its
rate-limit test is a file of its own (test_real_aider_rate_limit.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from real_support import BUGGY, VERIFY, breaker_states, buggy_project, run_task

from e2e_support import log_of
from modelapi.openai import INPUT_TOKENS, OUTPUT_TOKENS, OpenAiServer, Text
from modelapi.openai import unauthorized as refused_key
from realtools import require_tool
from support import git

pytestmark = pytest.mark.slow

# aider's "whole" edit format: the file name, then the whole new file in a fence
FIX = Text("calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n")
PRICE_IN, PRICE_OUT = 1.25, 10.0  # per million tokens; aider knows no price for the fake model
CALL_USD = (INPUT_TOKENS * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT) / 1e6
PRICE_LIST = "/litellm/model_prices_and_context_window.json"
ANALYTICS = "/posthog"  # where a test's aider config sends its analytics, if aider sends any
# for the tests whose point is not the edit aider makes: no repository map (pygments' lexers,
# tree-sitter, the tokenizer) and no flake8 run on the edited file, ~1 s of CPU of the ~6 s of
# each aider start (5.1 against 5.9-6.8 s, measured loaded); the fix test keeps both
LEAN = ("--map-tokens", "0", "--no-auto-lint")


@pytest.fixture
def aider() -> Path:
    return require_tool("aider")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_project(tmp_path)


def run_aider(
    project: Path, aider: Path, api: OpenAiServer, tmp_path: Path, *args: str, **settings: Any
) -> dict[str, Any]:
    """``orchardist run`` of the fix task with aider against ``api``; the task's status."""
    profile = {
        "kind": "aider",
        "command": str(aider),
        "model": "openai/gpt-fake-1",
        "args": ["--no-show-model-warnings", *args, "calc.py"],
        "env": ["LITELLM_MODEL_COST_MAP_URL"],
        **settings,
    }
    env = {
        "OPENAI_API_BASE": f"{api.url}/v1",
        "OPENAI_API_KEY": "sk-fake-key",
        # where LiteLLM would download its price list from: the fake API, which records it
        "LITELLM_MODEL_COST_MAP_URL": f"{api.url}{PRICE_LIST}",
    }
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
    # and aider, in a home it has never run in, did not offer (and with --yes-always open) the
    # release notes of its "new version" in a browser
    assert "release-notes" not in log_of(attempt), log_of(attempt)
    # and the commit holds the fix alone, not aider's repository-map cache
    assert git(project, "show", "--name-only", "--format=", task["commit"]).split() == ["calc.py"]
    # and LiteLLM read the price list installed with it: it did not download it as aider started
    assert [r.path for r in api.requests if r.path.startswith(PRICE_LIST)] == []


def test_a_refused_key_is_an_auth_error(aider: Path, project: Path, tmp_path: Path) -> None:
    # Given an API that refuses the key (401): aider exits 0, the error line fails it
    with OpenAiServer(fail=refused_key()) as api:
        # and a user's aider config that would have aider ask whether to send its analytics
        # (to the fake API), a question --yes-always would answer yes
        config = f"analytics: true\nanalytics-posthog-host: {api.url}{ANALYTICS}\n"
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / ".aider.conf.yml").write_text(config)
        task = run_aider(project, aider, api, tmp_path, *LEAN)
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "auth_error"), task
    # and the profile's circuit breaker opened at once: a refused key will not get better
    assert breaker_states(project) == ["open"]
    # and aider, told --no-analytics, sent none: orchardist consents to nothing for the user
    assert api.model_calls, "aider never ran"
    assert [r.path for r in api.requests if r.path.startswith(ANALYTICS)] == []


def test_an_edit_aider_refuses_fails_the_attempt_with_no_changes(
    aider: Path, project: Path, tmp_path: Path
) -> None:
    # Given a model whose only edit is to a file the repository ignores (__pycache__/)
    ignored = Text("__pycache__/notes.py\n```python\nx = 1\n```\n")
    with OpenAiServer([ignored], side_requests=False) as api:
        task = run_aider(project, aider, api, tmp_path, *LEAN)
    # Then aider skipped it, and the attempt failed for changing nothing, saying why
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "no_changes"), task
    assert "Skipping edits to __pycache__/notes.py" in attempt["detail"], attempt["detail"]
    assert (project / "calc.py").read_text() == BUGGY


def test_a_budget_stop_ends_aider_and_keeps_the_tokens_it_reported(
    aider: Path, project: Path, tmp_path: Path
) -> None:
    # Given a model whose fix never passes aider's own test command, so aider asks it again
    # (up to 3 times), and a budget that covers less than two calls
    wrong = Text("calc.py\n```python\ndef add(a, b):\n    return a * b\n```\n")
    prices = {"price_in": PRICE_IN, "price_out": PRICE_OUT, "max_cost_usd": CALL_USD * 1.5}
    with OpenAiServer([wrong], side_requests=False) as api:
        task = run_aider(
            project, aider, api, tmp_path, *LEAN, "--auto-test", "--test-cmd", VERIFY, **prices
        )
        calls = len(api.model_calls)
    # Then orchardist stopped aider at its second call's summary line, before its last retry
    (attempt,) = task["attempts"]
    assert (task["state"], attempt["failure"]) == ("failed", "agent_error"), task
    assert "budget spent" in attempt["detail"], attempt["detail"]
    assert calls < 4
    # and the attempt keeps the tokens aider reported, priced
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (
        2 * INPUT_TOKENS,
        2 * OUTPUT_TOKENS,
    )
    assert attempt["cost_usd"] == pytest.approx(2 * CALL_USD)
