"""Files in orchardist's way: the one log-tail reader, and output written whole or in place."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orchardist.safeio import copy_regular, read_tail, write_whole


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


def test_output_to_a_fifo_is_written_through_it_and_the_fifo_stays(tmp_path: Path) -> None:
    # Given: a FIFO held open by a reader (non-blocking, so the test cannot hang)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # When
        write_whole(fifo, b"the findings\n")
        # Then: the reader got the bytes, and the FIFO is still a FIFO (not a new regular file)
        assert os.read(reader, 100) == b"the findings\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo"]


def test_output_through_a_link_to_a_pipe_reaches_the_pipe_like_dev_stdout(
    tmp_path: Path,
) -> None:
    # Given: a link to this process's pipe, as /dev/stdout is a link to /proc/self/fd/1
    read_end, write_end = os.pipe()
    link = tmp_path / "stdout"
    link.symlink_to(f"/proc/self/fd/{write_end}")
    try:
        # When
        write_whole(link, b"sarif")
        os.close(write_end)
        # Then: the bytes went down the pipe; the link is untouched, no file took its place
        assert os.read(read_end, 100) == b"sarif"
        assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{write_end}"
    finally:
        os.close(read_end)


def test_a_regular_output_file_is_replaced_whole_leaving_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "out.sarif"
    out.write_bytes(b"an old and much longer report\n")
    before = os.stat(out).st_ino
    write_whole(out, b"new\n")
    # A new file renamed onto the path (a reader holding the old one never sees half of each)
    assert out.read_bytes() == b"new\n" and os.stat(out).st_ino != before
    write_whole(tmp_path / "fresh.sarif", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.sarif", "out.sarif"]


def test_copy_regular_keeps_content_mode_and_times_and_reads_no_link_or_fifo(
    tmp_path: Path,
) -> None:
    # Given: an executable file, a link to it and a FIFO
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o751)
    os.utime(tool, ns=(1_000_000_000, 2_000_000_000))
    (tmp_path / "link").symlink_to(tool)
    os.mkfifo(tmp_path / "fifo")
    # When: each is copied
    copied = copy_regular(tool, tmp_path / "copy")
    # Then: the file comes over whole, still executable and of its time; the link and the FIFO
    # (opened without blocking: no writer needed) are not copied at all
    assert copied and (tmp_path / "copy").read_bytes() == tool.read_bytes()
    st = (tmp_path / "copy").stat()
    assert stat.S_IMODE(st.st_mode) == 0o751 and st.st_mtime_ns == 2_000_000_000
    assert not copy_regular(tmp_path / "link", tmp_path / "from-link")
    assert not copy_regular(tmp_path / "fifo", tmp_path / "from-fifo")
    assert not os.path.lexists(tmp_path / "from-link")
    assert not os.path.lexists(tmp_path / "from-fifo")
