"""``kind = "opencode"``: OpenCode, headless.

``opencode run --format json -m provider/model -- PROMPT`` prints JSONL events (``step_start``,
``text``, ``tool_use``, ``step_finish``, ``error``), each with the ``sessionID``. Every
``step_finish`` part carries that step's ``cost`` and ``tokens``; orchardist sums them. A
``tool_use`` its permission rules refused (status ``error``, "a rule which prevents you") is
listed in the attempt's summary, so a run that changed nothing says why. An ``error`` event
carries the API's response headers: a 429's reset is ``retry-after-ms`` (what opencode's own
retries wait for), else ``retry-after``. Recorded real streams: tests/fixtures/agents/opencode/.

``--title`` names the session after the task: without it, opencode asks the model for a title,
one more paid call that no ``step_finish`` reports (so orchardist could not count its cost).

Permission: a table of OpenCode permissions passed as ``OPENCODE_PERMISSION``; the default lets
it edit and run commands, and denies touching directories outside the worktree. ``opencode run``
rejects anything that would ask.

Snapshots off: ``OPENCODE_CONFIG_CONTENT`` gets ``"snapshot": false`` (merged under the user's
own content, which wins). OpenCode otherwise copies the worktree into a git repository of its
own in its home and records a tree there before and after each step, for an undo that nothing
here uses: orchardist's worktree and diff are the record. It was 15% of a two-step attempt's
CPU (9.0 s against 7.5 s with the real opencode 1.18.33), and grows with the tree and the steps.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from ..confine.procs import ProcessResult
from .cli import CliAgent, Seen
from .context import AgentContext, AgentResult

DEFAULT_PERMISSION = {"edit": "allow", "bash": "allow", "external_directory": "deny"}
REFUSED = "rule which prevents you"  # in the error of a tool call its permissions refused
_ACTIONS = ("allow", "ask", "deny")


class OpenCodeAgent(CliAgent):
    """OpenCode (``opencode``)."""

    kind: ClassVar[str] = "opencode"
    executable: ClassVar[str] = "opencode"
    home_files: ClassVar[tuple[str, ...]] = (
        ".local/share/opencode/auth.json",
        ".config/opencode/opencode.json",
    )
    home_state: ClassVar[tuple[str, ...]] = (
        ".local/share/opencode",
        ".local/state/opencode",
        ".config/opencode",
        ".cache/opencode",
    )
    # It installs @opencode-ai/plugin into ~/.config/opencode with npm on start (12-20 s from
    # the public registry; each attempt's home is new): kept per profile with npm's download
    # cache, never its config.
    home_cache: ClassVar[tuple[str, ...]] = (
        ".npm",
        ".config/opencode/node_modules",
        ".config/opencode/package.json",
        ".config/opencode/package-lock.json",
        ".config/opencode/bun.lock",
        ".cache/opencode",
    )
    # its sessions' database (not auth.json beside it, nor the worktree snapshots)
    session_files: ClassVar[tuple[str, ...]] = tuple(
        f".local/share/opencode/{name}"
        for name in ("opencode.db", "opencode.db-wal", "opencode.db-shm", "storage")
    )
    env_keys: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENROUTER_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_CONTENT",  # a whole config as JSON (providers, base URLs, prices)
        "OPENCODE_DISABLE_MODELS_FETCH",  # no fetch of models.dev (offline machines)
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
    )
    key_vars: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENROUTER_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
    )
    login_files: ClassVar[tuple[str, ...]] = (
        "$XDG_DATA_HOME/opencode/auth.json",
        "~/.local/share/opencode/auth.json",
    )
    login_hint: ClassVar[str] = "run `opencode auth login`"
    default_permission: ClassVar[Any] = DEFAULT_PERMISSION
    unsupported: ClassVar[dict[str, str]] = {
        "max_turns": "opencode run has no turn limit; bound it with the profile's timeout",
    }

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """A table of permission → allow/ask/deny (or a nested table of patterns)."""
        if not isinstance(value, dict):
            return ['expected a table such as {edit = "allow", bash = "allow"}']

        def ok(action: Any) -> bool:
            if isinstance(action, dict):
                return all(ok(a) for a in action.values())
            return action in _ACTIONS

        return [f"{key}: expected allow, ask or deny" for key, a in value.items() if not ok(a)]

    @classmethod
    def check_extra(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """OpenCode names models ``provider/model``."""
        model = options.get("model")
        if isinstance(model, str) and "/" not in model:
            return [("expected provider/model, e.g. anthropic/claude-sonnet-4-5", "model")]
        return []

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``opencode run --format json ... -- PROMPT`` (a long prompt comes on stdin)."""
        argv = [self.command, "run", "--format", "json"]
        if self.model:
            argv += ["-m", self.model]
        if not any(a == "--title" or a.startswith("--title=") for a in self.args):
            argv.append(f"--title={ctx.title or ctx.task_id}")  # no title request: see above
        if ctx.resume:
            argv += ["--session", ctx.resume]
        argv += self.args
        return argv if prompt is None else [*argv, "--", prompt]

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """The permission table, and the configuration with snapshots off (module docstring),
        which opencode reads from its environment."""
        return {
            "OPENCODE_PERMISSION": json.dumps(self.permission),
            "OPENCODE_CONFIG_CONTENT": _without_snapshots(ctx.env.get("OPENCODE_CONFIG_CONTENT")),
        }

    def event(self, seen: Seen, event: dict[str, Any]) -> None:
        """Per-step cost and tokens, the last text, and errors."""
        if event.get("sessionID"):
            seen.session_id = str(event["sessionID"])
        kind = event.get("type")
        part = event.get("part") or {}
        if kind == "step_finish":
            tokens = part.get("tokens") or {}
            cache = tokens.get("cache") or {}
            cached = sum(v for v in (cache.get("read"), cache.get("write")) if isinstance(v, int))
            seen.add_tokens((tokens.get("input") or 0) + cached, tokens.get("output"))
            seen.add_cost(part.get("cost"))
            seen.count_turn()
        elif kind == "text" and part.get("text"):
            seen.summary = str(part["text"])
        elif kind == "tool_use":
            state = part.get("state") or {}
            if state.get("status") == "error" and REFUSED in str(state.get("error")):
                seen.state.setdefault("refused", []).append(str(part.get("tool") or "a tool"))
        elif kind == "error":
            self._error(seen, event.get("error") or {})

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """The base verdict, with the tool calls its permissions refused in the summary."""
        refused = seen.state.get("refused")
        if refused:
            tools = ", ".join(refused)
            head = f"opencode refused {len(refused)} tool call(s) (permission): {tools}"
            seen.summary = f"{head}\n{seen.summary}" if seen.summary else head
        return super().result(proc, seen, ctx)

    def _error(self, seen: Seen, error: dict[str, Any]) -> None:
        data = error.get("data") or {}
        message = str(data.get("message") or error.get("name") or "opencode reported an error")
        status = data.get("statusCode")
        if error.get("name") == "ProviderAuthError":
            status = 401
        seen.error(f"{error.get('name', 'Error')}: {message}", status)
        headers = {str(k).lower(): v for k, v in (data.get("responseHeaders") or {}).items()}
        reset = _reset_s(headers)
        if reset is not None:
            seen.retry_after_s = reset


def _without_snapshots(content: str | None) -> str:
    """The user's ``OPENCODE_CONFIG_CONTENT`` with ``"snapshot": false`` unless it says
    otherwise; content that is not a JSON object is passed on as it is, for opencode to judge."""
    try:
        config = json.loads(content) if content else {}
    except ValueError:
        return content or ""
    if not isinstance(config, dict):
        return content or ""
    return json.dumps({"snapshot": False, **config})


def _reset_s(headers: Mapping[str, Any]) -> float | None:
    """The API's reset in seconds: ``retry-after-ms`` first, as opencode's own retries read it
    (a reset under a second is rounded up to one in ``retry-after``), else ``retry-after``."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return float(headers[name]) * scale
    return None
