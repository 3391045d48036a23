"""Landlock confines writes to what it was given, whether a confined thread starts the program
(as ``run_process`` does: no wrapper before it) or the wrapper script execs it (as ``doctor``
shows a confined command); the wrapper, when used, imports only ``os``, ``sys`` and
``ctypes``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchardist.confine import landlock as sandbox
from orchardist.confine.procs import ProcessRequest, run_process
from realtools import require


@pytest.fixture(autouse=True)
def _landlock() -> None:
    require(sandbox.available(), "this kernel has no Landlock")


# Beyond the interpreter's own start-up (-I -S): os, ctypes, and what they import themselves.
_ALLOWED = {
    *("os", "stat", "_stat", "_collections_abc", "genericpath", "posixpath", "types"),
    *("ctypes", "_ctypes", "struct", "_struct", "ctypes._endian", "__future__"),
}


def _imported(stderr: str) -> set[str]:
    """The modules named by ``-X importtime`` lines."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                names.add(name)
    return names


def test_the_wrapper_imports_only_os_sys_and_ctypes_beyond_the_interpreter(
    tmp_path: Path,
) -> None:
    # Given: the interpreter's own imports at start (-I -S), and the wrapped command, timed
    bare = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        check=True,
    )
    argv = sandbox.wrap(["/bin/sh", "-c", f"echo ran > {tmp_path}/marker"], [tmp_path])
    timed = [argv[0], "-X", "importtime", *argv[1:]]

    # When: it runs
    done = subprocess.run(timed, capture_output=True, text=True, check=False)

    # Then: the program ran, and the wrapper imported nothing but ctypes and what it needs
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "marker").read_text() == "ran\n"
    extra = _imported(done.stderr) - _imported(bare.stderr) - _ALLOWED
    assert extra == set()


def test_the_wrapped_program_cannot_write_outside_its_folders(tmp_path: Path) -> None:
    # Given: a writable folder and a sibling that is not
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    script = f"echo in > {allowed}/in; echo out > {other}/out; echo $? > {allowed}/status"

    # When: a wrapped shell writes in both
    subprocess.run(sandbox.wrap(["/bin/sh", "-c", script], [allowed]), check=False)

    # Then: only the allowed write happened, and the shell saw the other fail
    assert (allowed / "in").read_text() == "in\n"
    assert not (other / "out").exists()
    assert (allowed / "status").read_text().strip() != "0"


def test_a_confined_thread_starts_confined_programs_and_leaves_its_caller_free(
    tmp_path: Path,
) -> None:
    # Given: a writable folder and a sibling that is not
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    script = f"echo in > {allowed}/in; echo out > {other}/out; echo $? > {allowed}/status"

    # When: a shell is started by a confined thread (no wrapper before it)
    done = sandbox.confined_call(
        lambda: subprocess.run(["/bin/sh", "-c", script], check=False), [allowed]
    )

    # Then: the shell ran, only its allowed write happened and it saw the other fail
    assert done.returncode == 0
    assert (allowed / "in").read_text() == "in\n"
    assert not (other / "out").exists()
    assert (allowed / "status").read_text().strip() != "0"
    # and this process, whose thread it was not, still writes there
    (other / "after").write_text("free\n")
    assert (other / "after").read_text() == "free\n"


def test_a_command_confined_to_its_folder_starts_with_no_wrapper_and_stdin_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: this interpreter behind a shim that logs every start (as a wrapper would be
    # started), and a folder the command may write (not /dev/null: its stdin is opened before)
    starts = tmp_path / "interpreter-starts.log"
    shim = tmp_path / "python-shim"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {starts}\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(shim))
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    script = f"cat > {allowed}/stdin; echo out > {other}/out; echo $? > {allowed}/status"

    # When: it runs confined by Landlock
    result = run_process(
        ProcessRequest(
            argv=["/bin/sh", "-c", script],
            cwd=allowed,
            env={"PATH": os.environ["PATH"]},
            log=tmp_path / "log",
            timeout_s=30.0,
            writable=[allowed],
        )
    )

    # Then: it ran, read an empty stdin, could not write outside its folder, and no
    # interpreter was started before it
    assert result.exit_code == 0, (tmp_path / "log").read_text()
    assert (allowed / "stdin").read_text() == ""
    assert not (other / "out").exists()
    assert (allowed / "status").read_text().strip() != "0"
    assert not starts.exists(), starts.read_text()
