"""``orchardist doctor PLAN``: every agent profile, its CLI and version, its credentials."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from modelapi.openai import OpenAiServer, Text, unauthorized
from orchardist.agents.doctor import check_plan
from orchardist.cli import main
from orchardist.plan.loading import load_plan
from support import write_plan

PLAN = """
[agents.fast]
kind = "claude"
model = "claude-sonnet-4-5"
env = ["HTTPS_PROXY"]

[agents.cheap]
kind = "codex"

[agents.local]
kind = "llm"
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5-coder"
api_key_env = "LOCAL_LLM_KEY"

[agents.script]
kind = "shell"
command = "make fix"

[[task]]
id = "t"
prompt = "p"
agent = "fast"
"""
KEY = "sk-ant-do-not-print-me"


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding a ``claude`` that prints its version, and the usual tools."""
    path = tmp_path / "bin"
    path.mkdir()
    tool(path, "claude", 'echo "2.0.14 (Claude Code)"')
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}/usr/bin:/bin")
    for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME", "LOCAL_LLM_KEY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return path


def tool(bin_dir: Path, name: str, body: str) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def doctor(repo: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["doctor", str(repo / "plan.toml"), *flags])
    return code, capsys.readouterr().out


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["profiles"]}


def test_a_machine_with_everything_passes(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given every CLI on PATH and every credential set
    write_plan(repo, PLAN)
    tool(bin_dir, "codex", 'echo "codex-cli 0.46.0"')
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-secret")
    # When doctor checks the plan
    code, out = doctor(repo, capsys)
    # Then it exits 0 and names versions and variables, never their values
    assert code == 0, out
    assert "2.0.14 (Claude Code)" in out and "codex-cli 0.46.0" in out
    assert "credentials: ANTHROPIC_API_KEY" in out
    assert KEY not in out and "sk-openai-secret" not in out and "local-secret" not in out
    assert "MISSING" not in out


def test_missing_clis_and_credentials_are_listed_and_exit_1(
    repo: Path, bin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(repo, PLAN)
    code, out = doctor(repo, capsys, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    profiles = by_name(doc)
    assert profiles["fast"]["version"] == "2.0.14 (Claude Code)"
    assert profiles["fast"]["keys"] == {
        "ANTHROPIC_API_KEY": False,
        "CLAUDE_CODE_OAUTH_TOKEN": False,
        "ANTHROPIC_AUTH_TOKEN": False,
    }
    assert any("no login was found" in m for m in profiles["fast"]["missing"])
    assert any("`codex` not found on PATH" in m for m in profiles["cheap"]["missing"])
    assert profiles["local"]["missing"] == ["credentials: LOCAL_LLM_KEY is not set"]
    assert profiles["script"]["ok"] is True and profiles["script"]["missing"] == []
    assert profiles["fast"]["env"] == {"HTTPS_PROXY": False}


def test_a_login_file_counts_as_credentials(
    repo: Path, bin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(repo, PLAN)
    credentials = Path.home() / ".claude" / ".credentials.json"
    credentials.parent.mkdir()
    credentials.write_text("{}")
    plan = load_plan(repo / "plan.toml")
    report = {r.name: r for r in check_plan(plan)}["fast"]
    assert report.ok, report.missing
    assert report.login == str(credentials)


def test_a_cli_whose_version_check_fails_is_missing(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plan(repo, PLAN)
    tool(bin_dir, "claude", 'echo "error: cannot find module" >&2; exit 3')
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    report = {r.name: r for r in check_plan(load_plan(repo / "plan.toml"))}["fast"]
    assert report.missing == ("`claude --version` failed (exit 3): error: cannot find module",)


def test_the_version_is_read_from_stdout_not_from_warnings_on_stderr(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a codex that warns on stderr before printing its version (as codex 0.171 does)
    write_plan(repo, PLAN)
    tool(
        bin_dir,
        "codex",
        'echo "WARNING: could not update PATH" >&2; echo "codex-cli 0.171.0"',
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    # When doctor checks it, then the version is codex's, not the warning
    report = {r.name: r for r in check_plan(load_plan(repo / "plan.toml"))}["cheap"]
    assert report.version == "codex-cli 0.171.0"


def test_the_command_override_is_what_is_looked_for(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plan(
        repo,
        """
        [agents.c]
        kind = "claude"
        command = "claude-beta"

        [[task]]
        id = "t"
        prompt = "p"
        """,
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    [report] = check_plan(load_plan(repo / "plan.toml"))
    assert report.command == "claude-beta"
    assert report.missing == ("`claude-beta` not found on PATH (install it, or set command = ...)",)


# -- --probe: one tiny real request per profile -------------------------------------------------

LLM_PLAN = """
[agents.local]
kind = "llm"
base_url = "{url}/v1"
model = "gpt-fake-1"
api_key_env = "LOCAL_LLM_KEY"

[agents.script]
kind = "shell"
command = "make fix"

[[task]]
id = "t"
prompt = "p"
agent = "local"
"""


def test_probe_makes_one_tiny_request_per_profile_and_passes(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a model API that answers, and its key set
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-secret")
    with OpenAiServer([Text("OK\nORCHARDIST_DONE")], side_requests=False) as api:
        write_plan(repo, LLM_PLAN.format(url=api.url))
        # When doctor probes the plan's profiles
        code, out = doctor(repo, capsys, "--probe", "--json")
    # Then one request reached the model, with the key, and the profile passes
    assert code == 0, out
    profiles = by_name(json.loads(out))
    assert (profiles["local"]["probe"], profiles["local"]["missing"]) == ("ok", [])
    (call,) = api.model_calls
    assert call.header("authorization") == "Bearer local-secret"
    assert "connectivity check" in json.dumps(call.body)
    # and a profile that calls no model is not probed
    assert profiles["script"]["probe"] is None
    assert "calls no model; not probed" in profiles["script"]["notes"]


def test_probe_reports_a_refused_key_as_an_auth_error_and_exits_1(
    repo: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a model API that refuses the key (401), though the variable is set
    monkeypatch.setenv("LOCAL_LLM_KEY", "wrong-key")
    with OpenAiServer(fail=unauthorized()) as api:
        write_plan(repo, LLM_PLAN.format(url=api.url))
        code, out = doctor(repo, capsys, "--probe")
    # Then doctor says the probe failed with an auth error, and exits 1
    assert code == 1
    assert "probe: auth_error: HTTP 401" in out, out
    assert "wrong-key" not in out
