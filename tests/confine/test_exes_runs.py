"""Agents installed under the host's /tmp, which attempts do not see: runs and checks show by
their outcome that what the agent needs is shown inside, or refused before any attempt."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from exes_support import BUGGY, FIXER, executable, npm_install
from ns_support import require_namespaces
from orchardist.confine.confinement import SHARE_READONLY_VAR
from run_support import only_run, orchardist, status
from support import git, make_repo, write_plan

VERIFY = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"


@pytest.fixture
def hidden_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts see the host's /tmp as a real run does: not at all (the suite shares its own
    temporary folders with them, see conftest)."""
    require_namespaces()
    monkeypatch.delenv(SHARE_READONLY_VAR, raising=False)


def fix_plan(repo: Path, profile: str) -> None:
    write_plan(
        repo,
        f'[agents.tool]\nkind = "shell"\n{profile}\n\n[[task]]\nid = "fix"\nagent = "tool"\n'
        f'retries = 0\nprompt = "fix add"\nverify = {json.dumps(VERIFY)}\n',
    )


def merged(repo: Path) -> dict[str, object]:
    doc = status(repo, only_run(repo))
    (task,) = doc["tasks"]
    assert task["state"] == "done", task
    assert "a + b" in git(repo, "show", f"{doc['branch']}:calc.py")
    return doc


def test_a_tool_reached_through_npm_links_under_tmp_fixes_and_merges(
    tmp_path: Path, hidden_tmp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a tool installed under /tmp, on PATH by npm's .bin folder
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    bin_dir = npm_install(tmp_path / "tools", "fixer", FIXER)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fix_plan(repo, 'command = "fixer"')
    # When a run starts it in its attempt's isolation
    done = orchardist(repo, "run", "plan.toml")
    # Then it ran (through the link, inside) and its fix merged
    assert done.returncode == 0, done.stdout + done.stderr
    merged(repo)


def test_an_agent_script_under_tmp_named_by_its_command_line_runs(
    tmp_path: Path, hidden_tmp: None
) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    script = executable(tmp_path / "scripts" / "fix.sh", FIXER)
    fix_plan(repo, f'command = "sh {script}"')
    done = orchardist(repo, "run", "plan.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    merged(repo)


def test_a_command_attempts_cannot_see_is_a_located_plan_error_before_any_attempt(
    tmp_path: Path, hidden_tmp: None
) -> None:
    # Given a profile whose agent lies in an ignored folder of the repository
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, ".gitignore": "tools/\n"})
    tool = executable(repo / "tools" / "fix.sh", FIXER)
    fix_plan(repo, f'command = "{tool}"')
    # When the plan is validated, and when it is run
    checked = orchardist(repo, "validate", "plan.toml")
    ran = orchardist(repo, "run", "plan.toml")
    # Then both refuse with exit 2, naming the plan, the profile's field, the path, why, the fix
    for done in (checked, ran):
        assert done.returncode == 2, done.stdout + done.stderr
        assert "agents.tool.command" in done.stderr, done.stderr
        assert str(tool) in done.stderr and "[run] environment" in done.stderr
    assert not (repo / ".git" / "orchardist" / "runs").exists() or not os.listdir(
        repo / ".git" / "orchardist" / "runs"
    )


def test_doctor_reports_a_command_attempts_cannot_see(
    tmp_path: Path, hidden_tmp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, ".gitignore": "tools/\n"})
    tool = executable(repo / "tools" / "claude", "#!/bin/sh\necho 2.0.0\n")
    write_plan(
        repo,
        f'[agents.c]\nkind = "claude"\ncommand = "{tool}"\n\n'
        '[[task]]\nid = "t"\nagent = "c"\nprompt = "p"\n',
    )
    done = orchardist(repo, "doctor", "--json", "plan.toml")
    (profile,) = json.loads(done.stdout)["profiles"]
    assert done.returncode == 1, profile
    assert any(str(tool) in m and "inside the repository" in m for m in profile["missing"])


# -- doctor --probe runs what an attempt runs -------------------------------------------------

FAKES = Path(__file__).resolve().parents[1] / "agents" / "fakes"
# A wrapper installed like npm installs a CLI: it records its command line, the pid namespace
# it runs in and its variables' names (in the shared folder, under the run's id), then becomes
# the fake CLI.
WRAPPER = """#!/usr/bin/env python3
import json, os, sys
label = os.environ.get("ORCHARDIST_RUN", "version")
record = {{"argv": sys.argv[1:], "ns": os.readlink("/proc/self/ns/pid"), "env": sorted(os.environ)}}
with open(os.path.join({sync!r}, label + ".json"), "w") as f:
    json.dump(record, f)
os.execv(sys.executable, [sys.executable, {fake!r}, *sys.argv[1:]])
"""


def wrapped_cli(tmp_path: Path, sync: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake ``kind`` CLI behind npm's .bin link under /tmp, first on PATH."""
    script = WRAPPER.format(sync=str(sync), fake=str(FAKES / kind))
    bin_dir = npm_install(tmp_path / "tools", kind, script)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def recorded(sync: Path, label: str) -> dict[str, Any]:
    return json.loads((sync / f"{label}.json").read_text())  # type: ignore[no-any-return]


def comparable(argv: list[str]) -> list[str]:
    """A codex command line without what differs between attempts: its folder, its prompt."""
    argv = argv[:-1]
    where = argv.index("-C")
    return argv[:where] + argv[where + 2 :]


def test_the_probe_runs_the_command_line_a_run_runs_in_the_same_isolation(
    tmp_path: Path, hidden_tmp: None, sync: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given codex installed under /tmp behind npm's link, and a plan that runs it
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key")
    wrapped_cli(tmp_path, sync, "codex", monkeypatch)
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    write_plan(
        repo, '[agents.c]\nkind = "codex"\n\n[[task]]\nid = "t"\nagent = "c"\nprompt = "p"\n'
    )
    # When a run runs it, and doctor probes it
    ran = orchardist(repo, "run", "plan.toml")
    probed = orchardist(repo, "doctor", "--probe", "--json", "plan.toml")
    # Then both started it, and the probe passed
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (profile,) = json.loads(probed.stdout)["profiles"]
    assert (probed.returncode, profile["probe"]) == (0, "ok"), profile
    run, probe = recorded(sync, only_run(repo)), recorded(sync, "doctor")
    # with the same command line (codex's --sandbox included) and variables, each in a pid
    # namespace of its own
    assert comparable(probe["argv"]) == comparable(run["argv"])
    assert probe["env"] == run["env"]
    assert "danger-full-access" in probe["argv"]
    assert probe["ns"] != os.readlink("/proc/self/ns/pid")
    # and doctor says what it ran: the CLI under bwrap
    assert Path(profile["probe_argv"][0]).name == "bwrap"
    assert profile["probe_argv"][-len(probe["argv"]) - 1 :] == ["codex", *probe["argv"]]


def test_the_probe_fails_where_an_attempt_could_not_start_the_cli(
    tmp_path: Path, hidden_tmp: None, sync: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a claude CLI in an ignored folder of the repository, which attempts do not see
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, ".gitignore": "tools/\n"})
    script = WRAPPER.format(sync=str(sync), fake=str(FAKES / "claude"))
    tool = executable(repo / "tools" / "claude", script)
    write_plan(
        repo,
        f'[agents.c]\nkind = "claude"\ncommand = "{tool}"\n\n'
        '[[task]]\nid = "t"\nagent = "c"\nprompt = "p"\n',
    )
    # When doctor probes it
    probed = orchardist(repo, "doctor", "--probe", "--json", "plan.toml")
    # Then the profile fails, saying why, and no probe ran it as no attempt could
    (profile,) = json.loads(probed.stdout)["profiles"]
    assert probed.returncode == 1, profile
    assert any("inside the repository" in m for m in profile["missing"]), profile
    assert not (sync / "doctor.json").exists()


def test_a_verify_command_naming_a_script_under_tmp_is_a_located_warning(
    tmp_path: Path, hidden_tmp: None
) -> None:
    # Given a task whose verify command runs a script under /tmp, where verify cannot see it
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY})
    check = executable(tmp_path / "checks" / "check.sh", "#!/bin/sh\nexit 0\n")
    write_plan(
        repo,
        '[agents.tool]\nkind = "shell"\ncommand = "true"\n\n'
        f'[[task]]\nid = "fix"\nagent = "tool"\nprompt = "p"\nverify = "sh {check}"\n',
    )
    # When the plan is validated
    done = orchardist(repo, "validate", "plan.toml")
    # Then a warning names the task, the file and what to do
    assert done.returncode == 0, done.stderr
    assert f"task 'fix': verify: {check} is beneath /tmp" in done.stderr, done.stderr
    assert "ORCHARDIST_SHARE_READONLY" in done.stderr
