"""A hostile agent against the user's terminal: escape sequences in its log and its diff."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from pipeline_support import BUG, add_project, stage_plan
from run_support import orchardist
from support import Finished, toml_str, write_plan

RunPlan = Callable[..., Finished]

# A window title (OSC), clear screen and colour (CSI), an 8-bit CSI (U+009B), a bell, a
# backspace; in the log and in a file of the patch.
AGENT = r"""
printf 'title \033]0;pwned\007 clear \033[2J red \033[31mRED\033[0m '
printf 'c1 \302\23331m bell \007 bs \b end\n'
printf 'file \033]8;;http://evil\033\\link\033]8;;\033\\ \033[1A up\n' > evil.txt
"""
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_logs_and_show_print_no_escape_sequence_an_agent_wrote_unless_raw(
    repo: Path, run_plan: RunPlan
) -> None:
    # Given: a finished run whose agent printed escape sequences and committed a file of them
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(AGENT)}

        [[task]]
        id = "t"
        """,
    )
    run = run_plan(plan)
    assert run.state is RunState.DONE

    # When: its log and its candidate are printed
    logs = orchardist(repo, "logs", run.run.id, "t")
    show = orchardist(repo, "show", run.run.id, "t")
    raw = orchardist(repo, "logs", run.run.id, "t", "--raw")

    # Then: no control character but newline and tab reaches the terminal; the text does
    for printed in (logs, show):
        assert printed.returncode == 0, printed.stderr
        assert CONTROLS.findall(printed.stdout) == []
    assert "red RED c1 31m bell  bs  end" in logs.stdout
    assert "+file link  up" in show.stdout, show.stdout
    # and --raw prints the log as it is
    assert "\x1b]0;pwned\x07" in raw.stdout


def test_run_and_status_print_no_escape_sequence_an_agent_put_in_a_failure_s_detail(
    repo: Path, shell_scripts: Callable[..., str]
) -> None:
    # Given: a debug task whose localize agent names a file with a window title and a screen
    # clear in its name (the stage refuses it, and the detail quotes the name), and no retry
    add_project(repo)
    evil = "\x1b]0;pwned\x07\x1b[2Jnope\x9b31m.py"
    handoff = json.dumps({"handoff": {"files": [evil]}})
    plan = stage_plan(
        repo,
        shell_scripts,
        f"""
        [[task]]
        id = "bug"
        prompt = {toml_str(BUG)}
        agent = "sh"
        pipeline = "debug"
        check = "python -c 'from calc import mean; assert mean([]) == 0.0'"
        stages.localize.retries = 0
        """,
        **{"bug.localize": f"printf '%s' {shlex.quote(handoff)} > \"$ORCHARDIST_OUTPUT\"\n"},
    )

    # When: it runs from the command line, and its status is printed
    ran = orchardist(repo, "run", str(plan))
    shown = orchardist(repo, "status")

    # Then: the detail is printed, the name in it, without one control character
    assert ran.returncode != 0
    for printed in (ran, shown):
        assert "files not in the repository: nope31m.py" in printed.stdout, printed.stdout
        assert CONTROLS.findall(printed.stdout + printed.stderr) == []
