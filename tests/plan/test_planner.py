"""``orchardist plan``: a planner agent's plan, validated and sent back until it is right."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from orchardist.config import user_config
from run_support import orchardist as run_cli
from support import git

CONFIG = """
[agents.planner]
kind = "shell"
command = '''
cp {sync}/plan$ORCHARDIST_ROUND.toml "$ORCHARDIST_PLAN_FILE"
cp "$ORCHARDIST_PROMPT_FILE" {sync}/prompt$ORCHARDIST_ROUND.md
ls > {sync}/seen$ORCHARDIST_ROUND.txt
'''

[agents.editor]
kind = "shell"
command = "echo {{task}} > {{task}}.txt"
"""

EDITOR = """
[agents.editor]
kind = "shell"
command = "echo {task} > {task}.txt"
"""

# Round 1: a cycle and an unknown agent. Round 2: right.
BAD = (
    EDITOR
    + """
[[task]]
id = "a"
prompt = "a"
agent = "editor"
depends_on = ["b"]

[[task]]
id = "b"
prompt = "b"
agent = "ghost"
depends_on = ["a"]
"""
)
GOOD = (
    EDITOR
    + """
[run]
verify = "test -f a.txt"

[[task]]
id = "a"
prompt = "a"
agent = "editor"

[[task]]
id = "b"
prompt = "b"
agent = "editor"
depends_on = ["a"]
"""
)


def orchardist(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(repo, *args, timeout_s=300)


def setup(repo: Path, sync: Path, *plans: str) -> Path:
    sync.mkdir(exist_ok=True)
    user = user_config()  # the user's own profiles: a planner may copy them whole
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(CONFIG.replace("{sync}", str(sync)))
    for n, text in enumerate(plans, 1):
        (sync / f"plan{n}.toml").write_text(textwrap.dedent(text))
    spec = repo / "SPEC.md"
    spec.write_text("Add a.txt, then b.txt.\n")
    return spec


def test_a_plan_with_a_cycle_and_an_unknown_agent_is_corrected_in_the_second_round(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a planner whose first plan has a cycle and an unknown agent, and whose second is
    # right
    sync = tmp_path / "sync"
    setup(repo, sync, BAD, GOOD)

    # When
    out = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "-o", "plan.toml")

    # Then: round 1's problems were reported and sent back; round 2's plan was written
    assert out.returncode == 0, out.stderr
    assert "round 1: " in out.stderr and "round 2: valid" in out.stderr
    assert "a -> b -> a" in out.stderr or "b -> a -> b" in out.stderr
    assert "ghost" in out.stderr
    assert (repo / "plan.toml").read_text() == textwrap.dedent(GOOD)
    second_prompt = (sync / "prompt2.md").read_text()
    assert "ghost" in second_prompt and "Add a.txt, then b.txt." in second_prompt
    assert "[agents.editor]" in (sync / "prompt1.md").read_text()  # profiles to copy
    # the planner saw a copy of the repository's HEAD, not the checkout
    assert "README.md" in (sync / "seen1.txt").read_text()
    assert "SPEC.md" not in (sync / "seen1.txt").read_text()  # uncommitted: not in HEAD
    # and the graph of the plan is shown
    assert "critical path" in out.stdout.lower()
    assert orchardist(repo, "validate", "plan.toml").returncode == 0
    # nothing but the plan was left in the folder
    assert sorted(p.name for p in repo.iterdir() if p.name.startswith(".orchardist-plan")) == []


def test_no_valid_plan_after_the_last_round_writes_nothing(repo: Path, tmp_path: Path) -> None:
    setup(repo, tmp_path / "sync", BAD, BAD)

    out = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "--rounds", "2")

    assert out.returncode == 1
    assert "round 2: " in out.stderr and "no valid plan after 2 round(s)" in out.stderr
    assert not (repo / "plan.toml").exists()


def test_a_planner_that_writes_nothing_is_told_so(repo: Path, tmp_path: Path) -> None:
    setup(repo, tmp_path / "sync", GOOD)  # no plan2.toml: round 2's cp fails

    out = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "--rounds", "1")
    assert out.returncode == 0, out.stderr

    (tmp_path / "sync" / "plan1.toml").unlink()
    out = orchardist(
        repo, "plan", "SPEC.md", "--agent", "planner", "--rounds", "1", "-o", "p2.toml"
    )
    assert out.returncode == 1
    assert "the planner failed" in out.stderr or "no plan was written" in out.stderr


def test_bad_usage_exits_2(repo: Path, tmp_path: Path) -> None:
    setup(repo, tmp_path / "sync", GOOD)

    unknown = orchardist(repo, "plan", "SPEC.md", "--agent", "nobody")
    assert unknown.returncode == 2 and "planner" in unknown.stderr  # names what exists
    no_tty = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "--run")
    assert no_tty.returncode == 2 and "--yes" in no_tty.stderr
    missing = orchardist(repo, "plan", "NOPE.md", "--agent", "planner")
    assert missing.returncode == 2 and "NOPE.md" in missing.stderr
    for out in (unknown, no_tty, missing):
        assert "Traceback" not in out.stderr
    assert not (repo / "plan.toml").exists()


def test_run_yes_runs_the_plan(repo: Path, tmp_path: Path) -> None:
    setup(repo, tmp_path / "sync", GOOD)

    out = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "--run", "--yes")

    assert out.returncode == 0, out.stderr
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    assert git(repo, "show", f"{branch}:b.txt").strip() == "b"


def test_an_existing_plan_is_never_overwritten_without_force(repo: Path, tmp_path: Path) -> None:
    # Given a plan the user wrote by hand where the planner would write
    setup(repo, tmp_path / "sync", GOOD, GOOD)
    (repo / "plan.toml").write_text("# mine\n")
    # When plan runs without --force: refused before the planner starts, the file untouched
    refused = orchardist(repo, "plan", "SPEC.md", "--agent", "planner")
    assert refused.returncode == 2
    assert "plan.toml already exists: pass --force" in refused.stderr
    assert (repo / "plan.toml").read_text() == "# mine\n"
    assert not (tmp_path / "sync" / "prompt1.md").exists()  # the planner never ran
    # With --force it is replaced by the planner's plan
    forced = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "--force")
    assert forced.returncode == 0, forced.stderr
    assert 'id = "b"' in (repo / "plan.toml").read_text()


# A planned plan that widens what its agent gets: isolation off, the network, a secret passed
# through to a profile that writes its environment into the tree.
WIDE = """
[run]
isolation = "off"
network = true

[agents.editor]
kind = "shell"
command = "env > {task}.txt"
env = ["GITHUB_TOKEN"]

[[task]]
id = "a"
prompt = "a"
agent = "editor"
"""
NARROW = """
[agents.editor]
kind = "shell"
command = "env > {task}.txt"

[[task]]
id = "a"
prompt = "a"
agent = "editor"
"""


def test_a_planned_plan_may_not_widen_what_agents_get_and_is_sent_back(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a planner whose first plan turns isolation off, allows the network and passes
    # the user's GITHUB_TOKEN through; its second plan sets none of it
    setup(repo, tmp_path / "sync", WIDE, NARROW)

    # When: run without reading it, the token in the environment
    command = ["plan", "SPEC.md", "--agent", "planner", "--run", "--yes"]
    out = subprocess.run(
        [sys.executable, "-m", "orchardist", *command],
        cwd=repo,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "GITHUB_TOKEN": "fake-ghp-91be07"},
        timeout=300,
    )

    # Then: each widening key was a problem of round 1; round 2's plan ran
    assert out.returncode == 0, out.stderr
    for key in ("run.isolation", "run.network", "agents.editor.env"):
        assert f"plan.toml: {key}: widens what agents receive" in out.stderr, key
    assert "round 2: valid" in out.stderr
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    seen = git(repo, "show", f"{branch}:a.txt")
    assert "PATH=" in seen and "fake-ghp-91be07" not in seen


def test_the_planner_is_not_shown_an_untrusted_repository_profile_to_copy(
    repo: Path, tmp_path: Path
) -> None:
    # Given: the repository's config has a profile passing a secret through
    setup(repo, tmp_path / "sync", GOOD)
    (repo / ".orchardist.toml").write_text(
        '[agents.theirs]\nkind = "shell"\ncommand = "true"\nenv = ["GITHUB_TOKEN"]\n'
    )

    # When
    out = orchardist(repo, "plan", "SPEC.md", "--agent", "planner", "-o", "plan.toml")

    # Then: the planner may name it, but is not shown its table (nor the key left out)
    assert out.returncode == 0, out.stderr
    prompt = (tmp_path / "sync" / "prompt1.md").read_text()
    assert "theirs" in prompt and "[agents.editor]" in prompt
    assert "GITHUB_TOKEN" not in prompt and "[agents.theirs]" not in prompt
    assert "orchardist: ignored agents.theirs.env in " in out.stderr
