"""What the browser tests share besides the ``browser`` fixture (which stays in test_browser.py,
where tests/test_suite_marks.py sees it): gates the scripted agents wait on, and screenshots."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

SCREENSHOTS = "ORCHARDIST_SCREENSHOTS"  # a folder: the pages are saved there (docs/images)


class Gate:
    """A named pipe an agent's script waits on with ``read _ < PATH`` until the test opens it:
    the agent sleeps in ``read`` (no ``until [ -e F ]; do sleep 0.01; done``, ~100 processes a
    second). The test holds the pipe open for reading and writing from the start, so the
    agent's ``open`` never blocks and the line written by ``open()`` waits in the pipe for a
    ``read`` that comes later; it must stay open until the agent has read it (``with``)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR)

    def open(self) -> None:
        """Let one ``read`` through (again in a ``finally``: the pipe holds 64 KiB of them)."""
        os.write(self._fd, b"go\n")

    def __enter__(self) -> Gate:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        os.close(self._fd)


def keep_screenshot(page: Any, name: str) -> None:
    """Save the whole page as ``name`` in the folder env ORCHARDIST_SCREENSHOTS names (the
    docs' pictures are taken so); without it, none is taken: no test reads them, and each cost
    the browser a full-page render and a PNG."""
    folder = os.environ.get(SCREENSHOTS)
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=True)
