"""A child's output log, capped in size: the head is written as it comes, the tail kept in
memory and written at the end, with how much was left out between them; an optional callback
sees each complete line as it arrives (:mod:`.procs` copies every child's output into one)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

MAX_LINE_BYTES = 1024 * 1024  # a longer line is not handed to the callback


class CappedLog:
    """Writes the first half of the budget to the file, keeps the last half in memory."""

    def __init__(self, path: Path, max_bytes: int, on_line: Callable[[bytes], None] | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("ab")
        self.head_left = self.head_max = max_bytes // 2
        self.tail_max = max_bytes - self.head_left
        self.tail = bytearray()
        self.total = 0
        self.on_line = on_line
        self.partial = bytearray()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        head = data[: max(self.head_left, 0)]
        if head:
            self.file.write(head)
            self.file.flush()
            self.head_left -= len(head)
        rest = data[len(head) :]
        if rest:
            self.tail += rest
            if len(self.tail) > 2 * self.tail_max:
                del self.tail[: len(self.tail) - self.tail_max]
        if self.on_line is not None:
            self._lines(data)

    def _lines(self, data: bytes) -> None:
        assert self.on_line is not None
        self.partial += data
        *lines, last = bytes(self.partial).split(b"\n")
        self.partial = bytearray(last if len(last) <= MAX_LINE_BYTES else b"")
        for line in lines:
            if len(line) <= MAX_LINE_BYTES:
                self.on_line(line)

    def close(self) -> bool:
        if self.on_line is not None and self.partial:
            self.on_line(bytes(self.partial))
        truncated = len(self.tail) > self.tail_max
        if self.tail:
            kept = self.tail[-self.tail_max :]
            # not file.tell(): the log may already hold earlier commands' output
            omitted = self.total - (self.head_max - self.head_left + len(kept))
            if omitted > 0:
                self.file.write(f"\n[orchardist: {omitted} bytes of output omitted]\n".encode())
            self.file.write(kept)
            truncated = omitted > 0
        self.file.close()
        return truncated
