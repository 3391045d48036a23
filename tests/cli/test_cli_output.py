"""How the CLI talks: --quiet, --verbose, colour switches, the next commands, completion."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from realtools import require
from run_support import ORCHARDIST, Forked, orchardist
from support import git, toml_str, write_plan

SGR_COLOUR = re.compile(r"\x1b\[(?:\d+;)*(?:3[0-7]|38;5;\d+|38;2;[\d;]+)(?:;\d+)*m")


def plan_with_a_broken_task(repo: Path, dump_env: bool = False) -> None:
    """``fine`` passes; ``broken`` fails its verify. Agents may keep their environment in
    ``TASK.env``."""
    dump = "env > {task}.env; " if dump_env else ""
    write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(dump + "echo hi > {task}.txt")}

        [[task]]
        id = "fine"
        verify = "test -f fine.txt"

        [[task]]
        id = "broken"
        verify = "test -f nowhere.txt"
        """,
        commit=True,
    )


def test_the_summary_ends_with_the_next_commands_to_try(repo: Path) -> None:
    plan_with_a_broken_task(repo)

    done = orchardist(repo, "run", "plan.toml")

    assert done.returncode == 1
    run_id = done.stdout.split("run ", 1)[1].split()[0]
    tail = done.stdout.split("\nnext:\n", 1)[1].splitlines()
    assert tail[0] == f"  orchardist logs {run_id} broken"
    assert f"  orchardist retry {run_id}" in tail
    assert tail[-1] == f"  orchardist status {run_id}"


def test_quiet_prints_no_progress_and_only_what_did_not_end_well(repo: Path) -> None:
    plan_with_a_broken_task(repo)

    done = orchardist(repo, "run", "plan.toml", "--quiet")

    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert lines[0].startswith("run ") and ": failed" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["broken"]


def test_verbose_shows_each_events_details(repo: Path) -> None:
    plan_with_a_broken_task(repo)

    done = orchardist(repo, "-v", "run", "plan.toml")

    assert done.returncode == 1
    assert any('"agent": "sh"' in line for line in done.stdout.splitlines())


def on_a_terminal(repo: Path, *args: str, env: dict[str, str]) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal (in a fork of this process,
    ``Forked``); what it drew."""
    leader, follower = pty.openpty()
    proc = Forked(
        [*ORCHARDIST, *args],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", **env},
    )
    os.close(follower)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    proc.wait(timeout=120)
    reader.join(timeout=30)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_colours_by_default(repo: Path) -> None:
    plan_with_a_broken_task(repo)

    drawn = on_a_terminal(repo, "run", "plan.toml", env={})

    assert SGR_COLOUR.search(drawn), drawn[-2000:]


@pytest.mark.parametrize(
    ("args", "env"),
    [(("--no-color",), {}), ((), {"NO_COLOR": "1"})],
    ids=["--no-color", "NO_COLOR"],
)
def test_colour_can_be_turned_off_without_reaching_the_agents(
    repo: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    # Given: agents that keep their environment in their change
    plan_with_a_broken_task(repo, dump_env=True)

    # When: colour is turned off
    drawn = on_a_terminal(repo, "run", "plan.toml", *args, env=env)

    # Then: no colour codes; NO_COLOR does not reach the agents
    assert "fine" in drawn
    assert not SGR_COLOUR.search(drawn), repr(SGR_COLOUR.search(drawn))
    branch = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/orchardist/")
    agent_env = git(repo, "show", f"{branch}:fine.env")
    assert "PATH=" in agent_env
    assert "NO_COLOR" not in agent_env


# -- completion ------------------------------------------------------------------------------


def completion_script(tmp_path: Path, repo: Path, shell: str) -> Path:
    done = orchardist(repo, "completion", shell)
    assert done.returncode == 0, done.stderr
    path = tmp_path / f"orchardist.{shell}"
    path.write_text(done.stdout)
    return path


def test_bash_completion_loads_and_completes_commands_options_and_choices(
    repo: Path, tmp_path: Path
) -> None:
    script = completion_script(tmp_path, repo, "bash")
    probe = f"""
    source {script}
    complete -p orchardist
    COMP_WORDS=(orchardist ret); COMP_CWORD=1; _orchardist; echo "1:${{COMPREPLY[*]}}"
    COMP_WORDS=(orchardist run --on); COMP_CWORD=2; _orchardist; echo "2:${{COMPREPLY[*]}}"
    COMP_WORDS=(orchardist graph --format m); COMP_CWORD=3; _orchardist; echo "3:${{COMPREPLY[*]}}"
    """

    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "complete -o filenames -F _orchardist orchardist",
        "1:retry",
        "2:--only",
        "3:mermaid",
    ]


def test_zsh_completion_loads(repo: Path, tmp_path: Path) -> None:
    require(shutil.which("zsh") is not None, "zsh is not installed (.ci/run installs it)")
    script = completion_script(tmp_path, repo, "zsh")
    probe = (
        f"autoload -U compinit; compinit -u -D; source {script}; print -r -- $_comps[orchardist]"
    )

    done = subprocess.run(
        ["zsh", "-fc", probe], capture_output=True, text=True, check=False, cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "_orchardist"
    assert done.stderr == ""


def test_fish_completion_loads_and_completes(repo: Path, tmp_path: Path) -> None:
    require(shutil.which("fish") is not None, "fish is not installed (.ci/run installs it)")
    script = completion_script(tmp_path, repo, "fish")
    probe = f"source {script}; complete -C'orchardist ret'; complete -C'orchardist graph --format '"

    done = subprocess.run(
        ["fish", "--no-config", "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)},
    )

    assert done.returncode == 0, done.stderr
    words = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert words == ["retry", "dot", "mermaid", "text"]


def _doc(states: list[str]) -> dict[str, object]:
    tasks = [
        {"id": f"t{i:05d}", "state": s, "commit": None, "attempts": [], "reason": None}
        for i, s in enumerate(states)
    ]
    return {
        "run": "r1",
        "state": "failed",
        "branch": "orchardist/r1",
        "tasks": tasks,
        "unverified": [t["id"] for t in tasks if t["state"] == "done"],
    }


def test_a_large_runs_summary_gives_counts_and_the_first_few_tasks_not_every_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from orchardist.cli.summary import SUMMARY_ROWS, print_summary

    # Given a run of 10,000 tasks, two of which failed late in the plan
    states = ["done"] * 10_000
    states[7000] = states[9000] = "failed"
    # When its final summary is printed
    print_summary(_doc(states), limit=SUMMARY_ROWS)
    out = capsys.readouterr().out
    # Then it is short, counts by state, and shows the failures first
    lines = out.splitlines()
    assert len(lines) <= SUMMARY_ROWS + 5, out
    assert "  tasks: 9998 done, 2 failed" in lines
    assert lines[2].split()[:2] == ["t07000", "failed"] and lines[3].split()[0] == "t09000"
    assert "... and 9980 more" in out
    assert "t00000, t00001, t00002, t00003, t00004 and 9993 more (9998 in all)" in out
    assert "t09999" not in out


def test_a_small_runs_summary_lists_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    from orchardist.cli.summary import SUMMARY_ROWS, print_summary

    print_summary(_doc(["done", "failed", "done"]), limit=SUMMARY_ROWS)
    out = capsys.readouterr().out
    assert "tasks:" not in out and "more" not in out
    assert [line.split()[0] for line in out.splitlines()[1:4]] == ["t00000", "t00001", "t00002"]
    assert "merged without verify commands: t00000, t00002" in out
