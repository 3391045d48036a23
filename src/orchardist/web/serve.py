"""``orchardist serve``: bind, print the URL to open, serve until interrupted."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
from pathlib import Path

from ..errors import UsageError
from ..gitrepo import Repo, find_toplevel
from .app import Settings, create_app

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
    root = find_toplevel(repo_path)
    if root is None:
        raise UsageError(f"{repo_path} is not inside a git repository")
    repo = Repo(root)
    names = {host, "localhost", "127.0.0.1", "[::1]"} if _is_loopback(host) else {host}
    hosts = {f"[{h}]" if ":" in h and not h.startswith("[") else h for h in names}
    return Settings(
        repo_root=root,
        store_path=repo.common_dir / "orchardist" / "state.db",
        token=token,
        allowed_hosts=frozenset(f"{h}:{port}" for h in hosts),
    )


def serve(repo_path: Path, host: str, port: int, token: str | None) -> int:
    """Serve the dashboard of one repository until Ctrl-C."""
    try:
        import uvicorn
    except ImportError:
        raise UsageError(
            "the dashboard needs the web extra: pip install 'orchardist[web]'"
        ) from None
    if not _is_loopback(host) and not token:
        raise UsageError(f"--host {host} is not a loopback address: pass --token to serve it")
    token = token or secrets.token_urlsafe(24)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)  # from here on connections queue until uvicorn takes them
    port = sock.getsockname()[1]
    settings = settings_for(repo_path, host, port, token)
    shown = f"[{host}]" if ":" in host else host
    print(f"orchardist dashboard of {settings.repo_root}", flush=True)
    print(f"open http://{shown}:{port}/?token={token}", flush=True)
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    print("dashboard stopped", file=sys.stderr)
    return 0
