"""Hostile agents against the files orchardist reads after them: ``$ORCHARDIST_OUTPUT`` and the
JUnit report made a FIFO, a symlink to ``/dev/zero``, or a 300 MB file.

The orchestrator runs as a real process; the outcome is that it ends, blaming the agent for an
output file it cannot read, and how much memory it took at its peak (from the kernel's
accounting of the waited-for child).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from run_support import ORCHARDIST, only_run, status
from support import toml_str, write_plan
from userstate import assert_untouched, user_ground

# Runs the orchestrator and prints the peak resident size of it and its children, in KiB.
PEAK = (
    "import resource, subprocess, sys\n"
    "proc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)\n"
    "print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)

AGENT = """\
echo "print('ok')" > "$ORCHARDIST_TASK.py"
case "$ORCHARDIST_TASK" in
  fifo) mkfifo "$ORCHARDIST_OUTPUT" ;;
  zero) ln -s /dev/zero "$ORCHARDIST_OUTPUT" ;;
  huge) truncate -s 300M "$ORCHARDIST_OUTPUT" ;;
  deep) printf '%0100000d' 0 | tr 0 '[' > "$ORCHARDIST_OUTPUT" ;;
esac
"""
# A verify command that looks like pytest (so a JUnit report is expected) and leaves a FIFO
# where the report should be.
JUNIT_FIFO = 'pytest() {{ f=${{PYTEST_ADDOPTS#--junitxml=}}; mkfifo "${{f%% *}}"; }}; pytest'


def test_output_and_report_files_made_traps_neither_hang_nor_bloat_the_orchestrator(
    repo: Path,
) -> None:
    # Given: agents whose output file is a FIFO, a link to /dev/zero, a sparse 300 MB file, a
    # JSON nesting bomb, and a verify command leaving a FIFO where its JUnit report goes
    tasks = "".join(f'[[task]]\nid = "{t}"\n\n' for t in ("fifo", "zero", "huge", "deep"))
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 4

[agents.sh]
kind = "shell"
command = {toml_str(AGENT)}

{tasks}
[[task]]
id = "junit"
verify = {toml_str(JUNIT_FIFO)}
""",
    )

    ground = user_ground(repo)
    # When: the orchestrator runs it as a process of its own
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *ORCHARDIST, "run", str(plan)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then: it ended; each trap is the agent's failure (agent_error, tried once: retries = 0),
    # never orchardist's (infra_error, retried), and the task whose report was a FIFO merged
    exit_code, peak_kib = (int(v) for v in proc.stdout.split())
    doc = status(repo, only_run(repo))
    assert exit_code == 1, json.dumps(doc, indent=1)
    traps = ("fifo", "zero", "huge", "deep")
    assert {t["id"]: t["state"] for t in doc["tasks"]} == {
        **dict.fromkeys(traps, "failed"),
        "junit": "done",
    }
    for task in doc["tasks"]:
        if task["id"] in traps:
            assert [a["failure"] for a in task["attempts"]] == ["agent_error"], task
            assert "output file" in task["attempts"][0]["detail"], task
    # and it never held anything like the 300 MB file (or /dev/zero) in memory
    assert peak_kib < 250 * 1024, f"peak resident size {peak_kib} KiB"
    assert_untouched(repo, ground)
