"""Config files: agent profiles in ``.orchardist.toml`` and ``~/.config/orchardist/config.toml``
that plans (and ``plan``, ``fix``, ``debug``) can use; a plan's own profiles win."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist import PlanError, load_plan
from orchardist.config import user_config
from orchardist.plan.loading import load_config
from run_support import orchardist as run_cli
from support import git, write_plan


@pytest.fixture(autouse=True)
def _no_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def user_file(text: str) -> Path:
    path = user_config()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def profile(name: str, echo: str, extra: str = "") -> str:
    return f'[agents.{name}]\nkind = "shell"\ncommand = "echo {echo} > out.txt"\n{extra}\n'


TASK_USING = """
[[task]]
id = "t"
prompt = "p"
agent = "{agent}"
verify = "test -f out.txt"
"""


def test_a_plan_uses_a_profile_from_the_repository_config(repo: Path) -> None:
    (repo / ".orchardist.toml").write_text(profile("helper", "repo"))
    plan = load_plan(write_plan(repo, TASK_USING.format(agent="helper")))
    assert plan.agents["helper"].options["command"] == "echo repo > out.txt"


def test_the_plan_wins_over_the_user_who_wins_over_the_repository(repo: Path) -> None:
    # Given: "a" in all three places, "b" in the two config files, "c" only in the
    # repository's, "d" only in the user's
    user_file(profile("a", "user") + profile("b", "user") + profile("d", "user"))
    repo_file = repo / ".orchardist.toml"
    repo_file.write_text(profile("a", "repo") + profile("b", "repo") + profile("c", "repo"))
    text = profile("a", "plan") + TASK_USING.format(agent="a")

    plan = load_plan(write_plan(repo, text))

    def says(name: str) -> str:
        return str(plan.agents[name].options["command"]).split()[1]

    # Then: a repository cannot replace the user's own profile; the one it lost is named
    assert [says(n) for n in "abcd"] == ["plan", "user", "repo", "user"]
    assert [(i.file, i.key) for i in plan.ignored] == [
        (repo_file, "agents.a"),
        (repo_file, "agents.b"),
    ]


def test_a_trusted_repository_wins_over_the_user(repo: Path) -> None:
    # Given: the user trusts the repository (by a path naming it another way)
    user_file(f"trusted_repositories = [{str(repo / 'x' / '..')!r}]\n" + profile("b", "user"))
    (repo / ".orchardist.toml").write_text(profile("b", "repo", 'env = ["HOME"]'))

    plan = load_plan(write_plan(repo, TASK_USING.format(agent="b")))

    assert plan.agents["b"].options["command"] == "echo repo > out.txt"
    assert plan.agents["b"].env == ("HOME",) and plan.ignored == ()


def test_a_task_without_agent_takes_the_plans_only_profile_whatever_the_config_has(
    repo: Path,
) -> None:
    (repo / ".orchardist.toml").write_text(profile("other", "x") + profile("more", "y"))
    plan = load_plan(write_plan(repo, profile("mine", "z") + '[[task]]\nid = "t"\nprompt = "p"\n'))
    assert plan.tasks[0].agent == "mine"

    # and with no profile of its own, the config's only profile
    (repo / ".orchardist.toml").write_text(profile("only", "x"))
    plan = load_plan(write_plan(repo, '[[task]]\nid = "t"\nprompt = "p"\n'))
    assert plan.tasks[0].agent == "only"


def test_problems_in_a_config_file_name_that_file(repo: Path) -> None:
    # Given: a bad kind in the user's config, an unknown top-level table and an unknown
    # fallback in the repository's
    user = user_file('[agents.u]\nkind = "telepathy"\n')
    (repo / ".orchardist.toml").write_text(
        profile("r", "r", 'fallback = "nobody"') + '[run]\nverify = "true"\n'
    )

    with pytest.raises(PlanError) as caught:
        load_plan(write_plan(repo, TASK_USING.format(agent="r")))

    shown = {(p.file, p.field) for p in caught.value.problems}
    assert (str(user), "agents.u.kind") in shown
    assert (str(repo / ".orchardist.toml"), "run") in shown
    messages = [str(p) for p in caught.value.problems]
    assert any("telepathy" in m and str(user) in m for m in messages)
    assert not any(p.file.endswith("plan.toml") for p in caught.value.problems)


def test_an_unknown_fallback_of_a_config_profile_names_the_config_file(repo: Path) -> None:
    (repo / ".orchardist.toml").write_text(profile("r", "r", 'fallback = "nobody"'))

    with pytest.raises(PlanError) as caught:
        load_plan(write_plan(repo, TASK_USING.format(agent="r")))

    [problem] = caught.value.problems
    assert problem.file == str(repo / ".orchardist.toml")
    assert problem.field == "agents.r.fallback" and "nobody" in problem.message


def test_a_plan_profile_may_fall_back_to_a_config_profile(repo: Path) -> None:
    user_file(profile("spare", "spare"))
    plan = load_plan(
        write_plan(
            repo, profile("main", "m", 'fallback = "spare"') + TASK_USING.format(agent="main")
        )
    )
    assert plan.agents["main"].fallback == "spare" and "spare" in plan.agents


def test_the_user_config_needs_no_repository_and_holds_only_profiles(repo: Path) -> None:
    path = user_file(profile("u", "u") + '[[task]]\nid = "t"\nprompt = "p"\n')
    with pytest.raises(PlanError) as caught:
        load_config(repo)
    assert [(p.file, p.field) for p in caught.value.problems] == [(str(path), "task")]

    path.write_text(profile("u", "u"))
    assert list(load_config(repo).profiles) == ["u"]


def test_xdg_config_home_moves_the_user_config(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user_file(profile("x", "x"))
    assert (tmp_path / "xdg" / "orchardist" / "config.toml").is_file()
    assert list(load_config(repo).profiles) == ["x"]


def test_a_run_of_a_plan_with_a_config_profile_lands_its_work(repo: Path) -> None:
    # Given: a committed config file with the profile, and a plan that names it only
    (repo / ".orchardist.toml").write_text(profile("helper", "from-config"))
    git(repo, "add", ".orchardist.toml")
    git(repo, "commit", "-qm", "config")
    write_plan(repo, TASK_USING.format(agent="helper"))

    # When
    out = run_cli(repo, "run", "plan.toml", "--json", timeout_s=300)

    # Then
    assert out.returncode == 0, out.stderr
    branch = git(repo, "branch", "--list", "orchardist/*").split()[-1]
    assert git(repo, "show", f"{branch}:out.txt") == "from-config"


def test_validate_shows_a_config_problem_with_its_file_and_exits_2(repo: Path) -> None:
    user = user_file('[agents.u]\nkind = "shell"\ncommand = 3\n')
    write_plan(repo, profile("a", "a") + TASK_USING.format(agent="a"))

    out = run_cli(repo, "validate", "plan.toml")

    assert out.returncode == 2
    assert f"{user}: agents.u.command" in out.stderr
    assert "Traceback" not in out.stderr


def test_doctor_checks_the_config_profiles_a_plan_uses_and_no_others(repo: Path) -> None:
    # Given: two config profiles whose CLIs are missing; the plan uses one of them
    user_file(
        '[agents.used]\nkind = "codex"\ncommand = "no-such-codex-used"\n'
        '[agents.unused]\nkind = "codex"\ncommand = "no-such-codex-unused"\n'
    )
    write_plan(repo, profile("mine", "m") + TASK_USING.format(agent="used"))

    # When
    out = run_cli(repo, "doctor", "plan.toml", "--json")

    # Then: the plan's own profile and the config profile it uses are checked, not the other
    assert out.returncode == 1
    assert "no-such-codex-used" in out.stdout and "no-such-codex-unused" not in out.stdout
    assert '"mine"' in out.stdout


# What a repository's config file may not set unless trusted, kind by kind (docs/pipelines.md).
WIDENING = {
    "shell": ["env"],
    "scripted": ["env"],
    "claude": ["allowed_tools", "args", "command", "env", "permission"],
    "gemini": ["allowed_tools", "args", "command", "env", "permission"],
    "codex": ["args", "command", "env", "permission"],
    "aider": ["args", "command", "env", "permission"],
    "opencode": ["args", "command", "env", "permission"],
    "llm": ["api_key_env", "env"],
}
KEPT = {"timeout": '"5m"', "max_parallel": "2", "fallback": '"shell"'}


def test_each_kind_loses_exactly_its_widening_keys_from_an_untrusted_repository(
    repo: Path,
) -> None:
    # Given: one repository profile per kind, each setting every key of its kind that widens
    # what the agent receives, and a few that do not
    from orchardist.agents import KINDS, agent_class

    assert sorted(WIDENING) == sorted(KINDS)
    values = {
        "env": '["HOME"]',
        "command": '"./evil"',
        "args": '["--yolo"]',
        "permission": '"x"',
        "allowed_tools": '["Bash"]',
        "api_key_env": '"HOME"',
    }
    text = ""
    for kind, keys in WIDENING.items():
        own = {"llm": {"base_url": '"http://127.0.0.1:9/v1"', "model": '"m"'}}.get(kind, {})
        if kind == "shell":
            own = {"command": '"true"'}
        body = {**KEPT, **own, **{k: values[k] for k in keys if k not in own}}
        text += f'[agents.{kind}]\nkind = "{kind}"\n'
        text += "".join(f"{k} = {v}\n" for k, v in body.items())
    config = repo / ".orchardist.toml"
    config.write_text(text)

    # When
    loaded = load_config(repo)

    # Then: each widening key is named once, and only those; the others are kept
    shown = [item.key for item in loaded.ignored]
    assert shown == [f"agents.{kind}.{key}" for kind, keys in WIDENING.items() for key in keys]
    assert all(item.file == config for item in loaded.ignored)
    for kind in WIDENING:
        got = loaded.profiles[kind]
        assert (got.env, got.timeout_s, got.max_parallel) == ((), 300.0, 2)
        assert not set(got.options) & agent_class(kind).widening_keys
