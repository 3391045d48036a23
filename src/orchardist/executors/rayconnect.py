"""Reaching a Ray cluster from here: Ray imported on demand (its driver's messages sent to stderr,
so that stdout stays the command's), an address checked before Ray's own connect (which would
retry a silent one for minutes), then connected."""

from __future__ import annotations

import importlib
import socket
import threading
from typing import Any

from ..errors import UsageError

RAY_MISSING = "the ray executor needs Ray on this machine: pip install 'orchardist[ray]'"
CONNECT_TIMEOUT_S = 30.0  # for the cluster's address to connect, and as long to answer


def import_ray() -> Any:
    """The ``ray`` module; a UsageError saying how to install it when it is missing."""
    try:
        ray = importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError(f"{RAY_MISSING} ({exc})") from None
    _driver_messages_to_stderr(importlib.import_module("ray._private.worker"))
    return ray


def _driver_messages_to_stderr(worker: Any) -> None:
    """Ray's driver prints the cluster's messages ("node ... marked dead") on stdout from a
    background thread; stdout is orchardist's own (``--json``), so they go to stderr."""
    original = worker.print_to_stdstream
    if getattr(original, "orchardist", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.orchardist = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def reachable(address: str, timeout_s: float | None = None) -> str:
    """The ``host:port`` Ray would dial for ``address`` (``auto``: the cluster ``ray start``
    made here), once a Ray cluster answers there; a UsageError naming the address otherwise.

    Ray's own connect retries an address that does not answer for many minutes; this look
    takes at most ``timeout_s`` for the TCP connection, as long for the server's first word
    and as long for Ray's answer.
    """
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    import_ray()  # without Ray installed: how to install it, not a ModuleNotFoundError
    services = importlib.import_module("ray._private.services")
    try:
        resolved = str(services.canonicalize_bootstrap_address_or_die(address))
        host, _, port = resolved.rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            silent = _silent(conn)
        problem = (
            f"{resolved} accepts connections but no Ray cluster answered within {timeout_s:g}s"
            if silent
            else _gcs_answers(resolved, timeout_s)
        )
    except (OSError, ValueError) as exc:  # ConnectionError is an OSError
        problem = first_line(exc) or type(exc).__name__
    if problem:
        raise UsageError(
            f"cannot reach the Ray cluster at {address!r}: {problem} "
            "(start one with `ray start --head`, or name it with --ray-address; docs/ray.md)"
        )
    return resolved


# What an HTTP/2 client sends first (RFC 9113 3.4): the preface, then its (empty) SETTINGS
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


def _silent(conn: socket.socket) -> bool:
    """Whether the server on ``conn`` says nothing to an HTTP/2 client within the socket's
    timeout. Ray's GCS is a gRPC server, and an HTTP/2 server's SETTINGS frame comes first:
    one that sends nothing is no Ray cluster, known without Ray's client, which blocks in
    native code that cannot be interrupted and would keep a thread of this process for
    tens of seconds more (anything that answers, TLS or not, is asked by Ray's client)."""
    try:
        conn.sendall(HTTP2_PREFACE)
        conn.recv(1)
    except TimeoutError:
        return True
    except OSError:  # reset: Ray's client says what it makes of that server
        return False
    return False


def _gcs_answers(resolved: str, timeout_s: float) -> str:
    """Why the Ray cluster at ``resolved`` (which accepts connections) is not one, or ""."""
    client = getattr(importlib.import_module("ray._raylet"), "GcsClient", None)
    if client is None:  # another Ray: its own connect will say
        return ""
    box: list[BaseException | None] = []

    def ask() -> None:
        try:
            client(address=resolved, cluster_id=None)
        except Exception as exc:
            box.append(exc)
        else:
            box.append(None)

    # Ray's client blocks in native code and cannot be interrupted: a daemon thread it may
    # stay in while this process goes on to exit 2.
    thread = threading.Thread(target=ask, name="ray-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        return f"{resolved} accepts connections but no Ray cluster answered within {timeout_s:g}s"
    error = box[0]
    return "" if error is None else f"{resolved} is not a Ray cluster ({first_line(error)})"


def connect(ray: Any, address: str) -> None:
    """Connect this process to the cluster at ``address`` as its driver (fails fast: see
    :func:`reachable`)."""
    reachable(address)
    try:
        ray.init(
            address=address, namespace="orchardist", log_to_driver=False, logging_level="ERROR"
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""
