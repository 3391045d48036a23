"""Hostile agents against orchardist's own file handling: the attempt's ``junit`` folder (where
pytest verify commands write their reports) replaced by a symlink to a folder of the user's.

orchardist removes a stale report before each pytest command and reads the new one after it;
done through such a link, its own unconfined process deleted ``0.xml``, ``1.xml`` and
``check.xml`` wherever the user can write. The outcome is the victim folder's files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support import Finished, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]

REPORTS = ("0.xml", "1.xml", "check.xml")
# A verify command that looks like pytest (so orchardist expects a JUnit report) and passes.
PYTEST = "pytest() { :; }; pytest"
# A verify command that looks like pytest, so it is told where its report goes (the junit
# folder, in PYTEST_ADDOPTS), and runs {act} on that folder instead of tests.
JUNIT_DIR = (
    'pytest() {{ f=${{PYTEST_ADDOPTS#--junitxml=}}; j=$(dirname "${{f%% *}}"); {act}; }}; pytest'
)
RELINK = 'rm -rf "$j" && ln -s {victim} "$j" && touch {sync}/relinked-tests'
# The check: fails on the base (no agent.txt there), passes on the attempt, looks like pytest.
CHECK = "test -f agent.txt && { pytest() { :; }; pytest; }"


def victim_folder(root: Path) -> Path:
    """A folder of the user's, outside every attempt, holding files named like reports."""
    root.mkdir()
    for name in REPORTS:
        (root / name).write_text(f"the user's own {name}\n")
    return root


def test_a_junit_folder_made_a_symlink_never_makes_orchardist_delete_through_it(
    repo: Path, sync: Path, tmp_path: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: folders of the user's with files 0.xml, 1.xml and check.xml; task "agent"'s agent
    # replaces its junit folder with a symlink to one of them; task "tests"'s first verify
    # command does the same (after orchardist made the folder afresh) before a pytest command
    victims = {task: victim_folder(tmp_path / f"victim-{task}") for task in ("agent", "tests")}
    command = shell_scripts(
        agent=f"""echo agent > agent.txt
        junit="$(dirname "$ORCHARDIST_OUTPUT")/junit"
        rm -rf "$junit"; ln -s {victims["agent"]} "$junit"; touch "$SYNC/linked-agent"
        """,
        tests="echo tests > tests.txt",
    )
    relink = JUNIT_DIR.format(act=RELINK.format(victim=victims["tests"], sync=sync))
    plan = write_plan(
        repo,
        f"""
[run]
max_parallel = 2

[agents.sh]
kind = "shell"
command = {toml_str(command)}

[[task]]
id = "agent"
verify = [{_plan_command(PYTEST)}, {_plan_command(PYTEST)}]
check = {_plan_command(CHECK)}

[[task]]
id = "tests"
verify = [{_plan_command(relink)}, {_plan_command(PYTEST)}]
""",
    )
    ground = user_ground(repo)

    # When
    run = run_plan(plan)

    # Then: the hostile code really ran (its markers), and every file of the user's is intact
    assert (sync / "linked-agent").exists()
    assert (sync / "relinked-tests").exists()
    for task, victim in victims.items():
        assert sorted(p.name for p in victim.iterdir()) == sorted(REPORTS), task
        for name in REPORTS:
            assert (victim / name).read_text() == f"the user's own {name}\n", (task, name)
    assert run.states() == {"agent": "done", "tests": "done"}
    assert_untouched(repo, ground)


def test_a_report_made_a_folder_by_an_earlier_command_is_no_report_and_no_infra_error(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a task whose first verify command makes a folder where the next one's JUnit report
    # goes (orchardist removes a stale report first), on a task with retries = 0
    block = JUNIT_DIR.format(act=f'mkdir "$j/1.xml" && touch {sync}/blocked')
    command = shell_scripts(t="echo t > t.txt")
    plan = write_plan(
        repo,
        f"""
[agents.sh]
kind = "shell"
command = {toml_str(command)}

[[task]]
id = "t"
retries = 0
verify = [{_plan_command(block)}, {_plan_command(PYTEST)}]
""",
    )

    # When
    run = run_plan(plan)

    # Then: the folder was made, and the task merged on its commands' exit codes, first time
    assert (sync / "blocked").exists()
    assert run.states() == {"t": "done"}
    assert [a["state"] for a in run.task("t")["attempts"]] == ["merged"]


def _plan_command(command: str) -> str:
    """``command`` as a plan's TOML string: its shell braces doubled, since a plan reads every
    ``{...}`` in a command as a placeholder."""
    return toml_str(command.replace("{", "{{").replace("}", "}}"))
