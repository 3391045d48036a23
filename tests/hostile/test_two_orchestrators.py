"""Two orchestrators on one repository (no hostile agent): a baseline runs once between them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import git

# One orchestrator's baseline lookup, as a process of its own: it says it is ready, then asks.
ASK = """\
import os, sys
from pathlib import Path
from orchardist import Workspace
from orchardist.executors.local import LocalExecutor
root, commit, command, sync = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
ws = Workspace.open(root)
ex = LocalExecutor(ws.repo, ws.state_dir, store=ws.store, guard_checkout=False)
(sync / f"ready.{os.getpid()}").touch()
print(ex.verifier.baselines.outcome(commit, command, ".", 60.0).exit_code)
"""


def test_two_processes_asking_for_one_baseline_run_it_once_and_agree(
    repo: Path, sync: Path
) -> None:
    # Given: a base command that counts its runs and, once both orchestrators are ready to
    # ask for it, fails with 3 (so both would run it if nothing excluded the other)
    command = (
        f"echo run >> {sync}/runs; i=0; "
        f'while [ "$(ls {sync} | grep -c ready)" -lt 2 ] && [ $i -lt 400 ]; '
        "do i=$((i+1)); sleep 0.025; done; exit 3"
    )
    commit = git(repo, "rev-parse", "HEAD")

    # When: two processes ask at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ASK, str(repo), commit, command, str(sync)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    answers = [p.communicate(timeout=120)[0].strip() for p in procs]

    # Then: the command ran once, and both got its outcome
    assert answers == ["3", "3"]
    assert (sync / "runs").read_text().splitlines() == ["run"]
