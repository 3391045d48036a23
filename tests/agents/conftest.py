"""Fixtures for agent tests: fake CLIs on PATH, real attempt contexts, a local chat server."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_testing import ChatServer

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake CLIs, installed on PATH with this interpreter in their shebang."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(FAKES / "_fake.py", bin_dir / "_fake.py")
    for name in ("claude", "codex", "aider", "gemini", "opencode"):
        text = (FAKES / name).read_text().split("\n", 1)[1]
        (bin_dir / name).write_text(f"#!{sys.executable}\n{text}")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


@pytest.fixture
def fake_mode() -> Callable[..., None]:
    """Tell the fakes what to do: a mode, and optionally the edits to make."""

    def set_mode(mode: str, **extra: Any) -> None:
        (Path.home() / ".fake-agents.json").write_text(json.dumps({"mode": mode, **extra}))

    return set_mode


# -- a chat-completions server on 127.0.0.1 ------------------------------------------------


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A threading HTTP server speaking the chat-completions protocol."""
    server_box: list[ChatServer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            chat = server_box[0]
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            chat.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            status, headers, payload = (
                chat.replies.pop(0) if chat.replies else (500, {}, {"error": "script ran out"})
            )
            if status == 0:
                chat.release.wait(30)
                return
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_box.append(ChatServer(url=f"http://127.0.0.1:{httpd.server_address[1]}/v1"))
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server_box[0]
    finally:
        server_box[0].release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
