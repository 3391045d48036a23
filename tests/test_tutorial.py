"""docs/tutorial.md is run as written: its ``sh`` blocks, in order, in one shell."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"


def sh_blocks(text: str) -> list[str]:
    """The tutorial's ``sh`` code blocks, in order."""
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    # Given: the tutorial's shell blocks, each announced by a marker line
    blocks = sh_blocks(TUTORIAL.read_text())
    script = "\n".join(f"echo '@@ block {i}'\n{block}" for i, block in enumerate(blocks))
    env = dict(os.environ)  # PATH: orchardist, python and pytest of this environment (conftest)

    # When: they run in a fresh folder, in one shell
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    # Then: each block printed what the tutorial says it prints
    out = dict(
        (int(chunk.split("\n", 1)[0]), chunk.split("\n", 1)[1] if "\n" in chunk else "")
        for chunk in done.stdout.split("@@ block ")[1:]
    )
    assert len(out) == len(blocks) == 10, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "command not found" not in done.stderr, done.stderr
    assert "plan.toml: ok (2 tasks, 1 agent profile)" in out[2]
    assert "critical path (*): divide → docs" in out[3]
    first = out[4]
    assert re.search(r"run \S+: failed", first), first
    assert re.search(r"divide\s+failed\s+\S*\s*2 attempts", first), first
    assert re.search(r"docs\s+blocked", first), first
    assert "orchardist logs " in first and first.rstrip().endswith("exit code: 1")
    run_id = re.search(r"run (\S+): failed", first).group(1)  # type: ignore[union-attr]
    assert f"orchardist logs {run_id} divide" in first
    assert f"run {run_id}: failed" in out[5]
    assert "assert 3 == 3.5" in out[6]
    assert '"divide"' in out[7]
    assert f"run {run_id}: done" in out[8] and out[8].rstrip().endswith("exit code: 0")
    log = out[9].splitlines()
    assert len(log) == 2 and "Add divide()" in out[9] and "Document calc" in out[9]
