"""Text an agent wrote, made safe for a terminal.

Agent output can hold escape sequences that recolour, move the cursor, clear the screen, set
the window title, plant hyperlinks or (with some terminals) answer back into the input.
``orchardist logs`` and ``show`` print it through ``plain`` unless asked for ``--raw``.
"""

from __future__ import annotations

import re

__all__ = ["plain", "visible"]

# CSI (colours, cursor moves), OSC (titles, links), other ESC sequences; the C0 controls but
# newline and tab, DEL, and the C1 controls (U+0080-U+009F: 8-bit CSI, OSC, ...).
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def plain(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (newlines and tabs stay)."""
    return _ESCAPES.sub("", text)


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with its control characters (but newline and tab) written as ``\\xNN``: for
    text from a file the user wrote, such as a plan's keys, where dropping them would hide
    which key is meant."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
