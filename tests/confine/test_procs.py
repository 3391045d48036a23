"""Child processes end on time, on cancel or on their own, and leave nothing behind."""

from __future__ import annotations

import hashlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchardist.confine import proctable
from orchardist.confine.procs import (
    MARKER_VAR,
    CancelToken,
    ProcessRequest,
    ProcessResult,
    _parents_first,
    kill_tree,
    new_marker,
    run_process,
)
from support import Stubborn, marked_processes

ENV = {"PATH": os.environ["PATH"]}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def run(tmp_path: Path, argv: list[str], **kwargs: Any) -> tuple[ProcessResult, bytes]:
    """Run ``argv`` in ``tmp_path`` with a plain environment; return the result and the log."""
    log = tmp_path / "out.log"
    kwargs.setdefault("timeout_s", 30.0)
    kwargs.setdefault("env", ENV)
    result = run_process(ProcessRequest(argv=argv, cwd=tmp_path, log=log, **kwargs))
    return result, log.read_bytes()


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


class JumpClock:
    """A clock that stands still until ``jump()``, then is far past any deadline."""

    def __init__(self) -> None:
        self.jumped = threading.Event()

    def __call__(self) -> float:
        return 1e9 if self.jumped.is_set() else 0.0

    def jump(self) -> None:
        self.jumped.set()


def on_line_containing(word: bytes, then: Callable[[], None], seen: list[bytes]) -> Any:
    def on_line(line: bytes) -> None:
        seen.append(line)
        if word in line:
            then()

    return on_line


# -- ending normally ---------------------------------------------------------------------


def test_a_command_s_exit_code_and_output_land_in_the_result_and_the_log(tmp_path: Path) -> None:
    result, log = run(tmp_path, ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert result.exit_code == 3
    assert log == b"out\nerr\n"
    assert result.output_bytes == len(log)
    assert not (result.timed_out or result.cancelled or result.truncated)


def test_the_log_is_appended_to_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "out.log").write_bytes(b"$ earlier\n")
    _, log = run(tmp_path, ["echo", "later"])
    assert log == b"$ earlier\nlater\n"


def test_the_child_sees_only_the_given_environment_plus_its_marker(tmp_path: Path) -> None:
    result, log = run(tmp_path, ["env"], env={**ENV, "FOO": "bar"}, marker="m-123")
    assert result.exit_code == 0
    assert sorted(log.decode().splitlines()) == sorted(
        [f"PATH={ENV['PATH']}", "FOO=bar", f"{MARKER_VAR}=m-123"]
    )


def test_the_child_runs_in_cwd(tmp_path: Path) -> None:
    _, log = run(tmp_path, ["pwd", "-P"])
    assert log.decode().strip() == str(tmp_path.resolve())


def test_stdin_is_closed_unless_a_file_is_given(tmp_path: Path) -> None:
    result, log = run(tmp_path, ["cat"])
    assert (result.exit_code, log) == (0, b"")

    prompt = tmp_path / "prompt.md"
    prompt.write_text("do the thing\n")
    result, log = run(tmp_path, ["cat"], stdin_file=prompt)
    assert (result.exit_code, log) == (0, b"do the thing\n")


def test_a_child_killed_by_a_signal_has_a_negative_exit_code(tmp_path: Path) -> None:
    result, _ = run(tmp_path, ["/bin/sh", "-c", "kill -KILL $$"])
    assert result.exit_code == -9


def test_a_missing_executable_exits_127_and_says_why_in_the_log(tmp_path: Path) -> None:
    result, log = run(tmp_path, ["no-such-program-orchardist"])
    assert result.exit_code == 127
    assert b"cannot start 'no-such-program-orchardist'" in log


def test_a_quick_command_is_not_held_up_by_the_grace_period(tmp_path: Path) -> None:
    result, _ = run(tmp_path, ["true"], grace_s=60.0)
    assert result.exit_code == 0
    assert result.duration_s < 60.0  # it returned before the grace period could have ended


def test_a_background_child_left_by_a_finished_command_is_killed(tmp_path: Path) -> None:
    # Given a command that starts a long sleeper holding its output, and exits at once
    marker = new_marker()
    sleeper = "(sleep 30; touch slept) & exit 0"
    result, _ = run(tmp_path, ["/bin/sh", "-c", sleeper], marker=marker)

    # Then it returns before the sleeper could end by itself, and the sleeper is gone
    assert result.exit_code == 0
    assert not (tmp_path / "slept").exists()
    assert marked_processes(marker) == set()


def test_a_sweep_for_a_child_s_own_marker_kills_its_escaped_daemon_and_reads_no_older_process(
    tmp_path: Path,
) -> None:
    # Given an older process that carries the marker, then (a clock tick later) a leader
    # whose shell leaves a setsid daemon with it, and exits
    marker = new_marker()
    env = {**ENV, MARKER_VAR: marker}
    older = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    time.sleep(0.05)  # /proc counts start times in clock ticks (1/100 s)
    script = f"setsid sleep 30 & echo $! > {tmp_path}/daemon; exit 0"
    leader = subprocess.Popen(["/bin/sh", "-c", script], env=env, start_new_session=True)
    os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
    daemon = int((tmp_path / "daemon").read_text())
    assert marked_processes(marker) == {older.pid, daemon}
    try:
        # When the leader's tree is swept, as a child with a marker of its own is
        kill_tree(leader.pid, marker, grace_s=0.0, descendants=True)

        # Then the daemon it left is gone, and the older process was not looked at
        assert not alive(daemon)
        assert marked_processes(marker) == {older.pid}
    finally:
        leader.wait()
        older.kill()
        older.wait()


def test_a_ctrl_c_the_instant_after_the_start_still_kills_and_reaps_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a child that writes its pid and sleeps, and a Ctrl-C (KeyboardInterrupt) that the
    # main thread takes right after the child started, before its wait began
    real_pidfd_open = os.pidfd_open
    pid_file = tmp_path / "pid"
    interrupted: list[int] = []

    def pidfd_open(pid: int, flags: int = 0) -> int:
        if interrupted:
            return real_pidfd_open(pid, flags)
        interrupted.append(pid)
        deadline = time.monotonic() + 30
        while not pid_file.read_text().strip() if pid_file.exists() else True:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "pidfd_open", pidfd_open)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, ["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 600"])

    # Then the child really ran, and is neither alive nor left a zombie to reap
    child = int(pid_file.read_text())
    assert interrupted == [child]
    assert not Path(f"/proc/{child}").exists()


# -- timeouts ----------------------------------------------------------------------------


def test_a_timeout_ends_a_hanging_command(tmp_path: Path) -> None:
    result, _ = run(tmp_path, ["sleep", "30"], timeout_s=0.2)
    assert result.timed_out
    assert not result.cancelled
    assert result.exit_code < 0  # killed by a signal: it did not sleep its 30 s out


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    # Given a shell with two background sleepers, which says when they have started
    marker = new_marker()
    clock = JumpClock()
    seen: list[bytes] = []
    script = "sleep 30 & sleep 30 & echo ready; wait"

    # When its time runs out just after it is ready
    result, _ = run(
        tmp_path,
        ["/bin/sh", "-c", script],
        marker=marker,
        clock=clock,
        on_line=on_line_containing(b"ready", clock.jump, seen),
    )

    # Then it timed out, and none of its processes is left
    assert seen == [b"ready"]
    assert result.timed_out
    assert marked_processes(marker) == set()


ESCAPE = """
import os, signal, subprocess, sys
child = '''
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.setsid()
print("escaped", os.getpid(), flush=True)
signal.pause()
'''
subprocess.Popen([sys.executable, "-c", child])
signal.pause()
"""


def test_a_timeout_kills_a_child_that_escaped_with_setsid_and_ignores_sigterm(
    tmp_path: Path,
) -> None:
    # Given a command whose child leaves the process group and ignores SIGTERM
    marker = new_marker()
    clock = JumpClock()
    seen: list[bytes] = []

    # When the command's time runs out once the child has escaped
    result, _ = run(
        tmp_path,
        python(ESCAPE),
        marker=marker,
        clock=clock,
        grace_s=0.2,
        on_line=on_line_containing(b"escaped", clock.jump, seen),
    )

    # Then the escaped child is found by its marker and killed after the grace period
    assert result.timed_out
    (line,) = seen
    escaped_pid = int(line.split()[1])
    assert not alive(escaped_pid)
    assert marked_processes(marker) == set()


def test_a_command_that_never_stops_talking_still_times_out(tmp_path: Path) -> None:
    # Given four writers that outpace a reader with a line callback, so output is always ready
    marker = new_marker()
    outcome: list[ProcessResult] = []
    chatty = ["/bin/sh", "-c", "yes & yes & yes & exec yes"]
    worker = threading.Thread(
        target=lambda: outcome.append(
            run(
                tmp_path,
                chatty,
                timeout_s=0.3,
                marker=marker,
                max_log_bytes=1024,
                on_line=lambda line: hashlib.sha256(line * 100).digest(),
            )[0]
        )
    )

    # When it runs with a short timeout
    worker.start()
    worker.join(timeout=30)
    hung = worker.is_alive()
    if hung:  # the timeout never fired: end the child so the suite can go on
        kill_tree(-1, marker, grace_s=0.0)
        worker.join()

    # Then the timeout ended it, not the test
    assert not hung
    assert outcome[0].timed_out
    assert outcome[0].truncated


# -- cancellation ------------------------------------------------------------------------


def test_cancelling_from_another_thread_ends_the_command_promptly(tmp_path: Path) -> None:
    # Given a long command, and a thread that cancels it once it has started
    token = CancelToken()
    marker = new_marker()
    started_event = threading.Event()

    def canceller() -> None:
        started_event.wait(timeout=30)
        token.cancel("no longer needed")

    thread = threading.Thread(target=canceller)
    thread.start()

    # When it runs
    result, _ = run(
        tmp_path,
        ["/bin/sh", "-c", "echo started; exec sleep 30"],
        cancel=token,
        marker=marker,
        on_line=lambda line: started_event.set(),
    )
    thread.join()

    # Then it is killed before its sleep ends, marked cancelled, leaving nothing
    assert result.exit_code < 0
    assert result.cancelled
    assert not result.timed_out
    assert token.reason == "no longer needed"
    assert marked_processes(marker) == set()


def test_a_cancelled_command_gets_sigterm_then_sigkill_after_the_default_3_s_grace(
    tmp_path: Path,
) -> None:
    # Given: a command that meets SIGTERM with a clean-up of 4.5 s, and a token cancelled as
    # soon as it is ready; run with the default grace period
    child = Stubborn(tmp_path, cleanup_s=4.5)
    token = CancelToken()
    # When
    result, _ = run(tmp_path, child.argv(), cancel=token, on_line=lambda line: token.cancel())
    killed_at = time.time()
    # Then: it got SIGTERM first, was left its 3 s to end, and was killed before its clean-up
    # could finish (no upper bound on the clock: the clean-up it never finished is the bound)
    assert result.cancelled and result.exit_code == -signal.SIGKILL
    assert child.term_file.exists()
    assert child.grace_s(killed_at) >= 2.9
    assert not child.done_file.exists()


def test_a_token_cancelled_before_the_start_ends_the_command_at_once(tmp_path: Path) -> None:
    token = CancelToken()
    token.cancel()
    result, _ = run(tmp_path, ["sleep", "30"], cancel=token)
    assert result.cancelled
    assert result.exit_code < 0  # killed: it did not sleep its 30 s out


def test_a_cancel_token_keeps_its_first_reason_and_wakes_a_selector() -> None:
    token = CancelToken()
    assert not token.cancelled
    with selectors.DefaultSelector() as sel:
        sel.register(token.fileno(), selectors.EVENT_READ)
        assert sel.select(0) == []
        token.cancel("first")
        token.cancel("second")
        assert len(sel.select(0)) == 1
    assert token.cancelled
    assert token.reason == "first"
    token.close()


def test_one_token_cancels_several_commands_at_once(tmp_path: Path) -> None:
    # Given two commands sharing a token, each in its own thread
    token = CancelToken()
    ready = threading.Barrier(3)
    results: list[ProcessResult] = []

    def one(n: int) -> None:
        result, _ = run(
            tmp_path / f"c{n}",
            ["/bin/sh", "-c", "echo up; exec sleep 30"],
            cancel=token,
            on_line=lambda line: ready.wait(timeout=30),
        )
        results.append(result)

    for n in (1, 2):
        (tmp_path / f"c{n}").mkdir()
    threads = [threading.Thread(target=one, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()

    # When both are running and the token is cancelled
    ready.wait(timeout=30)
    token.cancel()
    for thread in threads:
        thread.join()

    # Then both were cancelled
    assert [r.cancelled for r in results] == [True, True]


# -- output ------------------------------------------------------------------------------


NUMBERED = "import sys\nfor i in range(20000): sys.stdout.write(f'line {i:05d}\\n')\n"


def expected_numbered() -> bytes:
    return b"".join(f"line {i:05d}\n".encode() for i in range(20000))


def test_output_over_the_cap_keeps_head_and_tail_and_says_how_much_was_omitted(
    tmp_path: Path,
) -> None:
    # Given a command that prints 220,000 bytes, and a 1,000-byte log cap
    full = expected_numbered()

    # When it runs
    result, log = run(tmp_path, python(NUMBERED), max_log_bytes=1000)

    # Then the log holds the first and last 500 bytes and counts what is missing between them
    notice = f"\n[orchardist: {len(full) - 1000} bytes of output omitted]\n".encode()
    assert log == full[:500] + notice + full[-500:]
    assert result.truncated
    assert result.output_bytes == len(full)


def test_output_over_the_cap_after_earlier_log_lines_still_counts_what_was_omitted(
    tmp_path: Path,
) -> None:
    # Given a log that already holds an earlier command's output (as verify commands share one)
    earlier = b"$ earlier command\n" + b"x" * 5000 + b"\n"
    (tmp_path / "out.log").write_bytes(earlier)
    full = expected_numbered()

    # When a capped command appends to it
    result, log = run(tmp_path, python(NUMBERED), max_log_bytes=1000)

    # Then the earlier text is kept and the omission is counted for this command alone
    notice = f"\n[orchardist: {len(full) - 1000} bytes of output omitted]\n".encode()
    assert log == earlier + full[:500] + notice + full[-500:]
    assert result.truncated


def test_output_exactly_at_the_cap_is_kept_whole(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('x' * 999 + '\\n')"
    result, log = run(tmp_path, python(code), max_log_bytes=1000)
    assert log == b"x" * 999 + b"\n"
    assert not result.truncated


def test_non_utf8_output_is_kept_byte_for_byte(tmp_path: Path) -> None:
    lines: list[bytes] = []
    result, log = run(
        tmp_path, ["printf", r"\377\376\200 not utf-8 \303\050\n"], on_line=lines.append
    )
    assert result.exit_code == 0
    assert log == b"\xff\xfe\x80 not utf-8 \xc3\x28\n"
    assert lines == [b"\xff\xfe\x80 not utf-8 \xc3\x28"]


def test_on_line_sees_every_line_including_a_last_one_without_newline(tmp_path: Path) -> None:
    # Given output where one line arrives in two writes and the last has no newline
    code = (
        "import sys\n"
        "sys.stdout.write('one\\ntwo\\n\\nha'); sys.stdout.flush()\n"
        "sys.stdout.write('lf\\nlast'); sys.stdout.flush()\n"
    )
    lines: list[bytes] = []

    # When it runs, the callback sees whole lines only
    run(tmp_path, python(code), on_line=lines.append)
    assert lines == [b"one", b"two", b"", b"half", b"last"]


def test_a_callback_that_raises_leaves_no_process_behind(tmp_path: Path) -> None:
    # Given a long command whose line callback fails
    marker = new_marker()

    def explode(line: bytes) -> None:
        raise RuntimeError("callback failed")

    # When it runs, the error reaches the caller
    with pytest.raises(RuntimeError, match="callback failed"):
        run(tmp_path, ["/bin/sh", "-c", "echo hi; exec sleep 30"], marker=marker, on_line=explode)

    # Then the command did not outlive it
    assert marked_processes(marker) == set()


# -- kill_tree ---------------------------------------------------------------------------


def test_kill_tree_finds_marked_processes_outside_any_group(tmp_path: Path) -> None:
    # Given a marked process in a session of its own, which says when it runs
    marker = new_marker()
    # (one process from "up" on: a shell's `echo up; exec sleep` could still be inside execve
    # when the sweep read its /proc environ, which reads empty in that instant)
    proc = subprocess.Popen(
        python("import time; print('up', flush=True); time.sleep(30)"),
        env={**ENV, MARKER_VAR: marker},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"up\n"

    # When everything with the marker is killed
    killed = kill_tree(-1, marker, grace_s=1.0)
    proc.wait()
    proc.stdout.close()

    # Then it is gone, and a second sweep finds nothing
    assert killed == 1
    assert proc.returncode == -15
    assert kill_tree(-1, marker) == 0


def test_sigterm_reaches_a_parent_before_its_children(tmp_path: Path) -> None:
    # Given a chain of processes: a shell, its child, and that child's child, in a fresh session
    chain = subprocess.Popen(
        ["/bin/sh", "-c", "sh -c 'sleep 1000 & echo started; wait' & wait"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        assert chain.stdout is not None and chain.stdout.readline() == b"started\n"
        members = proctable.members(chain.pid, None)
        # When the processes are put in signalling order, in every order a set may hold them
        for ordering in (sorted(members), sorted(members, reverse=True)):
            # Then each comes after its parent
            order = _parents_first(set(ordering))
            assert order[0] == chain.pid
            for pid in order[1:]:
                assert _ppid(pid) in order[: order.index(pid)]
    finally:
        kill_tree(chain.pid, None, grace_s=0.0)
        chain.wait()
        assert chain.stdout is not None
        chain.stdout.close()


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2 :].split()[1])
