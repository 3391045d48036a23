"""Tool caches kept per profile (orchardist/confine/caches.py): the real OpenCode installs its
plugin package from a stand-in npm registry on 127.0.0.1 once, not on every attempt.

OpenCode installs ``@opencode-ai/plugin`` into ``~/.config/opencode`` with npm when it starts;
every attempt has a new private home, so each one downloaded it again (12-20 s from the public
registry, issue 31). Skipped when opencode is not installed, failed instead when CI is set.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from npm_registry import NpmRegistry
from real_support import HOME_STATE, PROMPT, VERIFY, buggy_project, workdir_root

from modelapi.openai import Call, OpenAiServer, Text
from orchardist import Workspace
from orchardist.state.report import status_document
from realtools import require_tool
from run_support import ORCHARDIST
from support import toml_str, write_plan

pytestmark = pytest.mark.slow  # drives the real opencode

PLUGIN = "@opencode-ai/plugin"
FIX = Call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix add"})


def opencode_version(exe: Path) -> str:
    """The version opencode asks the registry for (its plugin package is pinned to it): its npm
    package's, else the one it prints (a start of its runtime, ~1 s of CPU)."""
    package = exe.resolve().parent.parent / "package.json"
    if package.is_file():
        about = json.loads(package.read_text())
        if about.get("name") == "opencode-ai":
            return str(about["version"])
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def run_fix(project: Path, exe: Path, api: OpenAiServer, registry: NpmRegistry) -> dict[str, Any]:
    """One ``orchardist run`` of the fix task with opencode; the newest run's one task."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Fake",
        "options": {"baseURL": f"{api.url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
        "models": {"gpt-fake-1": {"name": "Fake"}},
    }
    write_plan(
        project,
        f'[agents.tool]\nkind = "opencode"\ncommand = {toml_str(exe)}\nmodel = "fake/gpt-fake-1"\n'
        f'timeout = "120s"\nenv = ["NPM_CONFIG_REGISTRY"]\n\n'
        f'[[task]]\nid = "fix"\nagent = "tool"\nretries = 0\nprompt = {toml_str(PROMPT)}\n'
        f"verify = {toml_str(VERIFY)}\n",
    )
    home = project.parent / "home"
    for name in HOME_STATE:
        (home / name).mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-fake-key",
        "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "NPM_CONFIG_REGISTRY": registry.url,
        **workdir_root(),
    }
    subprocess.run(
        [*ORCHARDIST, "run", "plan.toml"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=400,
        check=False,
    )
    ws = Workspace.open(project)
    try:
        (task,) = status_document(ws.store, ws.resolve_run(None))["tasks"]
    finally:
        ws.store.close()
    return task  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_second_opencode_attempt_of_a_profile_downloads_nothing(tmp_path: Path) -> None:
    exe = require_tool("opencode")
    project = buggy_project(tmp_path)
    with (
        NpmRegistry([PLUGIN], opencode_version(exe)) as registry,
        OpenAiServer([FIX, Text("Fixed add().")]) as api,
    ):
        # Given a first attempt of the profile, which installed opencode's plugin package
        first = run_fix(project, exe, api, registry)
        assert first["state"] == "done", first
        fetched = list(registry.requests)
        assert any(path.endswith(".tgz") for path in fetched), fetched
        # When a later attempt of the same profile starts (another run, another fresh home)
        second = run_fix(project, exe, api, registry)
        # Then it asked the registry for nothing: its home got the package kept by the first
        assert second["state"] == "done", second
        assert registry.requests == fetched
