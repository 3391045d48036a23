"""Contract tests: every agent-CLI adapter against a fake of its tool, on PATH, in a real repo.

Each fake prints its tool's real output format, edits the worktree, records its argv,
environment and stdin, and can be told to hit a rate limit, fail auth, hang or crash.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from agent_testing import PROMPT, fake_call, make_ctx

from orchardist.agents import agent_class, make_agent
from orchardist.agents.cli import MAX_ARG_BYTES
from orchardist.agents.context import AgentContext, AgentResult
from orchardist.agents.doctor import check_profile
from orchardist.confine.procs import CancelToken
from orchardist.confine.scrubbed import BASE_ENV
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.state.usage import Usage
from support import marked_processes


@dataclass(frozen=True)
class Case:
    """One adapter: its profile, the command line it must build, what it must read back."""

    kind: str
    options: dict[str, Any]
    argv: Callable[[AgentContext], list[str]]  # expected argv after the executable
    usage: Usage
    summary: str
    retry_after_s: float  # what its rate-limit message says
    stdin: str = ""  # what the tool must receive on stdin
    extra_env: frozenset[str] = field(default_factory=frozenset)  # variables the adapter sets

    def __str__(self) -> str:
        return self.kind


CLAUDE_TOOLS = "Bash,Edit,MultiEdit,Write,Read,Glob,Grep,LS,TodoWrite"
CASES = [
    Case(
        kind="claude",
        options={"model": "claude-sonnet-4-5", "max_turns": 30, "args": ["--debug"]},
        argv=lambda ctx: [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            "--tools",
            CLAUDE_TOOLS,
            "--allowedTools",
            CLAUDE_TOOLS,
            "--max-turns",
            "30",
            "--model",
            "claude-sonnet-4-5",
            "--debug",
        ],
        usage=Usage(0.0421, 1420, 250, 3, "5b0f1c1e-claude-session"),
        summary="Created hello.txt.",
        retry_after_s=3600,
        stdin=PROMPT,
        extra_env=frozenset(
            {
                "CLAUDE_CODE_MAX_RETRIES",
                "DISABLE_AUTOUPDATER",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            }
        ),
    ),
    Case(
        kind="codex",
        options={"model": "gpt-5-codex", "price_in": 1.25, "price_out": 10.0},
        argv=lambda ctx: [
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "-c",
            'approval_policy="never"',
            "--skip-git-repo-check",
            "-C",
            str(ctx.cwd),
            "-m",
            "gpt-5-codex",
            "--",
            PROMPT,
        ],
        usage=Usage(
            (24763 * 1.25 + 122 * 10.0) / 1e6, 24763, 122, 1, "0199a213-81c0-7800-8aa1-bbab2a035a53"
        ),
        summary="Created hello.txt.",
        retry_after_s=2 * 3600 + 5 * 60,
    ),
    Case(
        kind="aider",
        options={"model": "gpt-4o", "args": ["--test-cmd", "pytest -q"]},
        argv=lambda ctx: [
            "--message-file",
            str(ctx.prompt_file),
            "--yes-always",
            "--no-auto-commits",
            "--no-stream",
            "--no-pretty",
            "--no-gitignore",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-analytics",
            "--chat-history-file",
            str(ctx.home / ".aider" / "chat.history.md"),
            "--input-history-file",
            str(ctx.output_file.parent / "aider.input.history"),
            "--model",
            "gpt-4o",
            "--test-cmd",
            "pytest -q",
        ],
        usage=Usage(0.03, 2100 + 12000, 345 + 56, 2, None),
        summary="",
        retry_after_s=20,
        extra_env=frozenset(
            {
                "GIT_CONFIG_COUNT",
                *(f"GIT_CONFIG_{w}_{n}" for w in ("KEY", "VALUE") for n in (0, 1)),
                "LITELLM_LOCAL_MODEL_COST_MAP",
            }
        ),
    ),
    Case(
        kind="gemini",
        options={"model": "gemini-2.5-pro"},
        argv=lambda ctx: [
            "--output-format",
            "stream-json",
            "--skip-trust",
            "--approval-mode",
            "auto_edit",
            "--policy",
            str(ctx.output_file.parent / "gemini-home" / ".gemini" / "orchardist-policy.toml"),
            "-m",
            "gemini-2.5-pro",
            f"--prompt={PROMPT}",
        ],
        usage=Usage(None, 3000, 300, 2, "c3b1e0f2-gemini"),
        summary="Done: created hello.txt.",
        retry_after_s=35.5,
        extra_env=frozenset(
            {"GEMINI_CLI_HOME", "GEMINI_CLI_TRUST_WORKSPACE", "GEMINI_CLI_NO_RELAUNCH"}
        ),
    ),
    Case(
        kind="opencode",
        options={"model": "anthropic/claude-sonnet-4-5"},
        argv=lambda ctx: [
            "run",
            "--format",
            "json",
            "-m",
            "anthropic/claude-sonnet-4-5",
            f"--title={ctx.title}",
            "--",
            PROMPT,
        ],
        usage=Usage(0.0043, 1500 + 500 + 1700 + 1500, 120, 2, "ses_4947190a6ffe85dkDMj0FPRbHK"),
        summary="Created hello.txt.",
        retry_after_s=20,
        extra_env=frozenset({"OPENCODE_PERMISSION", "OPENCODE_CONFIG_CONTENT"}),
    ),
]
BY_KIND = {case.kind: case for case in CASES}
every_adapter = pytest.mark.parametrize("case", CASES, ids=str)


def agent_for(case: Case, **options: Any) -> Any:
    return make_agent(AgentProfile("p", case.kind, options={**case.options, **options}))


def assert_usage(actual: Usage, expected: Usage) -> None:
    assert actual.input_tokens == expected.input_tokens
    assert actual.output_tokens == expected.output_tokens
    assert actual.turns == expected.turns
    assert actual.session_id == expected.session_id
    if expected.cost_usd is None:
        assert actual.cost_usd is None
    else:
        assert actual.cost_usd == pytest.approx(expected.cost_usd)


# -- success ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Success:
    """What one successful run of an adapter left: read by the tests below, made once."""

    ctx: AgentContext
    result: AgentResult
    call: dict[str, Any]  # what the fake tool received
    log: str  # the attempt log
    hello: str  # the file the tool wrote in the worktree


@pytest.fixture(scope="module")
def successes() -> dict[str, Success]:
    return {}


@pytest.fixture
def success(case: Case, successes: dict[str, Success], request: pytest.FixtureRequest) -> Success:
    """The adapter's successful run with a fake tool on PATH in a real repository, run by the
    first test that asks for it (one tool process for the three tests that only read it)."""
    if case.kind not in successes:
        repo: Path = request.getfixturevalue("repo")
        request.getfixturevalue("fake_bin")
        ctx = make_ctx(repo, case.kind)
        result = agent_for(case).run(ctx)
        hello = (repo / "hello.txt").read_text()
        successes[case.kind] = Success(
            ctx, result, fake_call(case.kind), ctx.log.read_text(), hello
        )
    return successes[case.kind]


@every_adapter
def test_a_successful_run_edits_the_worktree_and_reads_back_usage(
    case: Case, success: Success
) -> None:
    # Given a fake tool on PATH and a real repository; when the adapter runs
    result = success.result
    # Then the tool edited the worktree, and its usage and final answer were read back
    assert (result.failure, result.exit_code, result.cancelled) == (None, 0, False), result.detail
    assert success.hello == "hello from a fake agent\n"
    assert_usage(result.usage, case.usage)
    assert result.detail == case.summary
    assert result.retry_after_s is None


@every_adapter
def test_the_command_line_and_stdin_are_the_tools_headless_form(
    case: Case, success: Success
) -> None:
    assert success.call["argv"] == case.argv(success.ctx)
    assert success.call["stdin"] == case.stdin
    assert Path(success.call["cwd"]) == success.ctx.cwd


@every_adapter
def test_the_output_streams_into_the_attempt_log(case: Case, success: Success) -> None:
    assert "hello.txt" in success.log
    assert len(success.log.splitlines()) >= 4


@every_adapter
def test_the_tool_sees_only_allowlisted_variables(
    case: Case, repo: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given secrets in orchardist's own environment, and a context that was not scrubbed
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    cls = agent_class(case.kind)
    for name in cls.env_keys:
        monkeypatch.setenv(name, f"value-of-{name}")
    ctx = make_ctx(repo, case.kind, env=dict(os.environ))
    # When the adapter runs
    agent_for(case).run(ctx)
    # Then the tool saw its own keys, the base variables and orchardist's, and nothing else
    env = fake_call(case.kind)["env"]
    allowed = {*BASE_ENV, *cls.env_keys, *case.extra_env}
    leaked = {k for k in env if k not in allowed and not k.startswith("ORCHARDIST_")}
    assert leaked == set()
    assert "SECRET_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert all(env[name] == f"value-of-{name}" for name in cls.env_keys)


@every_adapter
def test_a_profile_env_entry_passes_through(
    case: Case, repo: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_PROXY", "http://proxy:3128")
    ctx = make_ctx(repo, case.kind, env=dict(os.environ), profile_env=("MY_PROXY",))
    profile = AgentProfile("p", case.kind, env=("MY_PROXY",), options=case.options)
    make_agent(profile).run(ctx)
    assert fake_call(case.kind)["env"]["MY_PROXY"] == "http://proxy:3128"


# -- failures ---------------------------------------------------------------------------------


@every_adapter
def test_a_rate_limit_is_classified_with_its_reset_time(
    case: Case, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("rate_limit")
    result = agent_for(case).run(make_ctx(repo, case.kind))
    assert result.failure is Failure.RATE_LIMITED, result.detail
    assert result.exit_code != 0
    assert result.retry_after_s == pytest.approx(case.retry_after_s, abs=5)


@every_adapter
def test_an_auth_failure_is_classified(
    case: Case, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("auth")
    result = agent_for(case).run(make_ctx(repo, case.kind))
    assert result.failure is Failure.AUTH_ERROR, result.detail
    assert result.retry_after_s is None


def test_claudes_final_401_decides_over_a_side_requests_rate_limit(
    repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    # Given Claude Code reporting a rejected rate_limit_event (a side request's 429), then a
    # final result that failed 401 "Not logged in"
    fake_mode("side_rate_limit_then_auth")
    # When the adapter runs
    result = agent_for(BY_KIND["claude"]).run(make_ctx(repo, "claude"))
    # Then the attempt is an auth error (counted, opens the breaker), not a rate limit to wait out
    assert result.failure is Failure.AUTH_ERROR, result.detail
    assert result.retry_after_s is None
    assert "Not logged in" in result.detail


@every_adapter
def test_a_crash_is_an_agent_error(
    case: Case, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("crash")
    result = agent_for(case).run(make_ctx(repo, case.kind))
    assert result.failure is Failure.AGENT_ERROR
    assert result.exit_code != 0
    assert case.kind in result.detail


@every_adapter
def test_a_hang_times_out_and_leaves_no_process(
    case: Case, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("hang")
    ctx = make_ctx(repo, case.kind, timeout_s=1.0)
    result = agent_for(case).run(ctx)
    assert result.failure is Failure.TIMEOUT
    assert result.duration_s < 1.0 + 3.0 + 2.0
    assert marked_processes(ctx.marker) == set()


def test_cancelling_stops_the_tool(
    repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("hang")
    token = CancelToken()
    ctx = make_ctx(repo, "claude", cancel=token)
    timer = threading.Timer(0.3, token.cancel, args=("superseded",))
    timer.start()
    try:
        result = agent_for(BY_KIND["claude"]).run(ctx)
    finally:
        timer.cancel()
    assert result.cancelled and result.failure is None
    assert marked_processes(ctx.marker) == set()


@every_adapter
def test_a_missing_executable_says_so(case: Case, repo: Path, fake_bin: Path) -> None:
    agent = agent_for(case, command="no-such-agent-cli")
    result = agent.run(make_ctx(repo, case.kind))
    assert result.failure is Failure.AGENT_ERROR
    assert "not found on PATH" in result.detail


# -- adapter specifics ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["codex", "gemini", "opencode"])
def test_a_prompt_too_long_for_argv_goes_through_stdin(
    kind: str, repo: Path, fake_bin: Path
) -> None:
    prompt = "x" * (MAX_ARG_BYTES + 1)
    ctx = make_ctx(repo, kind, prompt=prompt)
    result = agent_for(BY_KIND[kind]).run(ctx)
    assert result.failure is None, result.detail
    call = fake_call(kind)
    assert call["stdin"] == prompt
    assert prompt not in call["argv"]


def test_codex_recovering_from_a_stream_error_still_succeeds(
    repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("flaky_ok")
    result = agent_for(BY_KIND["codex"]).run(make_ctx(repo, "codex"))
    assert result.failure is None, result.detail


def test_aider_recovering_from_a_rate_limit_still_succeeds(
    repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode("rate_then_ok")
    result = agent_for(BY_KIND["aider"]).run(make_ctx(repo, "aider"))
    assert result.failure is None, result.detail
    assert (repo / "hello.txt").exists()


def test_aider_reads_the_prompt_file(repo: Path, fake_bin: Path) -> None:
    agent_for(BY_KIND["aider"]).run(make_ctx(repo, "aider"))
    assert (Path.home() / ".fake-agents" / "aider.message").read_text() == PROMPT


def test_aider_reads_litellms_installed_price_list_unless_the_profile_passes_its_own(
    repo: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a profile that says nothing of it: LiteLLM is told not to download its price list
    agent_for(BY_KIND["aider"]).run(make_ctx(repo, "aider"))
    assert fake_call("aider")["env"]["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    # Given a profile that passes its own value (empty: LiteLLM downloads it), that value
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "")
    passed = ("LITELLM_LOCAL_MODEL_COST_MAP",)
    ctx = make_ctx(repo, "aider", env=dict(os.environ), profile_env=passed)
    make_agent(AgentProfile("p", "aider", env=passed, options=BY_KIND["aider"].options)).run(ctx)
    assert fake_call("aider")["env"]["LITELLM_LOCAL_MODEL_COST_MAP"] == ""


@pytest.mark.parametrize(
    ("mode", "words"),
    [("turn_limit", "turn limit exceeded (exit 53)"), ("input_error", "input error")],
)
def test_gemini_exit_codes_are_named(
    mode: str, words: str, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    fake_mode(mode)
    result = agent_for(BY_KIND["gemini"]).run(make_ctx(repo, "gemini"))
    assert result.failure is Failure.AGENT_ERROR
    assert words in result.detail


def test_gemini_gets_a_private_home_with_its_auth_type_policy_and_login(
    repo: Path, fake_bin: Path
) -> None:
    # Given a user with a Google login and an API key
    user = Path.home()  # a fresh one (conftest)
    (user / ".gemini").mkdir(parents=True)
    (user / ".gemini" / "oauth_creds.json").write_text('{"token": "t"}')
    env = {"PATH": os.environ["PATH"], "HOME": str(user), "GEMINI_API_KEY": "k"}
    ctx = make_ctx(repo, "gemini", env=env)
    # When gemini runs
    agent_for(BY_KIND["gemini"], allowed_tools=["run_shell_command", "web_fetch"]).run(ctx)
    # Then its home is the attempt's own, with API-key auth, the policy and the login copied
    home = Path(fake_call("gemini")["env"]["GEMINI_CLI_HOME"])
    assert home.is_relative_to(ctx.output_file.parent)
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    policy = (home / ".gemini" / "orchardist-policy.toml").read_text()
    assert policy.count('decision = "allow"') == 2 and '"web_fetch"' in policy
    assert (home / ".gemini" / "oauth_creds.json").read_text() == '{"token": "t"}'
    assert not (user / ".gemini" / "settings.json").exists()  # the user's own is untouched


def test_gemini_keeps_the_users_own_settings_under_orchardists_keys(
    repo: Path, fake_bin: Path
) -> None:
    # Given a user whose settings.json (with comments, as Gemini allows) turns usage statistics off
    user = Path.home()  # a fresh one (conftest)
    (user / ".gemini").mkdir(parents=True)
    (user / ".gemini" / "settings.json").write_text(
        "{\n  // no statistics, please\n"
        '  "privacy": {"usageStatisticsEnabled": false},\n'
        '  "telemetry": {"otlpEndpoint": "http://127.0.0.1:4317/* not a comment */"},\n'
        '  /* a block\n  comment */ "security": {"auth": {"selectedType": "oauth-personal"},\n'
        '    "folderTrust": {"enabled": false}},\n'
        '  "general": {"maxAttempts": 10, "vimMode": true}\n}\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(user), "GEMINI_API_KEY": "k"}
    # When gemini runs
    agent_for(BY_KIND["gemini"], max_turns=4).run(make_ctx(repo, "gemini", env=env))
    # Then the settings it reads are the user's, with orchardist's keys put in over theirs
    home = Path(fake_call("gemini")["env"]["GEMINI_CLI_HOME"])
    assert json.loads((home / ".gemini" / "settings.json").read_text()) == {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"otlpEndpoint": "http://127.0.0.1:4317/* not a comment */"},
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"maxAttempts": 3, "vimMode": True},
        "model": {"maxSessionTurns": 4},
    }


@pytest.mark.parametrize(
    ("given", "statistics"),
    [(None, False), ('{"privacy": {"usageStatisticsEnabled": true}}', True)],
    ids=["unsaid", "turned-on"],
)
def test_gemini_sends_no_usage_statistics_unless_the_users_settings_turn_them_on(
    repo: Path, fake_bin: Path, given: str | None, statistics: bool
) -> None:
    # Given a user whose settings.json says nothing of usage statistics, or turns them on
    user = Path.home()  # a fresh one (conftest)
    (user / ".gemini").mkdir(parents=True)
    if given is not None:
        (user / ".gemini" / "settings.json").write_text(given)
    env = {"PATH": os.environ["PATH"], "HOME": str(user), "GEMINI_API_KEY": "k"}
    # When gemini runs
    agent_for(BY_KIND["gemini"]).run(make_ctx(repo, "gemini", env=env))
    # Then its settings turn them off, unless the user's say otherwise (the real gemini's
    # connections: test_real_gemini.py)
    home = Path(fake_call("gemini")["env"]["GEMINI_CLI_HOME"])
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["privacy"] == {"usageStatisticsEnabled": statistics}


def test_opencode_gets_its_permission_table(repo: Path, fake_bin: Path) -> None:
    agent = agent_for(BY_KIND["opencode"], permission={"edit": "allow", "bash": "deny"})
    agent.run(make_ctx(repo, "opencode"))
    assert (
        fake_call("opencode")["env"]["OPENCODE_PERMISSION"] == '{"edit": "allow", "bash": "deny"}'
    )


@pytest.mark.parametrize(
    ("given", "passed"),
    [
        (None, {"snapshot": False}),
        ('{"provider": {"fake": {}}}', {"snapshot": False, "provider": {"fake": {}}}),
        ('{"snapshot": true}', {"snapshot": True}),
    ],
    ids=["none", "providers", "snapshots-kept"],
)
def test_opencode_gets_the_users_config_with_snapshots_off_unless_it_says_otherwise(
    repo: Path, fake_bin: Path, given: str | None, passed: dict[str, Any]
) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(Path.home())}
    if given is not None:
        env["OPENCODE_CONFIG_CONTENT"] = given
    agent_for(BY_KIND["opencode"]).run(make_ctx(repo, "opencode", env=env))
    assert json.loads(fake_call("opencode")["env"]["OPENCODE_CONFIG_CONTENT"]) == passed


def test_opencode_gets_config_content_that_is_not_a_json_object_as_it_is(
    repo: Path, fake_bin: Path
) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(Path.home()), "OPENCODE_CONFIG_CONTENT": "{,"}
    agent_for(BY_KIND["opencode"]).run(make_ctx(repo, "opencode", env=env))
    assert fake_call("opencode")["env"]["OPENCODE_CONFIG_CONTENT"] == "{,"


@pytest.mark.parametrize(("kind", "spent"), [("opencode", 0.0031), ("aider", 0.0089)])
def test_a_tool_past_its_budget_is_stopped_and_keeps_its_usage(
    kind: str, spent: float, repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    # Given a tool that reports its first call's cost and then would go on forever
    fake_mode("spend")
    ctx = make_ctx(repo, kind)
    # When its profile's budget is less than that call
    result = agent_for(BY_KIND[kind], max_cost_usd=0.001).run(ctx)
    # Then orchardist stops it at once: an agent error, with the cost the tool reported
    assert (result.failure, result.cancelled) == (Failure.AGENT_ERROR, False)
    assert result.detail == (
        f"{kind} stopped by orchardist: budget spent (${spent:.4f} of max_cost_usd=0.001)"
    )
    assert result.usage.cost_usd == pytest.approx(spent)
    assert ctx.log.read_text().endswith(f"orchardist: {result.detail}\n")
    assert result.duration_s < 10
    assert marked_processes(ctx.marker) == set()


def test_the_tasks_budget_left_stops_a_tool_whose_profile_sets_none(
    repo: Path, fake_bin: Path, fake_mode: Callable[..., None]
) -> None:
    # Given an attempt started with $0.002 left of its task's max_cost_usd
    fake_mode("spend")
    ctx = replace(make_ctx(repo, "opencode"), max_cost_usd=0.002)
    result = agent_for(BY_KIND["opencode"]).run(ctx)
    # Then the tool is stopped there, its usage kept
    assert result.failure is Failure.AGENT_ERROR
    assert result.detail.endswith("budget spent ($0.0031 of max_cost_usd=0.002)")
    assert result.usage.cost_usd == pytest.approx(0.0031)


def test_claude_gets_the_lower_of_its_profiles_and_its_tasks_budget(
    repo: Path, fake_bin: Path
) -> None:
    ctx = replace(make_ctx(repo, "claude"), max_cost_usd=0.75)
    agent_for(BY_KIND["claude"], max_cost_usd=2.5).run(ctx)
    argv = fake_call("claude")["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.75"


def test_a_budget_needs_prices_where_the_tool_reports_only_tokens() -> None:
    assert agent_class("codex").check_options({"max_cost_usd": 1.0}) == [
        ("needs price_in and price_out: this tool reports tokens, not cost", "max_cost_usd")
    ]
    assert (
        agent_class("codex").check_options({"max_cost_usd": 1.0, "price_in": 1.0, "price_out": 2.0})
        == []
    )


def test_gemini_gets_its_turn_limit_in_its_settings(repo: Path, fake_bin: Path) -> None:
    ctx = make_ctx(repo, "gemini")
    agent_for(BY_KIND["gemini"], max_turns=7).run(ctx)
    home = Path(fake_call("gemini")["env"]["GEMINI_CLI_HOME"])
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["model"] == {"maxSessionTurns": 7}


def test_claude_passes_its_budget_and_tools(repo: Path, fake_bin: Path) -> None:
    agent = agent_for(BY_KIND["claude"], max_cost_usd=2.5, allowed_tools=["Read", "Bash(git:*)"])
    agent.run(make_ctx(repo, "claude"))
    argv = fake_call("claude")["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == "2.5"
    assert argv[argv.index("--allowedTools") + 1] == "Read,Bash(git:*)"
    # every tool not named is removed, whatever the permission mode (patterns name their tool)
    assert argv[argv.index("--tools") + 1] == "Read,Bash"


def test_claude_with_no_allowed_tools_gets_none(repo: Path, fake_bin: Path) -> None:
    agent_for(BY_KIND["claude"], allowed_tools=[]).run(make_ctx(repo, "claude"))
    argv = fake_call("claude")["argv"]
    assert argv[argv.index("--tools") + 1] == ""
    assert "--allowedTools" not in argv


# -- profile checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "options", "key", "words"),
    [
        ("claude", {"permission": "yolo"}, "permission", "expected one of"),
        ("claude", {"max_turns": 0}, "max_turns", "≥ 1"),
        ("claude", {"max_cost_usd": -1}, "max_cost_usd", "positive"),
        ("codex", {"permission": "full"}, "permission", "workspace-write"),
        ("codex", {"max_turns": 5}, "max_turns", "no turn limit"),
        ("gemini", {"max_cost_usd": 1.0}, "max_cost_usd", "bound it with max_turns"),
        ("opencode", {"max_cost_usd": 0}, "max_cost_usd", "positive"),
        ("aider", {"permission": "x"}, "permission", "no permission modes"),
        ("gemini", {"allowed_tools": "run_shell_command"}, "allowed_tools", "list of strings"),
        ("opencode", {"model": "claude-sonnet-4-5"}, "model", "provider/model"),
        ("opencode", {"permission": {"bash": "sure"}}, "permission", "allow, ask or deny"),
        ("codex", {"price_in": 1.0}, "price_in", "both"),
        ("gemini", {"args": "--debug"}, "args", "list of strings"),
    ],
)
def test_bad_profile_options_are_reported(
    kind: str, options: dict[str, Any], key: str, words: str
) -> None:
    problems = agent_class(kind).check_options(options)
    assert any(k == key and words in message for message, k in problems), problems


@every_adapter
def test_the_example_options_are_valid(case: Case) -> None:
    assert agent_class(case.kind).check_options(case.options) == []


# -- doctor -----------------------------------------------------------------------------------

VERSIONS = {
    "claude": "2.0.14 (Claude Code)",
    "codex": "codex-cli 0.46.0",
    "aider": "aider 0.86.1",
    "gemini": "0.9.0",
    "opencode": "0.15.2",
}


@every_adapter
def test_doctor_finds_the_cli_its_version_and_its_key(
    case: Case, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = agent_class(case.kind)
    for name in cls.env_keys:
        monkeypatch.delenv(name, raising=False)
    profile = AgentProfile("p", case.kind, options=case.options)
    assert not check_profile(profile).ok
    monkeypatch.setenv(cls.key_vars[-1], "secret-value")
    report = check_profile(profile)
    assert report.ok, report.missing
    assert report.version == VERSIONS[case.kind]
    assert report.path == str(fake_bin / case.kind)


def test_doctor_wants_no_key_for_a_local_aider_model(
    fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in agent_class("aider").env_keys:
        monkeypatch.delenv(name, raising=False)
    profile = AgentProfile("p", "aider", options={"model": "ollama_chat/qwen2.5-coder:14b"})
    assert check_profile(profile).ok


@every_adapter
def test_the_key_variables_doctor_checks_reach_the_tool(
    case: Case, repo: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given only one of the key variables doctor accepts, for each of them in turn
    cls = agent_class(case.kind)
    for key in cls.key_vars:
        for name in cls.env_keys:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(key, "secret-value")
        # Then the tool gets it (codex under the name it reads, CODEX_API_KEY)
        env = agent_for(case).child_env(make_ctx(repo, case.kind))
        assert env.get(key) == "secret-value"
        if case.kind == "codex":
            assert env["CODEX_API_KEY"] == "secret-value"
