"""``kind = "codex"``: OpenAI Codex CLI, headless.

``codex exec --json`` prints JSONL events: ``thread.started`` (the session), ``item.completed``
(messages, commands, file changes), ``turn.completed`` with token ``usage``, ``turn.failed`` and
``error``. The prompt is the last argument and stdin is closed, or codex would wait for input.
Codex reports no cost; set ``price_in``/``price_out`` to have orchardist price the tokens.

Permission: ``--sandbox workspace-write`` (edits and commands inside the worktree, no network)
with approvals off (``-c approval_policy="never"``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import AgentContext
from .cli import CliAgent, Seen, check_choice

SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")


class CodexAgent(CliAgent):
    """OpenAI Codex CLI (``codex``)."""

    kind: ClassVar[str] = "codex"
    executable: ClassVar[str] = "codex"
    env_keys: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    )
    key_vars: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY", "CODEX_API_KEY")
    login_files: ClassVar[tuple[str, ...]] = ("$CODEX_HOME/auth.json", "~/.codex/auth.json")
    login_hint: ClassVar[str] = "run `codex login`"
    default_permission: ClassVar[Any] = "workspace-write"
    unsupported: ClassVar[dict[str, str]] = {
        "max_turns": "codex exec has no turn limit; bound it with the profile's timeout",
    }

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """A codex sandbox mode."""
        return check_choice(value, SANDBOX_MODES)

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``codex exec --json ... -- PROMPT`` (``-`` reads a long prompt from stdin)."""
        argv = [self.command, "exec", "--json", "--sandbox", str(self.permission)]
        argv += ["-c", 'approval_policy="never"', "--skip-git-repo-check", "-C", str(ctx.cwd)]
        if self.model:
            argv += ["-m", self.model]
        return [*argv, *self.args, "--", "-" if prompt is None else prompt]

    def event(self, seen: Seen, event: dict[str, Any]) -> None:
        """Session, per-turn usage, the last agent message, and errors."""
        kind = event.get("type")
        if kind == "thread.started" and event.get("thread_id"):
            seen.session_id = str(event["thread_id"])
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
            seen.add_tokens(usage.get("input_tokens"), usage.get("output_tokens"))
            seen.count_turn()
        elif kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "agent_message" and item.get("text"):
                seen.summary = str(item["text"])
        elif kind == "turn.failed":
            seen.error((event.get("error") or {}).get("message", "turn failed"))
        elif kind == "error":
            # codex also reports errors it recovers from (reconnects); only the exit code or a
            # failed turn makes them final.
            seen.error(event.get("message"), fatal=False)
