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

from modelapi.server import ModelServer, Reply, Request


class EgressProxy(ModelServer):
    """``with EgressProxy() as proxy:`` serves on ``proxy.url`` (the value for
    ``HTTPS_PROXY``) until the block ends, refusing every request."""

    def answer(self, request: Request) -> Reply:
        return Reply(403, {"connection": "close"})

    def asked(self) -> list[str]:
        """The request lines received, in order (``CONNECT play.googleapis.com:443``)."""
        with self.lock:
            return [f"{r.method} {r.path}" for r in self.requests]
