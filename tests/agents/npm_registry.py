"""A stand-in npm registry on 127.0.0.1 that counts what it is asked for.

It serves one small package per name it is given (a ``package.json`` and an ``index.js``, at
every version asked for as ``latest``), which is what a tool that installs a helper package on
start (OpenCode's ``@opencode-ai/plugin``) needs to finish its install; every request is kept,
so a test can tell whether a second start downloaded anything.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


def tarball(name: str, version: str) -> bytes:
    """An npm package tarball: ``package/package.json`` and ``package/index.js``."""
    files = {
        "package/package.json": json.dumps({"name": name, "version": version, "main": "index.js"}),
        "package/index.js": "module.exports = {}\n",
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class NpmRegistry:
    """The registry: ``url`` for ``NPM_CONFIG_REGISTRY``; ``requests`` the paths asked for."""

    def __init__(self, packages: Iterable[str], version: str = "1.0.0") -> None:
        self.version = version
        self.tarballs = {name: tarball(name, version) for name in packages}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NpmRegistry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def packument(self, name: str) -> dict[str, Any]:
        """The package's metadata document, naming its one version and its tarball."""
        data = self.tarballs[name]
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        manifest = {
            "name": name,
            "version": self.version,
            "main": "index.js",
            "dist": {
                "tarball": f"{self.url}{name}/-/{name.split('/')[-1]}-{self.version}.tgz",
                "integrity": integrity,
                "shasum": hashlib.sha1(data).hexdigest(),  # npm reads both
            },
        }
        return {
            "name": name,
            "dist-tags": {"latest": self.version},
            "versions": {self.version: manifest},
        }

    def answer(self, path: str) -> tuple[int, bytes, str]:
        """Status, body and content type for a GET of ``path``."""
        path = unquote(path).lstrip("/")
        if "/-/" in path:
            name = path.split("/-/", 1)[0]
            if name in self.tarballs:
                return 200, self.tarballs[name], "application/octet-stream"
        elif path in self.tarballs:
            return 200, json.dumps(self.packument(path)).encode(), "application/json"
        return 404, b'{"error":"not found"}', "application/json"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with registry._lock:
                    registry.requests.append(self.path)
                status, body, kind = registry.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
