"""``kind = "claude"``: Claude Code, headless.

``claude -p --output-format stream-json --verbose`` with the prompt on stdin. The stream ends
with a ``result`` event carrying ``total_cost_usd``, ``num_turns``, ``session_id``, ``is_error``,
``modelUsage`` (per model, the whole session: tokens are read from here, because ``usage`` holds
only the last turn after a ``--max-budget-usd`` stop), ``errors`` and ``permission_denials`` (tool
calls Claude Code refused, e.g. edits of files it deems sensitive); a ``rate_limit_event`` whose
status is ``rejected`` carries ``resetsAt`` (subscriptions only; with an API key a 429 comes as
``api_error_status``). A tool result saying its own sandbox could not start (``sandbox.enabled``
in a settings file: nested bubblewrap cannot map uids) fails the attempt with that reason.
Recorded real streams: tests/fixtures/agents/claude/.

Variables it reads: ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``,
``CLAUDE_CODE_OAUTH_TOKEN``), ``ANTHROPIC_BASE_URL``; ``CLAUDE_CODE_MAX_RETRIES`` is set to
:data:`MAX_RETRIES` unless the caller sets it (its default retries a refused key for minutes).
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``: no telemetry, error reports or update checks,
whose connection to api.anthropic.com (whatever ``ANTHROPIC_BASE_URL`` says) cost each attempt
about 0.3 s of CPU (0.95 against 0.65 s for a one-turn run of 2.1.332) and a second of wall.

Permission: ``acceptEdits`` plus an explicit ``allowed_tools`` list (Bash and the file tools),
because ``bypassPermissions`` refuses to start as root. ``allowed_tools`` also goes to ``--tools``,
so a tool it does not name is not there at all, whatever the permission mode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from ..confine.procs import ProcessResult
from ..safeio import read_capped
from ..state.agentrecords import AgentProfile, Failure
from .cli import COMMON_KEYS, CliAgent, Seen, check_choice, str_list_problem
from .context import AgentContext, AgentResult
from .limits import classify, epoch_datetime

PERMISSION_MODES = ("acceptEdits", "bypassPermissions", "default", "dontAsk", "plan")
DEFAULT_TOOLS = ("Bash", "Edit", "MultiEdit", "Write", "Read", "Glob", "Grep", "LS", "TodoWrite")
MAX_RETRIES = "2"  # Claude Code's own retries of one request (its default, 10, takes minutes)
DENIALS_SHOWN = 5
# What Claude Code's own sandbox (``sandbox.enabled``) answers every shell command with inside
# orchardist's namespaces: its bwrap cannot map uids in a user namespace made by another bwrap.
NESTED_SANDBOX = "setting up uid map"
OWN_SANDBOX_SET = (
    "{path} turns Claude Code's own sandbox on (sandbox.enabled), which cannot start inside"
    " orchardist's isolation (its bwrap: setting up uid map: Operation not permitted), so every"
    ' shell command would fail; set "sandbox": {{"enabled": false}} there (orchardist\'s'
    ' isolation confines the attempt), or [run] isolation = "off"'
)
SETTINGS_MAX_BYTES = 1 << 20
OWN_SANDBOX = (
    "Claude Code's own sandbox (sandbox.enabled in its settings) cannot start inside"
    " orchardist's isolation, so every shell command failed ({said}); turn it off"
    ' ("sandbox": {{"enabled": false}} in ~/.claude/settings.json or the repository\'s'
    " .claude/settings.json): orchardist's isolation already confines the attempt"
)


class ClaudeAgent(CliAgent):
    """Claude Code (``claude``)."""

    kind: ClassVar[str] = "claude"
    executable: ClassVar[str] = "claude"
    home_files: ClassVar[tuple[str, ...]] = (
        ".claude/.credentials.json",
        ".claude.json",
        ".claude/settings.json",
    )
    home_state: ClassVar[tuple[str, ...]] = (".claude",)
    session_files: ClassVar[tuple[str, ...]] = (".claude/projects",)  # one JSONL per session
    profile_keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"allowed_tools"}
    widening_keys: ClassVar[frozenset[str]] = CliAgent.widening_keys | {"allowed_tools"}
    budget_flag: ClassVar[bool] = True
    env_keys: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_MAX_RETRIES",
        "API_TIMEOUT_MS",
    )
    key_vars: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "ANTHROPIC_AUTH_TOKEN",
    )
    login_files: ClassVar[tuple[str, ...]] = (
        "$CLAUDE_CONFIG_DIR/.credentials.json",
        "~/.claude/.credentials.json",
    )
    login_hint: ClassVar[str] = "run `claude` once and log in, or `claude setup-token`"
    default_permission: ClassVar[Any] = "acceptEdits"

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """A Claude Code permission mode; bypass refuses to run as root."""
        problems = check_choice(value, PERMISSION_MODES)
        if value == "bypassPermissions" and hasattr(os, "geteuid") and os.geteuid() == 0:
            problems.append("bypassPermissions refuses to start as root; use acceptEdits")
        return problems

    @classmethod
    def check_extra(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``allowed_tools`` is a list of tool names."""
        if "allowed_tools" in options and (p := str_list_problem(options["allowed_tools"])):
            return [(p, "allowed_tools")]
        return []

    @classmethod
    def check_confined(cls, options: Mapping[str, Any], repo: Path) -> list[tuple[str, str]]:
        """A settings file an attempt's Claude Code reads that turns its own sandbox on: it
        cannot start inside orchardist's namespaces (every shell command fails)."""
        return [
            (OWN_SANDBOX_SET.format(path=path), "")
            for path in settings_files(repo, os.environ)
            if sandbox_enabled(path)
        ]

    def __init__(self, profile: AgentProfile) -> None:
        super().__init__(profile)
        self.allowed_tools = tuple(str(t) for t in self.options.get("allowed_tools", DEFAULT_TOOLS))

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``claude -p`` reading the prompt from stdin."""
        tools = self.allowed_tools
        argv = [self.command, "-p", "--output-format", "stream-json", "--verbose"]
        if ctx.resume:
            argv += ["--resume", ctx.resume]
        argv += ["--permission-mode", str(self.permission)]
        # --allowedTools only pre-approves: acceptEdits still let an unlisted Edit through, so
        # --tools removes every built-in tool not named (Claude Code: "No such tool available")
        argv += ["--tools", ",".join(tool_names(tools))]
        if tools:
            argv += ["--allowedTools", ",".join(tools)]
        if self.max_turns is not None:
            argv += ["--max-turns", str(self.max_turns)]
        if self.model:
            argv += ["--model", self.model]
        budget = self.budget_usd(ctx)
        if budget is not None:
            argv += ["--max-budget-usd", f"{float(budget):g}"]
        return argv + self.args

    def prompt_on_stdin(self, ctx: AgentContext) -> bool:
        """Always: ``claude -p`` reads the prompt from stdin."""
        return True

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """Few retries of a failing request (orchardist retries and pauses itself); no updates,
        telemetry or error reports (module docstring)."""
        env = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        if "CLAUDE_CODE_MAX_RETRIES" not in ctx.env:
            env["CLAUDE_CODE_MAX_RETRIES"] = MAX_RETRIES
        return env

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """The base verdict; refused tool calls are also noted in the attempt's log."""
        refused = seen.state.get("refused")
        if refused:
            with ctx.log.open("a", encoding="utf-8") as log:
                log.write(f"orchardist: {refused}\n")
        return super().result(proc, seen, ctx)

    def event(self, seen: Seen, event: dict[str, Any]) -> None:
        """``system``/init gives the session; ``result`` gives cost, turns and tokens."""
        kind = event.get("type")
        if kind == "system" and event.get("session_id"):
            seen.session_id = str(event["session_id"])
        elif kind == "rate_limit_event":
            info = event.get("rate_limit_info") or {}
            if info.get("status") == "rejected":
                seen.failure = Failure.RATE_LIMITED
                resets = info.get("resetsAt")
                if isinstance(resets, int | float) and not isinstance(resets, bool):
                    now = datetime.now(UTC)
                    seen.retry_after_s = max(0.0, (epoch_datetime(resets) - now).total_seconds())
        elif kind == "result":
            self._result(seen, event)
        elif kind == "user" and "own_sandbox" not in seen.state:
            self._tool_results(seen, event)

    def _tool_results(self, seen: Seen, event: dict[str, Any]) -> None:
        """A shell command its own sandbox could not start fails the attempt, saying so: else
        the attempt ended ``no_changes`` with no word of why (issue 31)."""
        content = (event.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            said = str(block.get("content"))
            if NESTED_SANDBOX in said:
                line = next(x for x in said.splitlines() if NESTED_SANDBOX in x)
                seen.state["own_sandbox"] = True
                seen.error(OWN_SANDBOX.format(said=line.strip()[:200]))
                seen.failure = Failure.AGENT_ERROR
                return

    def _result(self, seen: Seen, event: dict[str, Any]) -> None:
        if event.get("session_id"):
            seen.session_id = str(event["session_id"])
        seen.add_cost(event.get("total_cost_usd"))
        if isinstance(event.get("num_turns"), int):
            seen.turns = event["num_turns"]
        _tokens(seen, event)
        refused = seen.state["refused"] = denials(event.get("permission_denials"))
        text = str(event.get("result") or "")
        if event.get("is_error") or str(event.get("subtype", "success")) != "success":
            subtype = str(event.get("subtype", ""))
            errors = event.get("errors")
            said = "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
            reason = text or said or subtype.replace("_", " ")
            _final_failure(seen, reason, event.get("api_error_status"))
            seen.error(f"{reason}\n{refused}" if refused else reason)
        else:
            seen.summary = f"{refused}\n{text}" if refused else text


def settings_files(repo: Path, environ: Mapping[str, str]) -> list[Path]:
    """The settings files an attempt's Claude Code reads: yours (copied into its home, or in
    ``$CLAUDE_CONFIG_DIR``) and the repository's."""
    home = Path(environ.get("HOME") or Path.home())
    found = [home / ".claude" / "settings.json", repo / ".claude" / "settings.json"]
    if environ.get("CLAUDE_CONFIG_DIR"):
        found.insert(1, Path(environ["CLAUDE_CONFIG_DIR"]) / "settings.json")
    return found


def sandbox_enabled(path: Path) -> bool:
    """Whether a settings file says ``"sandbox": {"enabled": true}``."""
    raw = read_capped(path, SETTINGS_MAX_BYTES)
    try:
        settings = json.loads(raw) if raw else None
    except ValueError:
        return False
    sandbox = settings.get("sandbox") if isinstance(settings, dict) else None
    return isinstance(sandbox, dict) and sandbox.get("enabled") is True


def _final_failure(seen: Seen, reason: str, status: Any) -> None:
    """The failed ``result``'s own status (or message) decides over earlier events.

    With a subscription, a side request's 429 arrives as a rejected ``rate_limit_event`` while
    the main request fails 401 ("Not logged in"): kept as rate limited, the attempt was requeued
    uncounted forever and the breaker never opened. An output orchardist could not read stays
    the agent's error.
    """
    if seen.failure is Failure.AGENT_ERROR:
        return
    code = status if isinstance(status, int) and not isinstance(status, bool) else None
    final = classify(reason, code)
    if final is not None:
        seen.failure = final


def _tokens(seen: Seen, event: dict[str, Any]) -> None:
    """The session's tokens: ``modelUsage`` summed over models, else the ``usage`` block."""
    models = event.get("modelUsage")
    if isinstance(models, dict) and models:
        counts = [m for m in models.values() if isinstance(m, dict)]
        keys_in = ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
        seen.add_tokens(
            sum(_count(m, k) for m in counts for k in keys_in),
            sum(_count(m, "outputTokens") for m in counts),
        )
        return
    usage = event.get("usage") or {}
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    seen.add_tokens(sum(_count(usage, k) for k in keys), usage.get("output_tokens"))


def _count(counts: dict[str, Any], key: str) -> int:
    value = counts.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tool_names(allowed: tuple[str, ...]) -> list[str]:
    """The tools ``allowed`` names, without their patterns: ``Bash(git:*)`` is ``Bash``."""
    names = (entry.split("(", 1)[0].strip() for entry in allowed)
    return list(dict.fromkeys(name for name in names if name))


def denials(raw: Any) -> str:
    """The tool calls Claude Code refused, as one line each; empty when there were none."""
    if not isinstance(raw, list) or not raw:
        return ""
    lines = []
    for denial in raw[:DENIALS_SHOWN]:
        if not isinstance(denial, dict):
            continue
        tool = str(denial.get("tool_name") or "a tool")
        given = denial.get("tool_input")
        given = given if isinstance(given, dict) else {}
        target = given.get("file_path") or given.get("command") or given.get("path") or ""
        lines.append(f"- {tool} {str(target)[:200]}".rstrip())
    more = f"\n- and {len(raw) - DENIALS_SHOWN} more" if len(raw) > DENIALS_SHOWN else ""
    head = f"Claude Code refused {len(raw)} tool call(s) (permission_denials):"
    return "\n".join([head, *lines]) + more
