"""Hostile agents against what orchardist keeps of their output file: usage figures no SQLite
INTEGER holds (1e30, 2**70, a 400-digit integer), and megabyte-long session ids and summaries.

The orchestrator runs as a real process (a figure that overflowed the store used to end the run
``dead``, and every ``resume`` after it); the outcome is read from the store and the run branch.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState, Workspace
from orchardist.state.agentrecords import SESSION_ID_CHARS, SUMMARY_CHARS
from run_support import attempt_states, only_run, orchardist, status
from support import Finished, toml_str, write_plan

Scripts = Callable[..., str]
RunPlan = Callable[..., Finished]

HUGE = {
    "float": "1e30",
    "power": str(2**70),
    "digits": "9" * 400,
}
CHATTY_CHARS = 200_000


def test_usage_figures_no_store_can_hold_are_dropped_with_a_note_and_the_run_goes_on(
    repo: Path, sync: Path, shell_scripts: Scripts
) -> None:
    # Given: three agents reporting input_tokens of 1e30, 2**70 and a 400-digit integer (each
    # task with retries = 0), an agent with a 200,000-character session id and summary, a task
    # after them all, then one reporting $2 against a $1 run budget (the run stops), and a last
    bodies = {
        task: f"""echo {task} >> "$SYNC/ran"; echo {task} > {task}.txt
        printf '{{"input_tokens": %s}}' {figure} > "$ORCHARDIST_OUTPUT"
        """
        for task, figure in HUGE.items()
    }
    bodies["chatty"] = f"""echo chatty >> "$SYNC/ran"; echo chatty > chatty.txt
    $PY -c 'import json; print(json.dumps({{"session_id": "s" * {CHATTY_CHARS},
      "summary": "w" * {CHATTY_CHARS}}}))' > "$ORCHARDIST_OUTPUT"
    """
    bodies["spender"] = """echo spender >> "$SYNC/ran"; echo spender > spender.txt
    echo '{"cost_usd": 2}' > "$ORCHARDIST_OUTPUT"
    """
    bodies["after"] = """echo after >> "$SYNC/ran"; echo after > after.txt
    cp "$ORCHARDIST_PROMPT_FILE" "$SYNC/after-prompt.md"
    """
    bodies["last"] = 'echo last >> "$SYNC/ran"; echo last > last.txt'
    command = shell_scripts(**bodies)
    hostile = [*HUGE, "chatty"]
    tasks = "".join(f'[[task]]\nid = "{t}"\nretries = 0\n\n' for t in hostile)
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 1
max_cost_usd = 1.0

[agents.sh]
kind = "shell"
command = {toml_str(command)}

{tasks}
[[task]]
id = "after"
prompt = "Go on from what they did."
depends_on = {json.dumps(hostile)}

[[task]]
id = "spender"
depends_on = ["after"]

[[task]]
id = "last"
depends_on = ["spender"]
""",
    )

    # When: the run goes until the budget stops it, then is resumed with a larger budget
    first = orchardist(repo, "run", str(plan))
    run_id = only_run(repo)
    stopped = status(repo, run_id)
    resumed = orchardist(repo, "resume", run_id, "--max-cost-usd", "100")

    # Then: the run stopped on its budget (not dead), and resume finished it
    assert stopped["state"] == "stopped", (first.stdout, first.stderr)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    doc = status(repo, run_id)
    assert doc["state"] == "done", doc
    # and every hostile agent ran once: no task with retries = 0 was tried again
    ran = (sync / "ran").read_text().split()
    assert ran == [*hostile, "after", "spender", "last"], ran
    for task in hostile:
        assert attempt_states(doc, task) == ["merged"], (task, doc)
    # and no absurd figure was stored; each attempt's detail says it was ignored
    ws = Workspace.open(repo)
    try:
        attempts = {a.task_id: a for a in ws.store.attempts(run_id)}
    finally:
        ws.store.close()
    for task in HUGE:
        assert attempts[task].usage.input_tokens is None, attempts[task]
        assert "usage ignored, out of range: input_tokens" in attempts[task].detail
    # and the huge session id was stored cut to its cap, the summary reached the dependent's
    # prompt cut to its own
    session = attempts["chatty"].usage.session_id
    assert session is not None and session.startswith("s" * SESSION_ID_CHARS)
    assert len(session) < SESSION_ID_CHARS + 100, len(session)
    prompt = (sync / "after-prompt.md").read_text()
    assert "w" * SUMMARY_CHARS in prompt
    assert "w" * (SUMMARY_CHARS + 1) not in prompt


# A stand-in for Claude Code whose stream's result event has an output token count of NaN (JSON as
# Python reads it), after leaving a mark and a file changed.
FAKE_CLAUDE = """#!{python}
import json, sys
sys.stdin.read()
with open({marks!r}, "a") as fh:
    fh.write("ran\\n")
open("stream.txt", "w").write("changed\\n")
print(json.dumps({{"type": "system", "subtype": "init", "session_id": "s1"}}))
print('{{"type": "result", "subtype": "success", "usage": {{"output_tokens": NaN}}}}')
"""


def test_a_cli_stream_event_orchardist_cannot_read_is_the_agents_error_counted_once(
    repo: Path, sync: Path, tmp_path: Path, run_plan: RunPlan
) -> None:
    # Given: a claude profile whose tool reports output_tokens NaN in its result event, on a task
    # with retries = 0
    fake = tmp_path / "fake-claude"
    fake.write_text(FAKE_CLAUDE.format(python=sys.executable, marks=str(sync / "ran")))
    fake.chmod(0o755)
    plan = write_plan(
        repo,
        f"""
[agents.cc]
kind = "claude"
command = {toml_str(fake)}

[[task]]
id = "stream"
prompt = "change something"
retries = 0
""",
    )

    # When
    run = run_plan(plan)

    # Then: the tool ran once, and its attempt is the agent's failure (counted: no retry), not
    # orchardist's own (infra_error, retried twice whatever retries says)
    assert (sync / "ran").read_text().split() == ["ran"]
    (attempt,) = run.task("stream")["attempts"]
    assert attempt["failure"] == "agent_error", attempt
    assert "cannot read" in attempt["detail"], attempt
    assert run.state is RunState.FAILED
