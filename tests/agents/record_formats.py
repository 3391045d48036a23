"""Record the real tools' output into tests/fixtures/agents/KIND/ (run by hand, not by pytest).

    python tests/agents/record_formats.py [KIND ...]

Each case runs the real CLI (``.ci/tools``) exactly as its adapter would (the adapter's own
command line and variables, through ``agent.run``) against a fake model API of tests/modelapi/,
in a fresh repository whose add() subtracts, and keeps what the tool printed. Paths, session ids
and timestamps stay as they were: the parsers must not depend on them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS), str(TESTS / "agents")]

from modelapi.anthropic import Text as GeminiText  # noqa: E402
from modelapi.anthropic import ToolUse  # noqa: E402
from modelapi.gemini import GeminiServer  # noqa: E402
from modelapi.openai import Call, OpenAiServer, Text, rate_limited, unauthorized  # noqa: E402
from modelapi.server import ModelServer  # noqa: E402
from orchardist.agents import make_agent  # noqa: E402
from orchardist.agents.context import AgentContext  # noqa: E402
from orchardist.confine.attemptpaths import AttemptPaths  # noqa: E402
from orchardist.confine.procs import CancelToken, new_marker  # noqa: E402
from orchardist.confine.scrubbed import scrubbed_env  # noqa: E402
from orchardist.state.agentrecords import AgentProfile  # noqa: E402
from realtools import find_tool  # noqa: E402

FIXTURES = TESTS / "fixtures" / "agents"
PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n"
    "*** End Patch\n"
)
AIDER_FIX = Text("calc.py\n```python\ndef add(a, b):\n    return a + b\n```\n")


def record(
    kind: str,
    name: str,
    server: ModelServer,
    env: Callable[[str], dict[str, str]],
    options: dict[str, Any],
    extra: Callable[[AttemptPaths, Path], None] | None = None,
) -> None:
    """Run ``kind`` once against ``server``; its output becomes FIXTURES/kind/name."""
    exe = find_tool(kind)
    if exe is None:
        print(f"skip {kind}/{name}: not installed")
        return
    with server, tempfile.TemporaryDirectory(prefix=f"record-{kind}-") as tmp:
        paths = AttemptPaths.under(Path(tmp))
        for folder in paths.writable:
            folder.mkdir(parents=True)
        for folder in (".codex", ".local/share", ".local/state", ".config", ".cache", ".aider"):
            (paths.home / folder).mkdir(parents=True, exist_ok=True)
        (paths.tree / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        (paths.tree / ".gitignore").write_text("__pycache__/\n")
        subprocess.run(["git", "init", "-q"], cwd=paths.tree, check=True)
        profile = AgentProfile(kind, kind, options={"command": str(exe), **options})
        agent = make_agent(profile)
        ctx = AgentContext(
            run_id="record",
            task_id="fix",
            attempt=1,
            candidate=1,
            title="fix",
            prompt="add() in calc.py subtracts; make it add.",
            worktree=paths.tree,
            cwd=paths.tree,
            prompt_file=paths.io / "prompt.md",
            output_file=paths.output_file,
            log=paths.io / "out.log",
            env={
                **scrubbed_env(getattr(agent, "env_keys", ())),
                **env(server.url),
                "HOME": str(paths.home),
                "TMPDIR": str(paths.tmp),
            },
            timeout_s=300,
            cancel=CancelToken(),
            marker=new_marker(),
            paths=paths,
        )
        ctx.prompt_file.write_text(ctx.prompt)
        result = make_agent(profile).run(ctx)
        target = FIXTURES / kind / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ctx.log, target)
        if extra is not None:
            extra(paths, target)
        print(f"{kind}/{name}: {result.failure} {result.detail[:100]!r}")


def codex_session_log(paths: AttemptPaths, target: Path) -> None:
    """codex's session log beside the stream: its ``token_count`` events and the short lines
    (the long ones are prompts and instructions)."""
    (log,) = (paths.home / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl")
    lines = log.read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"token_count"' in line or len(line) < 600]
    target.with_suffix(".session.jsonl").write_text("".join(kept))


def codex() -> None:
    env = {"OPENAI_API_KEY": "sk-fake-key"}
    opts = {"model": "gpt-fake-1"}

    def to(url: str) -> dict[str, str]:
        return {**env, "OPENAI_BASE_URL": f"{url}/v1"}

    fix = [
        Call("exec_command", {"cmd": "cat calc.py"}),
        Call("exec_command", {"cmd": f"apply_patch <<'EOF'\n{PATCH}EOF\n"}),
        Text("Fixed add."),
    ]
    record("codex", "edit.jsonl", OpenAiServer(fix), to, opts, codex_session_log)
    ro = {**opts, "permission": "read-only"}
    record("codex", "refused.jsonl", OpenAiServer(fix), to, ro)
    record("codex", "auth_401.jsonl", OpenAiServer(fail=unauthorized()), to, opts)
    record("codex", "rate_429.jsonl", OpenAiServer(fail=rate_limited(1)), to, opts)


def opencode() -> None:
    def to(url: str) -> dict[str, str]:
        model = {"name": "Fake", "cost": {"input": 1.25, "output": 10.0}}
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {"gpt-fake-1": model},
        }
        return {
            "OPENAI_API_KEY": "sk-fake-key",
            "OPENCODE_CONFIG_CONTENT": json.dumps({"provider": {"fake": provider}}),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
        }

    opts = {"model": "fake/gpt-fake-1"}
    fix = [Call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py", "description": "Fix"})]
    record("opencode", "edit.jsonl", OpenAiServer([*fix, Text("Fixed add.")]), to, opts)
    outside = "*** Begin Patch\n*** Add File: /tmp/orchardist-outside.py\n+x = 1\n*** End Patch"
    refused = [Call("apply_patch", {"patchText": outside}), Text("I could not.")]
    record("opencode", "refused.jsonl", OpenAiServer(refused), to, opts)
    record("opencode", "auth_401.jsonl", OpenAiServer(fail=unauthorized()), to, opts)
    record("opencode", "rate_429.jsonl", OpenAiServer(fail=rate_limited(1)), to, opts)


def aider() -> None:
    def to(url: str) -> dict[str, str]:
        return {"OPENAI_API_BASE": f"{url}/v1", "OPENAI_API_KEY": "sk-fake-key"}

    opts = {
        "model": "openai/gpt-fake-1",
        "args": ["--analytics-disable", "--no-show-model-warnings", "calc.py"],
    }
    record("aider", "edit.txt", OpenAiServer([AIDER_FIX], side_requests=False), to, opts)
    ignored = Text("__pycache__/notes.py\n```python\nx = 1\n```\n")
    record("aider", "refused.txt", OpenAiServer([ignored], side_requests=False), to, opts)
    record("aider", "auth_401.txt", OpenAiServer(fail=unauthorized()), to, opts)
    limit = rate_limited(1, should_retry=False)
    record("aider", "rate_429.txt", OpenAiServer(fail=limit), to, opts)


def gemini() -> None:
    def to(url: str) -> dict[str, str]:
        return {"GEMINI_API_KEY": "test-gemini-key", "GOOGLE_GEMINI_BASE_URL": url}

    outside = ToolUse("write_file", {"file_path": "{cwd}/../calc.py", "content": "x = 1\n"})
    opts_refused = {"model": "gemini-2.5-pro"}
    refused = GeminiServer([outside, GeminiText("I could not write the file.")])
    record("gemini", "refused.jsonl", refused, to, opts_refused)
    reads = [ToolUse("read_file", {"file_path": "{cwd}/calc.py"})] * 4 + [GeminiText("Done.")]
    opts = {"model": "gemini-2.5-pro", "max_turns": 2}
    record("gemini", "turn_limit.jsonl", GeminiServer(reads), to, opts)


KINDS = {"codex": codex, "opencode": opencode, "aider": aider, "gemini": gemini}

if __name__ == "__main__":
    for kind in sys.argv[1:] or list(KINDS):
        KINDS[kind]()
