"""``kind = "codex"``: OpenAI Codex CLI, headless.

``codex exec --json`` prints JSONL events: ``thread.started`` (the session), ``item.completed``
(messages, commands, file changes), ``turn.completed`` with token ``usage``, ``turn.failed`` and
``error``. The prompt is the last argument and stdin is closed, or codex would wait for input.
Codex reports no cost; set ``price_in``/``price_out`` to have orchardist price the tokens.

Permission (``--sandbox``): ``auto`` (the default) is ``danger-full-access`` when orchardist
confines the attempt itself (codex's own bwrap cannot set up its uid map inside orchardist's
sandbox, so every write would fail) and ``workspace-write`` when it does not; an explicit
``workspace-write`` is a plan error unless ``[run] isolation = "off"``. Approvals are off
(``-c approval_policy="never"``).

Variables: codex reads its key from ``CODEX_API_KEY`` (with only ``OPENAI_API_KEY`` it sends no
key), so orchardist copies ``OPENAI_API_KEY`` there; it ignores ``OPENAI_BASE_URL``, so when that
is set orchardist declares a provider entry with that base URL (Responses API over HTTPS, no
WebSocket). Its ``--json`` stream gives tokens only when the turn ends, so for ``max_cost_usd``
(which needs ``price_in``/``price_out``) orchardist reads the running totals from the session log
codex writes as it goes (``$CODEX_HOME/sessions/…/rollout-…-THREAD.jsonl``, ``token_count``
events); an attempt stopped there keeps those totals. A patch codex could not write
(``file_change`` items that failed, a patch its sandbox rejected) is reported in the attempt's
summary; when no write succeeded, the unchanged worktree fails the attempt as ``no_changes``
(codex exits 0), saying why, as a refused edit does with every tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from ..confine.procs import ProcessResult
from ..safeio import read_tail
from .cli import SUMMARY_CHARS, CliAgent, Seen, check_choice
from .context import AgentContext, AgentResult

SANDBOX_MODES = ("auto", "read-only", "workspace-write", "danger-full-access")
PROVIDER = "orchardist"  # the provider entry declared for OPENAI_BASE_URL
SESSION_LOG_SLICE = 4 << 20  # bytes of codex's session log read per look
REJECTED = "patch rejected:"  # codex's stderr line for a patch its sandbox refused


class CodexAgent(CliAgent):
    """OpenAI Codex CLI (``codex``)."""

    kind: ClassVar[str] = "codex"
    executable: ClassVar[str] = "codex"
    home_files: ClassVar[tuple[str, ...]] = (".codex/auth.json", ".codex/config.toml")
    home_state: ClassVar[tuple[str, ...]] = (".codex",)
    session_files: ClassVar[tuple[str, ...]] = (".codex/sessions",)  # rollout-…-THREAD.jsonl
    env_keys: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    )
    key_vars: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY", "CODEX_API_KEY")
    login_files: ClassVar[tuple[str, ...]] = ("$CODEX_HOME/auth.json", "~/.codex/auth.json")
    login_hint: ClassVar[str] = "run `codex login`"
    default_permission: ClassVar[Any] = "auto"
    reports_cost: ClassVar[bool] = False
    unsupported: ClassVar[dict[str, str]] = {
        "max_turns": "codex exec has no turn limit; bound it with the profile's timeout",
    }

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """A codex sandbox mode."""
        return check_choice(value, SANDBOX_MODES)

    @classmethod
    def check_confined(cls, options: Mapping[str, Any], repo: Path) -> list[tuple[str, str]]:
        """``workspace-write`` runs each command in codex's own bwrap, which cannot set up its
        uid map inside orchardist's namespaces: every command failed and the attempt ended
        ``no_changes`` without a word of why (issue 31)."""
        if options.get("permission") != "workspace-write":
            return []
        why = (
            "codex's workspace-write sandbox cannot start inside orchardist's isolation (its"
            " bwrap: setting up uid map: Operation not permitted), so every command it runs"
            ' fails; use permission = "auto" (orchardist\'s isolation confines codex to the'
            ' attempt\'s folders), or [run] isolation = "off"'
        )
        return [(why, "permission")]

    def sandbox(self, ctx: AgentContext) -> str:
        """The ``--sandbox`` mode: ``auto`` leaves containment to orchardist when it confines."""
        if self.permission != "auto":
            return str(self.permission)
        return "workspace-write" if ctx.writable is None else "danger-full-access"

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``codex exec --json ... -- PROMPT`` (``-`` reads a long prompt from stdin)."""
        if ctx.resume:  # ``exec resume`` takes neither --sandbox nor -C (it runs in its cwd)
            argv = [self.command, "exec", "resume", "--json"]
            argv += ["-c", f"sandbox_mode={json.dumps(self.sandbox(ctx))}"]
            argv += ["-c", 'approval_policy="never"', "--skip-git-repo-check"]
        else:
            argv = [self.command, "exec", "--json", "--sandbox", self.sandbox(ctx)]
            argv += ["-c", 'approval_policy="never"', "--skip-git-repo-check", "-C", str(ctx.cwd)]
        base_url = ctx.env.get("OPENAI_BASE_URL")
        if base_url:
            entry = {
                "name": PROVIDER,
                "base_url": base_url,
                "env_key": "CODEX_API_KEY",
                "wire_api": "responses",
                "supports_websockets": False,
            }
            fields = ",".join(f"{k}={json.dumps(v)}" for k, v in entry.items())
            argv += ["-c", f"model_provider={json.dumps(PROVIDER)}"]
            argv += ["-c", f"model_providers.{PROVIDER}={{{fields}}}"]
        if self.model:
            argv += ["-m", self.model]
        session = [ctx.resume] if ctx.resume else []
        return [*argv, *self.args, "--", *session, "-" if prompt is None else prompt]

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """``CODEX_API_KEY`` from ``OPENAI_API_KEY`` when only that one is set."""
        key = ctx.env.get("OPENAI_API_KEY")
        if key and not ctx.env.get("CODEX_API_KEY"):
            return {"CODEX_API_KEY": key}
        return {}

    def text(self, seen: Seen, line: str) -> None:
        """Non-JSON lines; a patch the sandbox rejected counts as a failed write."""
        if REJECTED in line:
            _writes(seen)["failed"].append(line.split(REJECTED, 1)[1].strip())
        super().text(seen, line)

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
            elif item.get("type") == "file_change":
                paths = [
                    str(c.get("path")) for c in item.get("changes") or () if isinstance(c, dict)
                ]
                done = item.get("status") == "completed"
                _writes(seen)["done" if done else "failed"].append(", ".join(paths) or "a patch")
        elif kind == "turn.failed":
            # the final error goes first: the recovered ones before it only explain it
            seen.errors.insert(0, str((event.get("error") or {}).get("message") or "turn failed"))
            seen.errored = True
        elif kind == "error":
            # codex also reports errors it recovers from (reconnects); only the exit code or a
            # failed turn makes them final.
            seen.error(event.get("message"), fatal=False)

    def spent_usd(self, seen: Seen, ctx: AgentContext) -> float | None:
        """The tokens so far, priced; from codex's session log until its turn ends."""
        if seen.input_tokens is not None:
            return super().spent_usd(seen, ctx)
        _read_session_log(seen, ctx)
        so_far = Seen()
        so_far.input_tokens, so_far.output_tokens = seen.state.get("session_tokens", (None, None))
        return so_far.usage(self.price_in, self.price_out).cost_usd

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """As for every CLI, with the writes codex could not make in the summary."""
        if seen.input_tokens is None and seen.session_id:
            _read_session_log(seen, ctx)  # stopped before its turn ended: keep what it spent
            seen.input_tokens, seen.output_tokens = seen.state.get("session_tokens", (None, None))
        result = super().result(proc, seen, ctx)
        writes = _writes(seen)
        if result.failure is not None or result.cancelled or not writes["failed"]:
            return result
        failed = "; ".join(writes["failed"])
        if writes["done"]:
            detail = f"{result.detail} (some writes failed: {failed})"
        else:
            detail = (
                f"codex could not write any file (its sandbox refused): {failed}\n{result.detail}"
            )
        return replace(result, detail=detail.strip()[:SUMMARY_CHARS])


def _writes(seen: Seen) -> dict[str, list[str]]:
    """The file changes codex reported, completed and failed."""
    writes: dict[str, list[str]] = seen.state.setdefault("writes", {"done": [], "failed": []})
    return writes


def _read_session_log(seen: Seen, ctx: AgentContext) -> None:
    """Take in the ``token_count`` events codex has logged since the last look."""
    if not seen.session_id:
        return
    log: Path | None = seen.state.get("session_log")
    if log is None:
        home = ctx.env.get("CODEX_HOME") or str(Path(ctx.env.get("HOME", "~")) / ".codex")
        found = sorted(Path(home).glob(f"sessions/*/*/*/rollout-*-{seen.session_id}.jsonl"))
        if not found:
            return
        log = seen.state["session_log"] = found[-1]
    # The log is in the agent's home: never an open that blocks (a FIFO) or reads without end.
    tail = read_tail(log, seen.state.get("session_offset", 0), SESSION_LOG_SLICE)
    if not tail.found:
        return
    data = tail.data
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for next time
    if not complete and len(data) == SESSION_LOG_SLICE:
        complete = data  # one line longer than a slice holds no token count: skip it
    seen.state["session_offset"] = seen.state.get("session_offset", 0) + len(complete)
    for line in complete.splitlines():
        try:
            entry = json.loads(line)
            payload = entry["payload"]
            counted = payload["type"] == "token_count"
            totals = payload["info"]["total_token_usage"] if counted else {}
        except (ValueError, KeyError, TypeError):
            continue
        tokens_in, tokens_out = totals.get("input_tokens"), totals.get("output_tokens")
        if isinstance(tokens_in, int) and isinstance(tokens_out, int):
            seen.state["session_tokens"] = (tokens_in, tokens_out)
