"""Reading files an agent could have put in orchardist's way: the one log-tail reader."""

from __future__ import annotations

import os
from pathlib import Path

from orchardist.safeio import read_tail


def test_a_tail_is_a_slice_from_an_offset_or_the_last_bytes_after_it(tmp_path: Path) -> None:
    log = tmp_path / "attempt.log"
    log.write_bytes(b"0123456789")
    # From an offset: the next slice of a growing log, and where the one after starts
    first = read_tail(log, 2, 5)
    assert (first.data, first.start, first.end, first.size) == (b"23456", 2, 7, 10)
    assert read_tail(log, first.end, 5).data == b"789"
    # The last bytes, none before the offset (what verify's feedback and the dashboard show)
    assert read_tail(log, 0, 4, last=True).data == b"6789"
    assert read_tail(log, 8, 4, last=True).data == b"89"
    assert read_tail(log, 0, 100, last=True).start == 0


def test_a_tail_of_a_symlink_a_fifo_or_nothing_is_empty_and_not_found(tmp_path: Path) -> None:
    # Given: a secret outside, a log that links to it, a FIFO no one writes, a missing log
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN-4242\n")
    (tmp_path / "linked.log").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.log")
    # When / Then: none is read, and the FIFO does not block
    for name in ("linked.log", "fifo.log", "missing.log"):
        tail = read_tail(tmp_path / name, 0, 1024, last=True)
        assert (tail.found, tail.data, tail.text()) == (False, b"", "")
