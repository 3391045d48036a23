"""A stand-in HTTPS proxy on 127.0.0.1 that records where a tool tries to go, and refuses it.

A real agent CLI given ``HTTPS_PROXY`` (and ``NO_PROXY=127.0.0.1`` for the fake model API)
sends every connection to the outside through it: a ``CONNECT host:443`` line, or a plain
request by its full URL. The proxy keeps each request line and answers 403, so a test sees, by
outcome, what the tool would have sent beyond the model's API (telemetry, update checks), and
nothing leaves the machine::

    with EgressProxy() as proxy:
        run_the_tool(env={"HTTPS_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"})
    assert proxy.asked() == []
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class EgressProxy:
    """``with EgressProxy() as proxy:`` serves on ``proxy.url`` until the block ends."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the value for ``HTTPS_PROXY``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def asked(self) -> list[str]:
        """The request lines received, in order (``CONNECT play.googleapis.com:443``)."""
        with self._lock:
            return list(self._lines)

    def record(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def __enter__(self) -> EgressProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def _handler_for(proxy: EgressProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            proxy.record(f"{self.command} {self.path}")
            self.send_response(403)
            self.send_header("content-length", "0")
            self.send_header("connection", "close")
            self.end_headers()

        do_CONNECT = do_GET = do_POST = do_PUT = do_HEAD = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the request lines are recorded

    return Handler
