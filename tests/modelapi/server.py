"""The base of the fake model APIs: a real threaded HTTP server on 127.0.0.1.

A model API subclasses :class:`ModelServer` and implements :meth:`ModelServer.answer`, turning
one recorded :class:`Request` into a :class:`Reply`. A reply's body is bytes (sent with a
``Content-Length``) or an iterable of byte chunks (sent chunked, flushed one by one, as a
streaming API sends server-sent events). Every request is recorded, in arrival order, in
``requests``. Use it as a context manager::

    with MyApi(script) as api:
        run_the_tool(base_url=api.url)
    assert api.requests[0].path == "/v1/responses"
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str  # with the query string
    headers: Mapping[str, str]  # names lower-cased
    body: Any  # parsed JSON, or the raw text when it is not JSON

    def header(self, name: str) -> str:
        """A header's value, or ``""``."""
        return self.headers.get(name.lower(), "")


@dataclass(frozen=True)
class Reply:
    """What to answer: a status, headers and a body (bytes, or chunks to stream)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] = b""

    @classmethod
    def json(cls, value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
        """A JSON body."""
        head = {"content-type": "application/json", **(headers or {})}
        return cls(status, head, json.dumps(value).encode())

    @classmethod
    def sse(cls, events: Iterable[tuple[str | None, Any]]) -> Reply:
        """Server-sent events, streamed: ``(event name or None, data)``, data as JSON unless str."""

        def chunks() -> Iterator[bytes]:
            for name, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {name}\n" if name else ""
                yield f"{head}data: {text}\n\n".encode()

        return cls(
            200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, chunks()
        )


class ModelServer:
    """A threaded HTTP server on 127.0.0.1 that records requests and answers via :meth:`answer`."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.lock = threading.Lock()  # guards requests and subclasses' scripted state
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, request: Request) -> Reply:
        """The reply to one request; subclasses script it."""
        return Reply.json({"error": {"message": f"no route for {request.path}"}}, status=404)

    def start(self) -> ModelServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, request: Request) -> Reply:
        with self.lock:
            self.requests.append(request)
        return self.answer(request)


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = server._record(Request(self.command, self.path, headers, body))
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if isinstance(reply.body, bytes):
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for chunk in reply.body:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        # Every method is recorded and answered alike (a proxy's CONNECT too: egress.py).
        do_GET = do_POST = do_PUT = do_HEAD = do_CONNECT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the requests are recorded

    return Handler
