"""The environment a child of an agent's or a scanner's sees: the caller's, scrubbed.

Its own module, not ``agents``': a scan that runs no agent starts its scanners with it, and
the agents' package (their registry, the command words, the isolation spec) took ~10 ms of a
first scan's start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# What every agent process may see of the caller's environment; the rest is scrubbed.
BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


def scrubbed_env(
    allow: tuple[str, ...] = (), source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The base variables plus ``allow``, taken from ``source`` (the caller's environment)."""
    source = os.environ if source is None else source
    return {k: source[k] for k in (*BASE_ENV, *allow) if k in source}
