"""``kind = "gemini"``: Google Gemini CLI, headless.

``gemini --output-format stream-json -p PROMPT`` prints JSONL events: ``init`` (session id,
model), ``message``, ``tool_use``, ``tool_result``, ``error`` and a final ``result`` whose
``stats`` carry ``input_tokens`` and ``output_tokens``. Exit codes: 1 error, 41 authentication,
42 input error, 44 sandbox, 52 configuration, 53 turn limit. Gemini reports no cost; set
``price_in``/``price_out`` to have orchardist price the tokens.

Permission: ``--approval-mode auto_edit`` (file edits approved) plus ``--allowed-tools
run_shell_command`` (headless runs drop tools that would need a confirmation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..procs import ProcessResult
from ..records import Failure
from . import AgentContext
from .cli import COMMON_KEYS, CliAgent, Seen, check_choice, str_list_problem

APPROVAL_MODES = ("auto_edit", "yolo", "default")
DEFAULT_TOOLS = ("run_shell_command",)
EXIT_CODES = {
    41: (Failure.AUTH_ERROR, "authentication failed"),
    42: (Failure.AGENT_ERROR, "input error (invalid prompt or arguments)"),
    44: (Failure.AGENT_ERROR, "sandbox error"),
    52: (Failure.AGENT_ERROR, "configuration error"),
    53: (Failure.AGENT_ERROR, "turn limit exceeded"),
}
STDIN_PROMPT = "Carry out the task given above."


class GeminiAgent(CliAgent):
    """Google Gemini CLI (``gemini``)."""

    kind: ClassVar[str] = "gemini"
    executable: ClassVar[str] = "gemini"
    profile_keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"allowed_tools"}
    env_keys: ClassVar[tuple[str, ...]] = (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
    )
    key_vars: ClassVar[tuple[str, ...]] = (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
    )
    login_files: ClassVar[tuple[str, ...]] = ("~/.gemini/oauth_creds.json",)
    login_hint: ClassVar[str] = "run `gemini` once and sign in with Google"
    default_permission: ClassVar[Any] = "auto_edit"
    unsupported: ClassVar[dict[str, str]] = {
        "max_turns": "gemini has no turn-limit flag; set model.maxSessionTurns in its settings",
    }

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """A Gemini CLI approval mode."""
        return check_choice(value, APPROVAL_MODES)

    @classmethod
    def check_extra(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``allowed_tools`` is a list of tool names."""
        if "allowed_tools" in options and (p := str_list_problem(options["allowed_tools"])):
            return [(p, "allowed_tools")]
        return []

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``gemini --output-format stream-json -p PROMPT`` (a long prompt comes on stdin)."""
        tools = self.options.get("allowed_tools", DEFAULT_TOOLS)
        argv = [self.command, "--output-format", "stream-json"]
        argv += ["--approval-mode", str(self.permission)]
        if tools:
            argv += ["--allowed-tools", ",".join(tools)]
        if self.model:
            argv += ["-m", self.model]
        return [*argv, *self.args, "-p", STDIN_PROMPT if prompt is None else prompt]

    def event(self, seen: Seen, event: dict[str, Any]) -> None:
        """Session, turns, the final answer, stats and errors."""
        kind = event.get("type")
        if kind == "init" and event.get("session_id"):
            seen.session_id = str(event["session_id"])
        elif kind == "message" and event.get("role") == "assistant":
            self._model_spoke(seen)
            seen.summary += str(event.get("content") or "")
        elif kind == "tool_use":
            self._model_spoke(seen)
        elif kind == "tool_result" or (kind == "message" and event.get("role") == "user"):
            seen.state["model_turn"] = False
        elif kind == "error" and event.get("severity") == "error":
            seen.error(event.get("message"), fatal=False)
        elif kind == "result":
            stats = event.get("stats") or {}
            seen.add_tokens(stats.get("input_tokens"), stats.get("output_tokens"))
            if event.get("status") == "error":
                seen.error((event.get("error") or {}).get("message", "gemini reported an error"))

    def _model_spoke(self, seen: Seen) -> None:
        """A model response starts a turn; tool results end it. The summary is the last one."""
        if not seen.state.get("model_turn"):
            seen.count_turn()
            seen.summary = ""
            seen.state["model_turn"] = True

    def verdict(self, proc: ProcessResult, seen: Seen) -> tuple[Failure, str]:
        """Gemini's documented exit codes first; otherwise classify what it said."""
        if proc.exit_code in EXIT_CODES:
            failure, meaning = EXIT_CODES[proc.exit_code]
            said = seen.errors[0] if seen.errors else (seen.text[-1] if seen.text else "")
            return failure, f"gemini: {meaning} (exit {proc.exit_code})" + (
                f": {said}" if said else ""
            )
        return super().verdict(proc, seen)
