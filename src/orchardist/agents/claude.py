"""``kind = "claude"``: Claude Code, headless.

``claude -p --output-format stream-json --verbose`` with the prompt on stdin. The stream ends
with a ``result`` event carrying ``total_cost_usd``, ``num_turns``, ``session_id``, ``usage`` and
``is_error``; a ``rate_limit_event`` whose status is ``rejected`` carries ``resetsAt``.

Permission: ``acceptEdits`` plus an explicit ``allowed_tools`` list (Bash and the file tools),
because ``bypassPermissions`` refuses to start as root.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from ..records import Failure
from . import AgentContext
from .cli import COMMON_KEYS, CliAgent, Seen, check_choice, str_list_problem
from .limits import epoch_datetime

PERMISSION_MODES = ("acceptEdits", "bypassPermissions", "default", "dontAsk", "plan")
DEFAULT_TOOLS = ("Bash", "Edit", "MultiEdit", "Write", "Read", "Glob", "Grep", "LS", "TodoWrite")


class ClaudeAgent(CliAgent):
    """Claude Code (``claude``)."""

    kind: ClassVar[str] = "claude"
    executable: ClassVar[str] = "claude"
    profile_keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"allowed_tools", "max_cost_usd"}
    env_keys: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
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
        """``allowed_tools`` is a list of tool names; ``max_cost_usd`` a positive number."""
        problems = []
        if "allowed_tools" in options and (p := str_list_problem(options["allowed_tools"])):
            problems.append((p, "allowed_tools"))
        cost = options.get("max_cost_usd", 1)
        if isinstance(cost, bool) or not isinstance(cost, int | float) or cost <= 0:
            problems.append(("expected a positive number of US dollars", "max_cost_usd"))
        return problems

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``claude -p`` reading the prompt from stdin."""
        tools = self.options.get("allowed_tools", DEFAULT_TOOLS)
        argv = [self.command, "-p", "--output-format", "stream-json", "--verbose"]
        argv += ["--permission-mode", str(self.permission)]
        if tools:
            argv += ["--allowedTools", ",".join(tools)]
        if self.max_turns is not None:
            argv += ["--max-turns", str(self.max_turns)]
        if self.model:
            argv += ["--model", self.model]
        if "max_cost_usd" in self.options:
            argv += ["--max-budget-usd", f"{float(self.options['max_cost_usd']):g}"]
        return argv + self.args

    def prompt_on_stdin(self, ctx: AgentContext) -> bool:
        """Always: ``claude -p`` reads the prompt from stdin."""
        return True

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

    def _result(self, seen: Seen, event: dict[str, Any]) -> None:
        if event.get("session_id"):
            seen.session_id = str(event["session_id"])
        seen.add_cost(event.get("total_cost_usd"))
        if isinstance(event.get("num_turns"), int):
            seen.turns = event["num_turns"]
        usage = event.get("usage") or {}
        cached = [usage.get(k) for k in ("cache_creation_input_tokens", "cache_read_input_tokens")]
        seen.add_tokens(
            sum(v for v in [usage.get("input_tokens"), *cached] if isinstance(v, int)),
            usage.get("output_tokens"),
        )
        text = str(event.get("result") or "")
        if event.get("is_error") or str(event.get("subtype", "success")) != "success":
            subtype = str(event.get("subtype", ""))
            reason = text or subtype.replace("_", " ")
            seen.error(reason, event.get("api_error_status"))
        else:
            seen.summary = text
