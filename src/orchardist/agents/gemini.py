"""``kind = "gemini"``: Google Gemini CLI, headless.

``gemini --output-format stream-json --prompt=PROMPT`` prints JSONL events: ``init`` (session id,
model), ``message``, ``tool_use``, ``tool_result``, ``error`` and a final ``result`` whose
``stats`` carry ``input_tokens`` and ``output_tokens``. Exit codes: 1 error, 41 authentication,
42 input error, 44 sandbox, 52 configuration, 53 turn limit. Gemini reports no cost; set
``price_in``/``price_out`` to have orchardist price the tokens.

Permission: ``--approval-mode auto_edit`` (file edits approved) plus a policy file allowing
``allowed_tools`` (``run_shell_command`` by default; headless runs drop tools that would need a
confirmation). ``--allowed-tools`` is deprecated in favour of the policy engine.

Its home: ``GEMINI_CLI_HOME`` points at a folder of the attempt's own, where orchardist writes
``.gemini/settings.json``: the user's own ``~/.gemini/settings.json`` (their privacy and telemetry
choices, for one; comments dropped) with orchardist's keys put in (``security.auth.selectedType``
from the credentials given: headless runs need it; ``general.maxAttempts`` so a refused request is
not retried ten times; ``model.maxSessionTurns`` from ``max_turns``: it exits 53 there, its final
``result`` still carrying the tokens spent, which the attempt keeps). Under the user's settings
it puts ``privacy.usageStatisticsEnabled = false`` unless they set it: with statistics on, every
attempt's gemini probes the machine's GPU (lspci, clinfo, xdpyinfo, xrandr) and sends them to
play.googleapis.com over TLS, about 0.15 s of CPU and a connection outside the model's API per
attempt. It writes the policy file too, and copies the user's Google login files if there are
any. ``--skip-trust``: the worktree is a folder Gemini has never seen, and untrusted folders
exit 55.
Variables it reads: ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``, Vertex's), ``GOOGLE_GEMINI_BASE_URL``
(``GOOGLE_VERTEX_BASE_URL`` for Vertex).

One process: ``GEMINI_CLI_NO_RELAUNCH=true``. Without it, ``gemini`` loads its bundle, then starts
itself again as a child node process to raise the heap limit to half the machine's memory (and
to restart on settings changes, which a headless run never makes): a second start of the whole
CLI, about 1 s of CPU per attempt (2.4 s against 1.4 s for ``--version`` with 0.61.0). Node's
own heap limit (4 GiB on 64-bit machines with enough memory) is left.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..confine.procs import ProcessResult
from ..state.agentrecords import AgentProfile, Failure
from .cli import COMMON_KEYS, CliAgent, Seen, check_choice, home_path, str_list_problem
from .context import AgentContext, AgentResult

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
GEMINI_HOME = "gemini-home"  # GEMINI_CLI_HOME, in the attempt's HOME
REFUSAL = re.compile(r"not in workspace|denied|policy", re.IGNORECASE)  # a refused tool call
MAX_ATTEMPTS = 3  # its own tries of one request (default 10, with long waits on a 429)
LOGIN_FILES = ("oauth_creds.json", "google_accounts.json")  # copied from the user's ~/.gemini
# Under the user's settings: no usage statistics (module docstring), unless they say otherwise
DEFAULT_SETTINGS: dict[str, Any] = {"privacy": {"usageStatisticsEnabled": False}}
# A JSON string (kept) or a comment (dropped): Gemini's settings.json may carry comments
JSONC = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)


class GeminiAgent(CliAgent):
    """Google Gemini CLI (``gemini``)."""

    kind: ClassVar[str] = "gemini"
    executable: ClassVar[str] = "gemini"
    home_files: ClassVar[tuple[str, ...]] = (
        ".gemini/oauth_creds.json",
        ".gemini/google_accounts.json",
        ".gemini/settings.json",
    )
    home_state: ClassVar[tuple[str, ...]] = (".gemini",)
    session_files: ClassVar[tuple[str, ...]] = (f"{GEMINI_HOME}/.gemini/tmp",)  # chats/
    profile_keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"allowed_tools"}
    widening_keys: ClassVar[frozenset[str]] = CliAgent.widening_keys | {"allowed_tools"}
    env_keys: ClassVar[tuple[str, ...]] = (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_VERTEX_BASE_URL",
    )
    key_vars: ClassVar[tuple[str, ...]] = (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
    )
    login_files: ClassVar[tuple[str, ...]] = ("~/.gemini/oauth_creds.json",)
    login_hint: ClassVar[str] = "run `gemini` once and sign in with Google"
    default_permission: ClassVar[Any] = "auto_edit"
    reports_cost: ClassVar[bool] = False
    unsupported: ClassVar[dict[str, str]] = {
        "max_cost_usd": "gemini reports its tokens only when it ends, too late to stop it at a"
        " cost; bound it with max_turns",
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

    def __init__(self, profile: AgentProfile) -> None:
        super().__init__(profile)
        self.allowed_tools = tuple(str(t) for t in self.options.get("allowed_tools", DEFAULT_TOOLS))

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``gemini --output-format stream-json --prompt=PROMPT`` (a long one comes on stdin)."""
        tools = self.allowed_tools
        argv = [self.command, "--output-format", "stream-json", "--skip-trust"]
        argv += ["--approval-mode", str(self.permission)]
        if tools:
            argv += ["--policy", str(_home(ctx) / ".gemini" / "orchardist-policy.toml")]
        if self.model:
            argv += ["-m", self.model]
        if ctx.resume:
            argv += ["--resume", ctx.resume]
        # one argument: yargs takes a prompt beginning with "-" ("- fix it") for an option and
        # exits, "Not enough arguments following: p"
        return [*argv, *self.args, f"--prompt={STDIN_PROMPT if prompt is None else prompt}"]

    def run(self, ctx: AgentContext) -> AgentResult:
        """Write its private home, then run it."""
        self._write_home(ctx)
        return super().run(ctx)

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """Its private home, the workspace trusted, and no relaunch (module docstring)."""
        return {
            "GEMINI_CLI_HOME": str(_home(ctx)),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }

    def _write_home(self, ctx: AgentContext) -> None:
        """settings.json, the policy allowing ``allowed_tools``, and the user's login files."""
        folder = _home(ctx) / ".gemini"
        folder.mkdir(parents=True, exist_ok=True)
        ours: dict[str, Any] = {
            "security": {"auth": {"selectedType": self._auth_type(ctx.env)}},
            "general": {"maxAttempts": MAX_ATTEMPTS},
        }
        if self.max_turns is not None:
            ours["model"] = {"maxSessionTurns": self.max_turns}
        settings = _merged(_merged(DEFAULT_SETTINGS, _user_settings(ctx.env)), ours)
        (folder / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
        tools = self.allowed_tools
        rules = [
            f'[[rule]]\ntoolName = {json.dumps(str(t))}\ndecision = "allow"\npriority = 100\n'
            for t in tools
        ]
        (folder / "orchardist-policy.toml").write_text("\n".join(rules), encoding="utf-8")
        user = home_path("~/.gemini", ctx.env)
        for name in LOGIN_FILES:
            if (user / name).is_file() and not (user / name).is_symlink():
                shutil.copyfile(user / name, folder / name)

    def _auth_type(self, env: Mapping[str, str]) -> str:
        """Gemini's ``selectedType`` for the credentials the profile passes."""
        allowed = {*self.env_keys, *self.profile.env}
        given = {k for k, v in env.items() if v and k in allowed}
        if "GOOGLE_GENAI_USE_VERTEXAI" in given:
            return "vertex-ai"
        if given & {"GEMINI_API_KEY", "GOOGLE_API_KEY"}:
            return "gemini-api-key"
        return "oauth-personal"

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
            tools = seen.state.setdefault("tools", {})
            tools[str(event.get("tool_id"))] = str(event.get("tool_name") or "a tool")
        elif kind == "tool_result" or (kind == "message" and event.get("role") == "user"):
            seen.state["model_turn"] = False
            message = str((event.get("error") or {}).get("message") or "")
            if event.get("status") == "error" and REFUSAL.search(message):
                tool = seen.state.get("tools", {}).get(str(event.get("tool_id")), "a tool")
                seen.state.setdefault("refused", []).append(f"{tool}: {message[:200]}")
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

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """The base verdict, with the tool calls gemini refused in the summary."""
        refused = seen.state.get("refused")
        if refused:
            head = f"gemini refused {len(refused)} tool call(s):\n" + "\n".join(
                f"- {r}" for r in refused[:5]
            )
            seen.summary = f"{head}\n{seen.summary}" if seen.summary else head
        return super().result(proc, seen, ctx)

    def verdict(self, proc: ProcessResult, seen: Seen) -> tuple[Failure, str]:
        """Gemini's documented exit codes first; otherwise classify what it said."""
        if proc.exit_code in EXIT_CODES:
            failure, meaning = EXIT_CODES[proc.exit_code]
            said = seen.errors[0] if seen.errors else (seen.text[-1] if seen.text else "")
            return failure, f"gemini: {meaning} (exit {proc.exit_code})" + (
                f": {said}" if said else ""
            )
        return super().verdict(proc, seen)


def _home(ctx: AgentContext) -> Path:
    """The attempt's private Gemini home (``GEMINI_CLI_HOME``), in its private HOME (emptied
    before verify runs; its sessions kept from there for the task's next attempt)."""
    return ctx.home / GEMINI_HOME


def _user_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The user's own ``~/.gemini/settings.json`` (comments allowed), or {} if none is readable."""
    path = home_path("~/.gemini/settings.json", env)
    if not path.is_file() or path.is_symlink():
        return {}
    try:
        text = JSONC.sub(lambda m: m.group(1) or "", path.read_text(encoding="utf-8"))
        data = json.loads(text)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values put in, section by section (``over`` wins)."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            value = _merged(old, value)
        out[key] = value
    return out
