"""``orchardist serve``: bind, print the URL to open, serve until interrupted."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..git.where import find_toplevel, locate
from .app import create_app
from .reads import Settings

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def settings_for(repo_path: Path, host: str, port: int, token: str) -> Settings:
    """The app's settings for the repository at ``repo_path`` served on ``host:port``."""
    found = locate(repo_path)  # where the store is: one git process, not a Repo's set-up
    if found is None:
        raise UsageError(f"{repo_path} is not inside a git repository")
    root, common_dir = found
    names = {host, "localhost", "127.0.0.1", "[::1]"} if _is_loopback(host) else {host}
    hosts = {f"[{h}]" if ":" in h and not h.startswith("[") else h for h in names}
    return Settings(
        repo_root=root,
        store_path=common_dir / "orchardist" / "state.db",
        token=token,
        allowed_hosts=frozenset(f"{h}:{port}" for h in hosts),
    )


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, TCP named as its protocol: asyncio turns Nagle's algorithm off only
    on connections whose protocol says TCP (with 0, every small response waited 40 ms for the
    client's delayed ACK before its body went out: /api/runs in 44-48 ms for 1 ms of work)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)  # from here on connections queue until uvicorn takes them
    return sock


def _server(repo_path: Path, host: str, port: int, token: str | None) -> tuple[Any, Any, str]:
    """A uvicorn server for the repository's dashboard, its socket and the URL to open."""
    try:
        import uvicorn
    except ImportError:
        raise UsageError(
            "the dashboard needs the web extra: pip install 'orchardist[web]'"
        ) from None
    if not _is_loopback(host) and not token:
        raise UsageError(f"--host {host} is not a loopback address: pass --token to serve it")
    token = token or secrets.token_urlsafe(24)
    sock = _listen(host, port)
    port = sock.getsockname()[1]
    try:
        settings = settings_for(repo_path, host, port, token)
    except BaseException:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    app = create_app(settings)

    class Server(uvicorn.Server):
        """uvicorn's server, which ends the dashboard's live streams as it begins to stop."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await app.end_streams()
            await super().shutdown(sockets)

    config = uvicorn.Config(app.asgi, log_level="warning", lifespan="on")
    return Server(config), sock, f"http://{shown}:{port}/?token={token}"


def serve(repo_path: Path, host: str, port: int, token: str | None) -> int:
    """Serve the dashboard of one repository until Ctrl-C."""
    server, sock, url = _server(repo_path, host, port, token)
    print(f"orchardist dashboard of {find_toplevel(repo_path)}", flush=True)
    print(f"open {url}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    print("dashboard stopped", file=sys.stderr)
    return 0


@contextmanager
def serving_in_background(repo_path: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """The dashboard on a free port in a thread of this process, while the block runs
    (``orchardist run --serve``); yields the URL to open."""
    server, sock, url = _server(repo_path, host, 0, None)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="dashboard", daemon=True
    )
    thread.start()
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
