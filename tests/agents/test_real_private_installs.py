"""The real agent CLIs installed under the host's /tmp, which attempts do not see (their /tmp is
their own), and started by name from npm's ``.bin`` links or a virtual environment's ``bin`` on
PATH: each fix merges, and ``doctor --probe`` passes as the run does.

The installs are copies of ``.ci/tools`` made of hard links (a symlinked copy where /tmp is
another file system), so nothing of them is seen inside unless orchardist shows it.
Skipped when a tool is not installed; failed instead under CI. OpenCode's is in
test_real_opencode.py, where it shares its run with the test of the cost that run reports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from real_runs import only_task, run_fix
from real_support import buggy_project, copy_tree, npm_links_first
from test_real_aider import FIX as AIDER_FIX
from test_real_aider import run_aider
from test_real_claude import FIX as CLAUDE_FIX
from test_real_codex import FIX as CODEX_FIX
from test_real_codex import run_codex
from test_real_gemini import FIX as GEMINI_FIX

from modelapi.anthropic import AnthropicServer
from modelapi.gemini import GeminiServer
from modelapi.openai import OpenAiServer, Text
from orchardist.confine.confinement import SHARE_READONLY_VAR
from realtools import TOOLS, require_tool
from run_support import interpreter
from support import git, write_plan

pytestmark = pytest.mark.slow


@pytest.fixture
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Put a CLI installed under /tmp first on PATH: ``install(name)``. Attempts see nothing
    of the host's /tmp (the suite shares its own temporary folders with them: not here)."""

    def install(name: str) -> None:
        require_tool(name)
        if name == "aider":
            monkeypatch.delenv(SHARE_READONLY_VAR, raising=False)
            bin_dir = venv_copy(tmp_path / "tools")
            monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        else:
            bin_dir = npm_links_first(tmp_path / "tools", monkeypatch)
            assert (bin_dir / name).is_symlink()

    return install


def venv_copy(folder: Path) -> Path:
    """aider's virtual environment copied under ``folder``, its ``aider`` script started by the
    copy's own interpreter (so Python finds the copy's site-packages); the copy's ``bin``."""
    venv = folder / "venv"
    copy_tree(TOOLS / "aider-venv", venv)
    script = venv / "bin" / "aider"
    text = script.read_text().split("\n", 1)[1]
    script.unlink()  # a hard link: the original is not to be changed
    script.write_text(f"#!{venv}/bin/python3\n{text}")
    script.chmod(0o755)
    return venv / "bin"


def merged(task: dict[str, Any]) -> bool:
    """Whether the task's one attempt merged."""
    return task["state"] == "done" and [a["state"] for a in task["attempts"]] == ["merged"]


def test_claude_from_npm_links_under_tmp_fixes_and_merges(
    tmp_path: Path, private: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    private("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    api = AnthropicServer(CLAUDE_FIX)
    doc = run_fix(tmp_path, monkeypatch, api, "ANTHROPIC_BASE_URL", 'kind = "claude"')
    assert only_task(doc)["state"] == "done", only_task(doc)
    assert "a + b" in git(Path(doc["_repo"]), "show", f"{doc['branch']}:calc.py")


def test_gemini_from_npm_links_under_tmp_fixes_and_merges(
    tmp_path: Path, private: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    private("gemini")
    monkeypatch.setenv("GEMINI_API_KEY", "test-gemini-key")
    api = GeminiServer(GEMINI_FIX)
    settings = 'kind = "gemini"\nmodel = "gemini-2.5-pro"'
    doc = run_fix(tmp_path, monkeypatch, api, "GOOGLE_GEMINI_BASE_URL", settings)
    assert only_task(doc)["state"] == "done", only_task(doc)
    assert "a + b" in git(Path(doc["_repo"]), "show", f"{doc['branch']}:calc.py")


def test_codex_from_npm_links_under_tmp_fixes_and_merges(
    tmp_path: Path, private: Callable[[str], None]
) -> None:
    private("codex")
    project = buggy_project(tmp_path)
    with OpenAiServer([CODEX_FIX, Text("Fixed add().")]) as api:
        task = run_codex(project, Path("codex"), api, tmp_path)
    assert merged(task), task


def test_aider_from_a_virtual_environment_under_tmp_fixes_and_merges(
    tmp_path: Path, private: Callable[[str], None]
) -> None:
    private("aider")
    project = buggy_project(tmp_path)
    with OpenAiServer([AIDER_FIX], side_requests=False) as api:
        task = run_aider(project, Path("aider"), api, tmp_path)
    assert merged(task), task


def test_the_probe_of_claude_from_npm_links_under_tmp_passes_as_its_run_does(
    repo: Path, private: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    private("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    write_plan(
        repo, '[agents.c]\nkind = "claude"\n\n[[task]]\nid = "t"\nagent = "c"\nprompt = "p"\n'
    )
    with AnthropicServer([Text("OK")]) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        done = interpreter(repo, "doctor", "--probe", "--json", "plan.toml", timeout_s=300)
    (profile,) = json.loads(done.stdout)["profiles"]
    assert (done.returncode, profile["probe"]) == (0, "ok"), profile
    assert len(api.turns()) == 1
    assert Path(profile["probe_argv"][0]).name == "bwrap"


def test_the_probe_of_claude_installed_in_the_repository_fails_as_its_run_would(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the real claude installed in an ignored folder of the repository, which attempts
    # do not see (they see their own tree there), and a model API that would answer
    require_tool("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    (repo / ".gitignore").write_text("node_modules/\n")
    copy_tree(TOOLS / "node_modules", repo / "node_modules")
    exe = repo / "node_modules" / ".bin" / "claude"
    write_plan(
        repo,
        f'[agents.c]\nkind = "claude"\ncommand = "{exe}"\n\n'
        '[[task]]\nid = "t"\nagent = "c"\nprompt = "p"\n',
    )
    with AnthropicServer([Text("OK")]) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        done = interpreter(repo, "doctor", "--probe", "--json", "plan.toml", timeout_s=300)
    # Then doctor fails the profile, naming the path and the fix, and makes no request
    (profile,) = json.loads(done.stdout)["profiles"]
    assert done.returncode == 1, profile
    assert any(f"needs {exe}" in m and "[run] environment" in m for m in profile["missing"])
    assert api.turns() == []
