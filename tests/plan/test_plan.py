"""Plan files: TOML and YAML load into the same Plan, and every problem is reported at once."""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

import pytest

from orchardist.errors import PlanError, Problem
from orchardist.plan.loading import load_plan
from orchardist.specs import Plan, RunConfig, parse_duration
from support import make_repo, write_plan

AGENT = """
[agents.bot]
kind = "shell"
command = "true"
"""


def problems_of(plan: Path) -> list[tuple[str | None, str | None, str]]:
    """Load a plan that must fail; return its problems as (task, field, message)."""
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    for problem in caught.value.problems:
        assert problem.file == str(plan)
    return [(p.task, p.field, p.message) for p in caught.value.problems]


# -- loading -----------------------------------------------------------------------------


def test_a_toml_plan_loads_every_field_of_its_run_agents_and_tasks(repo: Path) -> None:
    # Given a plan that sets every field
    plan_path = write_plan(
        repo,
        """
        [run]
        base = "main"
        branch = "feature/{run}"
        max_parallel = 3
        verify = ["make test"]

        [agents.bot]
        kind = "shell"
        command = "do-it {task}"
        timeout = "10m"
        max_parallel = 2
        env = ["API_KEY"]
        launch_interval = "2s"
        fallback = "other"

        [agents.other]
        kind = "shell"
        command = "true"

        [[task]]
        id = "parse"
        title = "Write the parser"
        prompt = "Parse things."
        agent = "bot"
        retries = 2
        timeout = "1h30m"
        priority = 5
        estimate = "5m"
        workdir = "src"

        [[task]]
        id = "docs"
        agent = "other"
        depends_on = ["parse", "parse"]
        verify = "none"
        """,
    )

    # When it is loaded
    plan = load_plan(plan_path)

    # Then every value is where it belongs
    assert plan.path == plan_path.resolve()
    assert plan.repo == repo.resolve()
    assert plan.run == RunConfig(
        base="main", branch="feature/{run}", max_parallel=3, verify=("make test",), workdir="."
    )
    bot = plan.agents["bot"]
    assert (bot.kind, bot.timeout_s, bot.max_parallel) == ("shell", 600.0, 2)
    assert (bot.env, bot.launch_interval_s, bot.fallback) == (("API_KEY",), 2.0, "other")
    assert dict(bot.options) == {"command": "do-it {task}"}
    parse, docs = plan.tasks
    assert (parse.id, parse.title, parse.prompt, parse.agent) == (
        "parse",
        "Write the parser",
        "Parse things.",
        "bot",
    )
    assert (parse.retries, parse.timeout_s, parse.priority, parse.estimate) == (2, 5400.0, 5, 300.0)
    assert (parse.workdir, parse.verify, parse.index) == ("src", ("make test",), 0)
    assert docs.depends_on == ("parse",)  # duplicates collapse
    assert docs.verify == ()  # "none" opts out of the run's verify
    assert docs.index == 1
    assert plan.task("docs") is docs


def test_a_yaml_plan_loads_to_the_same_plan_as_its_toml_twin(repo: Path) -> None:
    # Given the same plan written in TOML and in YAML
    toml_path = write_plan(
        repo,
        """
        [run]
        verify = "pytest -q"

        [agents.bot]
        kind = "shell"
        command = "true"
        timeout = 90

        [[task]]
        id = "a"
        prompt = "do a"

        [[task]]
        id = "b"
        depends_on = ["a"]
        estimate = 2.5
        """,
    )
    yaml_path = write_plan(
        repo,
        """
        run:
          verify: pytest -q
        agents:
          bot:
            kind: shell
            command: "true"
            timeout: 90
        tasks:
          - id: a
            prompt: do a
          - id: b
            depends_on: [a]
            estimate: 2.5
        """,
        name="plan.yaml",
    )

    # When both are loaded
    from_toml, from_yaml = load_plan(toml_path), load_plan(yaml_path)

    # Then they describe the same run
    assert from_yaml.run == from_toml.run
    assert from_yaml.agents == from_toml.agents
    assert from_yaml.tasks == from_toml.tasks


def test_a_yml_suffix_is_read_as_yaml(repo: Path) -> None:
    plan = write_plan(
        repo, "agents: {bot: {command: 'true'}}\ntask: [{id: only}]\n", name="plan.yml"
    )
    assert [t.id for t in load_plan(plan).tasks] == ["only"]


def test_unset_fields_take_their_defaults(repo: Path) -> None:
    # Given a plan with one agent profile and a bare task
    plan_path = write_plan(repo, AGENT + '[[task]]\nid = "bare"\n')

    # When it is loaded
    plan = load_plan(plan_path)

    # Then the run and the task carry the defaults docs/plan.md gives (written out here: a
    # comparison with RunConfig() would read the defaults back and pass whatever they were)
    run = plan.run
    assert (run.base, run.branch, run.max_parallel) == (
        "HEAD",
        "orchardist/{run}",
        os.cpu_count() or 2,
    )
    assert (run.verify, run.workdir, run.candidates, run.select) == ((), ".", 1, "smallest")
    assert (run.retry_backoff_s, run.deadline_s, run.max_cost_usd) == (1.0, None, None)
    assert (run.regression, run.regression_every, run.max_patch_mb) == ((), 1, 50.0)
    assert (run.guard_checkout, run.isolation, run.network) == (True, "auto", False)
    assert (run.workspace, run.executor, run.ray_address) == (None, "local", "auto")
    (task,) = plan.tasks
    assert task.title == "bare"
    assert task.prompt == ""
    assert task.agent == "bot"  # the only profile is everyone's agent
    assert (task.depends_on, task.verify, task.retries) == ((), (), 0)
    assert (task.timeout_s, task.priority, task.estimate) == (3600.0, 0, 1.0)  # "1h"
    assert task.workdir == "."
    assert plan.agents["bot"].timeout_s is None
    assert plan.agents["bot"].launch_interval_s == 0.0


def test_a_task_without_a_prompt_is_prompted_with_its_title(repo: Path) -> None:
    plan = load_plan(write_plan(repo, AGENT + '[[task]]\nid = "t"\ntitle = "Fix the bug"\n'))
    assert plan.tasks[0].prompt == "Fix the bug"


def test_a_blank_title_falls_back_to_the_task_id(repo: Path) -> None:
    plan = load_plan(write_plan(repo, AGENT + '[[task]]\nid = "t"\ntitle = "   "\n'))
    assert plan.tasks[0].title == "t"


def test_a_plan_in_a_subfolder_runs_its_tasks_in_that_folder(repo: Path) -> None:
    # Given a plan inside a folder of the repository
    (repo / "tools" / "plans").mkdir(parents=True)
    plan_path = write_plan(repo, AGENT + '[[task]]\nid = "t"\n', name="tools/plans/plan.toml")

    # When it is loaded
    plan = load_plan(plan_path)

    # Then the repository is found above it, and the folder is the default workdir
    assert plan.repo == repo.resolve()
    assert plan.run.workdir == "tools/plans"
    assert plan.tasks[0].workdir == "tools/plans"


def test_run_repo_points_at_a_repository_elsewhere(tmp_path: Path) -> None:
    # Given a repository and a plan that lives outside it
    target = make_repo(tmp_path / "project")
    outside = tmp_path / "plans"
    outside.mkdir()
    plan_path = write_plan(outside, '[run]\nrepo = "../project"\n' + AGENT + '[[task]]\nid = "t"\n')

    # When it is loaded, the plan belongs to that repository
    assert load_plan(plan_path).repo == target.resolve()


def test_the_digest_is_the_sha256_of_the_plan_file(repo: Path) -> None:
    plan_path = write_plan(repo, AGENT + '[[task]]\nid = "t"\n')
    assert load_plan(plan_path).digest == hashlib.sha256(plan_path.read_bytes()).hexdigest()


def test_asking_a_plan_for_a_task_it_lacks_raises_key_error(repo: Path) -> None:
    plan: Plan = load_plan(write_plan(repo, AGENT + '[[task]]\nid = "t"\n'))
    with pytest.raises(KeyError):
        plan.task("missing")


# -- durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        (2.5, 2.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("1d", 86400.0),
        (" 2M ", 120.0),
    ],
)
def test_a_duration_is_read_in_seconds(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        0,
        -5,
        "0s",
        "-5m",
        "",
        "5 minutes",
        "5x",
        "h",
        "1h30",
        ".5s",
        True,
        None,
        [5],
        float("inf"),
        float("nan"),
    ],
)
def test_a_bad_duration_is_rejected(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", '"soon"', "true"])
def test_a_plan_with_a_bad_timeout_names_the_task_and_field(repo: Path, value: str) -> None:
    plan = write_plan(repo, AGENT + f'[[task]]\nid = "t"\ntimeout = {value}\n')
    ((task, fld, _),) = problems_of(plan)
    assert (task, fld) == ("t", "timeout")


# -- verify and prompt_file --------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_verify", "task_verify", "expected"),
    [
        (None, None, ()),
        ('"pytest"', None, ("pytest",)),
        ('["ruff check", "pytest"]', None, ("ruff check", "pytest")),
        ('"pytest"', '"make check"', ("make check",)),
        ('"pytest"', '["a", "b"]', ("a", "b")),
        ('"pytest"', '"none"', ()),
        ('"none"', None, ()),
    ],
)
def test_verify_is_a_string_a_list_or_none_and_a_task_overrides_the_run(
    repo: Path, run_verify: str | None, task_verify: str | None, expected: tuple[str, ...]
) -> None:
    run = f"[run]\nverify = {run_verify}\n" if run_verify else ""
    task = f"verify = {task_verify}\n" if task_verify else ""
    plan = load_plan(write_plan(repo, run + AGENT + f'[[task]]\nid = "t"\n{task}'))
    assert plan.tasks[0].verify == expected


@pytest.mark.parametrize("value", ['["pytest", "  "]', '""', "3", "[1, 2]"])
def test_an_empty_or_non_string_verify_command_is_a_problem(repo: Path, value: str) -> None:
    plan = write_plan(repo, AGENT + f'[[task]]\nid = "t"\nverify = {value}\n')
    ((task, fld, _),) = problems_of(plan)
    assert (task, fld) == ("t", "verify")


def test_a_prompt_file_is_read_relative_to_the_plan(repo: Path) -> None:
    # Given a prompt kept in a file next to the plan
    (repo / "prompts").mkdir()
    (repo / "prompts" / "long.md").write_text("# Do it\n\nCarefully.\n", encoding="utf-8")
    plan_path = write_plan(repo, AGENT + '[[task]]\nid = "t"\nprompt_file = "prompts/long.md"\n')

    # When the plan is loaded, the task's prompt is the file's text
    assert load_plan(plan_path).tasks[0].prompt == "# Do it\n\nCarefully.\n"


def test_a_missing_prompt_file_is_a_problem(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "t"\nprompt_file = "nowhere.md"\n')
    ((task, fld, message),) = problems_of(plan)
    assert (task, fld) == ("t", "prompt_file")
    assert "cannot read 'nowhere.md'" in message


def test_giving_both_prompt_and_prompt_file_is_a_problem(repo: Path) -> None:
    (repo / "p.md").write_text("from file")
    plan = write_plan(repo, AGENT + '[[task]]\nid = "t"\nprompt = "inline"\nprompt_file = "p.md"\n')
    assert problems_of(plan) == [("t", "prompt_file", "give prompt or prompt_file, not both")]


# -- every problem at once ---------------------------------------------------------------


def test_every_problem_is_reported_at_once_each_with_its_task_and_field(repo: Path) -> None:
    # Given a plan with many unrelated mistakes
    plan = write_plan(
        repo,
        """
        [run]
        verfy = "pytest"
        max_parallel = 0

        [agents.bot]
        kind = "shell"
        command = "true"

        [[task]]
        id = "a"
        promt = "typo in a key"

        [[task]]
        id = "b"
        agent = "nobody"
        timeout = "5 minutes"

        [[task]]
        id = "a"

        [[task]]
        id = "c"
        depends_on = ["ghost"]
        retries = -1
        priority = "high"
        estimate = 0
        """,
    )

    # When it is loaded, every mistake is listed, located, in one error
    assert problems_of(plan) == [
        (None, "run.verfy", "unknown key 'verfy'; did you mean 'verify'?"),
        (None, "run.max_parallel", "expected a whole number ≥ 1"),
        ("a", "promt", "unknown key 'promt'; did you mean 'prompt'?"),
        ("b", "agent", "unknown agent 'nobody' (known: bot)"),
        (
            "b",
            "timeout",
            "bad duration '5 minutes': use e.g. 90, '90s', '5m', '1h' or '1h30m'",
        ),
        ("a", "id", "duplicate task id"),
        ("c", "retries", "expected a whole number ≥ 0"),
        ("c", "priority", "expected an integer"),
        ("c", "estimate", "expected a positive number or a duration"),
        ("c", "depends_on", "unknown task 'ghost'"),
    ]


def test_the_error_message_lists_one_located_problem_per_line(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "a"\npromt = "x"\nagent = "nobody"\n')
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    assert str(caught.value).splitlines() == [
        f"{plan}: task 'a': promt: unknown key 'promt'; did you mean 'prompt'?",
        f"{plan}: task 'a': agent: unknown agent 'nobody' (known: bot)",
    ]


def test_a_problem_without_task_or_field_names_only_the_file() -> None:
    assert str(Problem("plan.toml", "invalid TOML")) == "plan.toml: invalid TOML"


def test_an_unknown_key_far_from_any_known_one_gets_no_hint(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "t"\nzzzzzz = 1\n')
    assert problems_of(plan) == [("t", "zzzzzz", "unknown key 'zzzzzz'")]


def test_an_unknown_top_level_table_is_a_problem_with_a_hint(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "t"\n[agent.x]\nkind = "shell"\n')
    assert problems_of(plan) == [(None, "agent", "unknown key 'agent'; did you mean 'agents'?")]


def test_a_task_without_an_id_is_named_by_its_position(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "ok"\n[[task]]\nprompt = "anonymous"\n')
    assert problems_of(plan) == [("#2", "id", "required, and must match [A-Za-z0-9_.-]+")]


def test_a_task_id_with_spaces_is_rejected_under_its_own_name(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "two words"\n')
    assert problems_of(plan) == [("two words", "id", "required, and must match [A-Za-z0-9_.-]+")]


def test_a_task_must_name_its_agent_when_there_are_several(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[agents.other]\ncommand = "true"\n[[task]]\nid = "t"\n')
    ((task, fld, message),) = problems_of(plan)
    assert (task, fld) == ("t", "agent")
    assert message.startswith("required")


def test_a_plan_without_agents_reports_that_none_are_defined(repo: Path) -> None:
    plan = write_plan(repo, '[[task]]\nid = "t"\nagent = "bot"\n')
    assert problems_of(plan) == [("t", "agent", "unknown agent 'bot' (known: none defined)")]


def test_agent_profile_problems_name_the_profile_and_key(repo: Path) -> None:
    # Given profiles with an unknown kind, a missing command, a typo and a bad fallback
    plan = write_plan(
        repo,
        """
        [agents.alien]
        kind = "martian"

        [agents.empty]
        kind = "shell"

        [agents.typo]
        kind = "shell"
        command = "true"
        timout = "5m"
        fallback = "nobody"

        [[task]]
        id = "t"
        agent = "typo"
        """,
    )

    # Then each profile's problem is located at its key
    (alien, *others) = problems_of(plan)
    assert alien[:2] == (None, "agents.alien.kind")
    assert alien[2].startswith("unknown kind 'martian'; known kinds: ")
    assert "scripted, shell" in alien[2]
    assert others == [
        (None, "agents.empty.command", "required: the command line to run"),
        (None, "agents.typo.timout", "unknown key 'timout'; did you mean 'timeout'?"),
        (None, "agents.typo.fallback", "unknown agent profile 'nobody'"),
    ]


def test_a_shell_command_with_an_unknown_placeholder_is_a_problem(repo: Path) -> None:
    plan = write_plan(repo, '[agents.bot]\ncommand = "run {tsak}"\n[[task]]\nid = "t"\n')
    ((task, fld, message),) = problems_of(plan)
    assert (task, fld) == (None, "agents.bot.command")
    assert "unknown placeholder {tsak}" in message


def test_a_plan_without_tasks_is_a_problem(repo: Path) -> None:
    assert problems_of(write_plan(repo, AGENT)) == [(None, "task", "the plan has no tasks")]


def test_task_given_as_a_table_instead_of_an_array_is_a_problem(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[task]\nid = "t"\n')
    assert problems_of(plan) == [(None, "task", "expected an array of tables ([[task]])")]


# -- dependencies ------------------------------------------------------------------------


def test_a_dependency_cycle_is_reported_with_its_path(repo: Path) -> None:
    # Given a depends on b, b on c, and c on a
    plan = write_plan(
        repo,
        AGENT
        + """
        [[task]]
        id = "a"
        depends_on = ["b"]
        [[task]]
        id = "b"
        depends_on = ["c"]
        [[task]]
        id = "c"
        depends_on = ["a"]
        [[task]]
        id = "free"
        """,
    )

    # Then the cycle is named at its first task, with the full path
    assert problems_of(plan) == [("a", "depends_on", "dependency cycle: a -> b -> c -> a")]


def test_a_task_that_depends_on_itself_is_a_cycle(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "me"\ndepends_on = ["me"]\n')
    assert problems_of(plan) == [("me", "depends_on", "dependency cycle: me -> me")]


def test_several_cycles_come_in_file_order_each_starting_at_its_first_task(repo: Path) -> None:
    # Given eight separate three-task cycles; whatever the hash seed, the report is stable
    tasks = []
    expected = []
    for n in range(8):
        names = [f"t{n}-{s}" for s in ("x", "y", "z")]
        for i, name in enumerate(names):
            tasks.append(f'[[task]]\nid = "{name}"\ndepends_on = ["{names[(i + 1) % 3]}"]\n')
        path = " -> ".join([*names, names[0]])
        expected.append((names[0], "depends_on", f"dependency cycle: {path}"))
    plan = write_plan(repo, AGENT + "".join(tasks))

    # Then each cycle is reported once, in file order, from its first task in the file
    assert problems_of(plan) == expected


def test_missing_dependencies_and_a_cycle_are_reported_together(repo: Path) -> None:
    plan = write_plan(
        repo,
        AGENT
        + """
        [[task]]
        id = "a"
        depends_on = ["b", "ghost"]
        [[task]]
        id = "b"
        depends_on = ["a", "phantom"]
        """,
    )
    assert problems_of(plan) == [
        ("a", "depends_on", "unknown task 'ghost'"),
        ("b", "depends_on", "unknown task 'phantom'"),
        ("a", "depends_on", "dependency cycle: a -> b -> a"),
    ]


def test_depends_on_must_be_strings(repo: Path) -> None:
    plan = write_plan(repo, AGENT + '[[task]]\nid = "t"\ndepends_on = [1]\n')
    assert problems_of(plan) == [("t", "depends_on", "expected a string or a list of strings")]


# -- files that cannot be read -----------------------------------------------------------


def test_a_plan_outside_a_git_repository_is_a_problem(tmp_path: Path) -> None:
    # Given a plan in a folder that no repository contains
    folder = tmp_path / "not-a-repo"
    folder.mkdir()
    plan = write_plan(folder, AGENT + '[[task]]\nid = "t"\n')

    # Then loading it says so, at run.repo
    ((task, fld, message),) = problems_of(plan)
    assert (task, fld) == (None, "run.repo")
    assert message == f"{folder.resolve()} is not inside a git repository"


def test_a_missing_plan_file_is_a_plan_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    ((task, fld, message),) = problems_of(missing)
    assert (task, fld) == (None, None)
    assert message.startswith("cannot read plan")


@pytest.mark.parametrize(
    ("name", "text", "start"),
    [
        ("plan.toml", "[[task]\nid =", "invalid TOML"),
        ("plan.yaml", "tasks: [unclosed\n", "invalid YAML"),
        ("plan.yaml", "- just\n- a list\n", "a plan must be a table/mapping at the top level"),
        ("plan.toml", b"id = '\xff'\n", "plan is not UTF-8 text"),
    ],
)
def test_a_plan_that_cannot_be_parsed_is_a_plan_error(
    repo: Path, name: str, text: str | bytes, start: str
) -> None:
    plan = repo / name
    if isinstance(text, bytes):
        plan.write_bytes(text)
    else:
        plan.write_text(textwrap.dedent(text))
    ((task, fld, message),) = problems_of(plan)
    assert (task, fld) == (None, None)
    assert message.startswith(start)


def test_an_empty_yaml_plan_only_lacks_tasks(repo: Path) -> None:
    assert problems_of(write_plan(repo, "", name="plan.yaml")) == [
        (None, "task", "the plan has no tasks")
    ]


# -- isolation and network ---------------------------------------------------------------------


def test_isolation_and_network_default_to_auto_and_off_for_commands(repo: Path) -> None:
    plan = load_plan(write_plan(repo, AGENT + '[[task]]\nid = "a"\n'))
    assert plan.run.isolation == "auto"
    assert plan.run.network is False
    assert plan.tasks[0].network is False


def test_network_per_task_overrides_the_run(repo: Path) -> None:
    text = f"""
        [run]
        isolation = "required"
        network = true
        {AGENT}
        [[task]]
        id = "a"
        [[task]]
        id = "b"
        network = false
    """
    plan = load_plan(write_plan(repo, textwrap.dedent(text)))
    assert plan.run.isolation == "required"
    assert [t.network for t in plan.tasks] == [True, False]


def test_sandbox_false_means_isolation_off_unless_isolation_is_given(repo: Path) -> None:
    off = load_plan(write_plan(repo, "[run]\nsandbox = false\n" + AGENT + '[[task]]\nid = "a"\n'))
    assert off.run.isolation == "off"
    text = '[run]\nsandbox = false\nisolation = "landlock"\n' + AGENT + '[[task]]\nid = "a"\n'
    assert load_plan(write_plan(repo, text)).run.isolation == "landlock"


def test_unknown_isolation_and_non_boolean_network_are_located_problems(repo: Path) -> None:
    text = '[run]\nisolation = "docker"\nnetwork = "yes"\n' + AGENT
    text += '[[task]]\nid = "a"\nnetwork = 1\n'
    found = problems_of(write_plan(repo, text))
    assert (None, "run.isolation", 'expected one of "auto", "required", "landlock", "off"') in found
    assert (None, "run.network", "expected true or false") in found
    assert ("a", "network", "expected true or false") in found


def test_reverify_is_always_by_default_overlap_on_request_and_anything_else_located(
    repo: Path,
) -> None:
    task = AGENT + '[[task]]\nid = "a"\n'
    assert load_plan(write_plan(repo, task)).run.reverify == "always"
    overlap = load_plan(write_plan(repo, '[run]\nreverify = "overlap"\n' + task))
    assert overlap.run.reverify == "overlap"
    for bad in ('"never"', "true", "[]", "{}"):  # a list or a table: unhashable
        found = problems_of(write_plan(repo, f"[run]\nreverify = {bad}\n" + task))
        assert (None, "run.reverify", 'expected one of "always", "overlap"') in found


def test_task_is_filled_in_verify_and_check_commands_shell_quoted(repo: Path) -> None:
    # Given a run-wide verify and a task check that name {task}, and literal braces written
    # {{ and }} as in agent commands (one rule for both)
    plan = write_plan(
        repo,
        """
        [run]
        verify = ["test -f {task}.txt"]

        [agents.bot]
        kind = "shell"
        command = "true"

        [[task]]
        id = "a-1"
        check = "grep {task} log && awk '{{print $1}}' f && echo ${{task}} {{{{task}}}}"
        """,
    )

    # When it is loaded, {task} is the task's id, quoted as agent commands quote it
    task = load_plan(plan).task("a-1")
    assert task.verify == ("test -f a-1.txt",)
    # and doubled braces are single ones
    assert task.check == "grep a-1 log && awk '{print $1}' f && echo ${task} {{task}}"


def test_a_duration_longer_than_a_year_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 366d"):
        parse_duration("367d")
    with pytest.raises(ValueError, match="at most 366d"):
        parse_duration(1e308)
    assert parse_duration("366d") == 366 * 86400


def test_codex_in_its_own_workspace_write_sandbox_is_refused_inside_orchardists_isolation(
    repo: Path,
) -> None:
    # Given a codex profile asking for codex's own workspace-write sandbox, under the default
    # isolation (codex's bwrap cannot set up its uid map inside orchardist's: every command
    # it ran failed, and the attempt ended no_changes without a word of why)
    profile = '[agents.cx]\nkind = "codex"\npermission = "workspace-write"\n'
    task = '[[task]]\nid = "t"\nprompt = "fix it"\nagent = "cx"\n'
    plan = write_plan(repo, profile + task)
    # Then the plan is refused, naming the profile, the setting, the reason and the fix
    ((task_id, fld, message),) = problems_of(plan)
    assert (task_id, fld) == (None, "agents.cx.permission")
    assert "workspace-write sandbox cannot start inside orchardist's isolation" in message
    assert "setting up uid map" in message and 'permission = "auto"' in message
    # and with isolation off (codex's sandbox then confines it) the same profile is accepted
    write_plan(repo, '[run]\nisolation = "off"\n' + profile + task)
    assert load_plan(plan).agents["cx"].options["permission"] == "workspace-write"


@pytest.mark.parametrize("where", ["home", "repository"])
def test_a_claude_settings_file_that_turns_its_own_sandbox_on_is_refused_naming_the_file(
    repo: Path, where: str
) -> None:
    # Given a settings file that an attempt's Claude Code reads (yours, copied into its home,
    # or the repository's own) turning Claude Code's own sandbox on, which cannot start
    # inside orchardist's isolation
    folder = (Path.home() if where == "home" else repo) / ".claude"
    folder.mkdir(parents=True, exist_ok=True)
    settings = folder / "settings.json"
    settings.write_text('{"sandbox": {"enabled": true}, "model": "x"}')
    profile = '[agents.cc]\nkind = "claude"\n'
    task = '[[task]]\nid = "t"\nprompt = "fix it"\nagent = "cc"\n'
    plan = write_plan(repo, profile + task)
    # Then the plan is refused, naming the profile, the file, the reason and the fix
    ((task_id, fld, message),) = problems_of(plan)
    assert (task_id, fld) == (None, "agents.cc")
    assert message.startswith(f"{settings} turns Claude Code's own sandbox on (sandbox.enabled)")
    assert "setting up uid map" in message and '"sandbox": {"enabled": false}' in message
    # and once it is off, the plan loads
    settings.write_text('{"sandbox": {"enabled": false}}')
    assert load_plan(plan).agents["cc"].kind == "claude"
