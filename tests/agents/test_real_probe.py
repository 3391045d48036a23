"""``orchardist doctor --probe`` with the real CLIs against the local fake model APIs.

The probe runs each profile's agent once, as an attempt would, on a one-line prompt: a key the
tool does not read, a base URL it ignores or a refused key shows here, before a run. Skipped
when a tool is not installed; failed instead under CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelapi.anthropic import AnthropicServer, Text, unauthorized
from modelapi.openai import OpenAiServer
from modelapi.openai import Text as OpenAiText
from realtools import require_tool
from run_support import interpreter
from support import write_plan

pytestmark = pytest.mark.slow


def probe(repo: Path, plan: str) -> tuple[int, dict[str, Any]]:
    """``orchardist doctor --probe --json`` of a plan with one profile, ``real``."""
    write_plan(repo, f'{plan}\n[[task]]\nid = "t"\nagent = "real"\nprompt = "probe"\n')
    done = interpreter(repo, "doctor", "--probe", "--json", "plan.toml", timeout_s=300)
    (profile,) = json.loads(done.stdout)["profiles"]
    return done.returncode, profile


def test_a_claude_profile_passes_the_probe_with_one_request(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    with AnthropicServer([Text("OK")]) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        code, profile = probe(repo, f'[agents.real]\nkind = "claude"\ncommand = "{exe}"\n')
    assert (code, profile["probe"], profile["missing"]) == (0, "ok", []), profile
    assert len(api.turns()) == 1
    assert {r.header("x-api-key") for r in api.requests if r.method == "POST"} == {
        "sk-ant-test-key"
    }


def test_a_refused_key_fails_the_claude_probe_as_an_auth_error(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-key")
    with AnthropicServer([Text("OK")], fail=unauthorized()) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        code, profile = probe(repo, f'[agents.real]\nkind = "claude"\ncommand = "{exe}"\n')
    assert (code, profile["probe"]) == (1, "auth_error"), profile
    assert any(m.startswith("probe: auth_error") for m in profile["missing"]), profile
    assert "Invalid API key" in profile["probe_detail"]


def test_the_codex_probe_reaches_the_base_url_with_the_key_doctor_checked(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given only OPENAI_API_KEY and OPENAI_BASE_URL, which codex itself does not read
    exe = require_tool("codex")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key")
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    plan = f'[agents.real]\nkind = "codex"\ncommand = "{exe}"\nmodel = "gpt-fake-1"\n'
    with OpenAiServer([OpenAiText("OK")]) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{api.url}/v1")
        code, profile = probe(repo, plan)
    # Then the probe passes: the request reached the fake API with that key
    assert (code, profile["probe"], profile["missing"]) == (0, "ok", []), profile
    assert profile["keys"] == {"OPENAI_API_KEY": True, "CODEX_API_KEY": False}
    assert len(api.model_calls) == 1
    assert {r.header("authorization") for r in api.model_calls} == {"Bearer sk-fake-key"}
