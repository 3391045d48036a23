"""``orchardist serve``'s socket: what the connections it accepts are set to."""

from __future__ import annotations

import asyncio
import socket

from orchardist.web.serve import _listen


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
