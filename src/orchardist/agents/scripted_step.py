"""The scripted agent's step player (see ``scripted.py``), run as a script in the attempt's
worktree: ``python -I scripted_step.py STEP`` (STEP: the step's ``marshal`` bytes in base64).

It starts with only the modules the interpreter has loaded anyway: never the orchardist package,
whose import would be most of its start-up cost (about 0.11 s of CPU against 0.04 s), and not
``json``, ``pathlib``, ``subprocess``, ``signal`` or ``typing`` either (each pulls in ``re`` or
``enum`` and more), imported only by the steps that need them: a step that edits and prints
takes 15-17 ms of CPU instead of 41-50. ``-I`` keeps this folder off ``sys.path`` and ignores
``PYTHON*`` variables."""

from __future__ import annotations

import binascii
import marshal
import os
import sys
import time

TYPE_CHECKING = False  # typing itself imports re: see the module's docstring
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def play(step: Mapping[str, Any]) -> int:
    """Carry out one step in the current directory; return the exit code."""
    edit(step)
    if "print" in step:
        print(step["print"], flush=True)
    if step.get("binary_output"):
        sys.stdout.buffer.write(b"\xff\xfe\x80 not utf-8 \xc3\x28\n")
        sys.stdout.flush()
    if step.get("flood_bytes"):
        chunk = b"y" * 65536
        left = int(step["flood_bytes"])
        while left > 0:
            sys.stdout.buffer.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        sys.stdout.flush()
    report(step)
    if step.get("spawn_daemon"):
        spawn_daemon()
    if "sleep" in step:
        time.sleep(float(step["sleep"]))
    if step.get("hang"):
        import signal  # only here: see the module's docstring

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    return int(step.get("exit", 0))


def edit(step: Mapping[str, Any]) -> None:
    """The step's writes, appends and deletions, in that order."""
    for path, text in step.get("write", {}).items():
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    for path, text in step.get("append", {}).items():
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    for path in step.get("delete", []):
        if os.path.lexists(path):
            os.unlink(path)


def report(step: Mapping[str, Any]) -> None:
    """The step's result and findings, as JSON where orchardist reads them."""
    wanted = [
        (variable, value)
        for key, variable, value in (
            ("output", "ORCHARDIST_OUTPUT", step.get("output")),
            ("findings", "ORCHARDIST_FINDINGS", {"findings": step.get("findings")}),
        )
        if key in step and variable in os.environ
    ]
    if wanted:
        import json  # only here: see the module's docstring

        for variable, value in wanted:
            with open(os.environ[variable], "w", encoding="utf-8") as fh:
                fh.write(json.dumps(value))


def spawn_daemon() -> None:
    """A child in a session of its own that ignores SIGTERM and sleeps."""
    import subprocess  # only here: see the module's docstring

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
    subprocess.Popen(
        [sys.executable, "-c", code],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    sys.exit(play(marshal.loads(binascii.a2b_base64(sys.argv[1]))))
