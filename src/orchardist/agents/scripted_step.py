"""The scripted agent's step player (see ``scripted.py``), run as a script in the attempt's
worktree: ``python -I scripted_step.py STEP_JSON``. It imports only the standard library, never
the orchardist package, whose import would be most of its start-up cost (about 0.11 s of CPU
against 0.04 s); ``-I`` keeps this folder off ``sys.path`` and ignores ``PYTHON*`` variables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def play(step: Mapping[str, Any]) -> int:
    """Carry out one step in the current directory; return the exit code."""
    for path, text in step.get("write", {}).items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    for path, text in step.get("append", {}).items():
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    for path in step.get("delete", []):
        Path(path).unlink(missing_ok=True)
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
    if "output" in step and "ORCHARDIST_OUTPUT" in os.environ:
        Path(os.environ["ORCHARDIST_OUTPUT"]).write_text(json.dumps(step["output"]))
    if "findings" in step and "ORCHARDIST_FINDINGS" in os.environ:
        Path(os.environ["ORCHARDIST_FINDINGS"]).write_text(
            json.dumps({"findings": step["findings"]})
        )
    if step.get("spawn_daemon"):
        code = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        )
        subprocess.Popen(
            [sys.executable, "-c", code],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    if "sleep" in step:
        time.sleep(float(step["sleep"]))
    if step.get("hang"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    return int(step.get("exit", 0))


if __name__ == "__main__":
    sys.exit(play(json.loads(sys.argv[1])))
