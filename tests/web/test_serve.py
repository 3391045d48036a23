"""``orchardist serve``'s socket: what the connections it accepts are set to; and how it stops."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

from orchardist.web.serve import _listen
from web.dashboard import serving


def test_connections_the_dashboard_accepts_send_small_responses_without_waiting() -> None:
    # Given: the dashboard's listening socket, served by asyncio as uvicorn serves it
    listener = _listen("127.0.0.1", 0)
    port = listener.getsockname()[1]
    nodelay: list[int] = []

    async def accept_one() -> None:
        accepted = asyncio.Event()

        class Accepted(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                accepted.set()

        server = await asyncio.get_running_loop().create_server(Accepted, sock=listener)
        async with server:
            # When: a client connects
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.wait_for(accepted.wait(), 30)
            writer.close()

    asyncio.run(accept_one())
    # Then: its connection has Nagle's algorithm off: a response's body, written after its
    # headers, is not held until the client acknowledges them (up to 40 ms of delayed ACK)
    assert nodelay and nodelay[0] != 0


def test_ctrl_c_stops_the_dashboard_while_a_page_follows_it(repo: Path) -> None:
    # Given: a dashboard, and a client following the store's changes as an open page does
    with (
        serving(repo) as dash,
        dash.client() as client,
        client.stream("GET", "/api/changes") as response,
    ):
        lines = response.iter_lines()
        assert next(lines) == "retry: 1000"  # the stream is open
        # When: the person presses Ctrl-C, the page still open
        os.killpg(dash.proc.pid, signal.SIGINT)
        # Then: the server ends the stream and exits (before, it waited for the page to close,
        # then for the stream's next keep-alive)
        assert dash.proc.wait(timeout=30) == 130  # interrupted, as the CLI says
        assert list(lines) == [""]  # the rest of the stream: its end, and nothing more
