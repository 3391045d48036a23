"""Plumbing shared by the fake agent CLIs.

A test steers a fake through ``$HOME/.fake-agents.json`` (the environment is scrubbed, HOME is
not): ``{"mode": "ok" | "rate_limit" | "auth" | "hang" | "crash" | ..., "edit": {path: text}}``.
Each call is recorded in ``$HOME/.fake-agents/<tool>.json``: argv, environment, stdin, cwd.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HOME = Path(os.environ.get("HOME", "."))
DEFAULT_EDIT = {"hello.txt": "hello from a fake agent\n"}


def start(tool: str, version: str, stdin: bool = True) -> dict[str, Any]:
    """Answer ``--version``; otherwise record this call and return the control settings."""
    if sys.argv[1:] == ["--version"]:
        print(version)
        sys.exit(0)
    data = sys.stdin.read() if stdin and not sys.stdin.isatty() else ""
    calls = HOME / ".fake-agents"
    calls.mkdir(exist_ok=True)
    record = {"argv": sys.argv[1:], "env": dict(os.environ), "stdin": data, "cwd": os.getcwd()}
    (calls / f"{tool}.json").write_text(json.dumps(record))
    try:
        control = json.loads((HOME / ".fake-agents.json").read_text())
    except (OSError, ValueError):
        control = {}
    return {"mode": "ok", **control}


def edit(control: dict[str, Any]) -> None:
    """Make the changes an agent would."""
    for path, text in control.get("edit", DEFAULT_EDIT).items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def emit(event: dict[str, Any]) -> None:
    """One JSONL event on stdout."""
    print(json.dumps(event), flush=True)


def say(text: str, err: bool = False) -> None:
    """A plain line on stdout or stderr."""
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def hang() -> None:
    """Never finish (until killed)."""
    while True:
        time.sleep(3600)


def in_s(seconds: float) -> int:
    """An epoch ``seconds`` from now."""
    return int(time.time() + seconds)
