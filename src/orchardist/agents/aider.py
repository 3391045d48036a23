"""``kind = "aider"``: aider, headless.

``aider --message-file F --yes-always --no-auto-commits --no-stream`` answers one message and
exits. It prints no JSON: tokens and cost come from its summary lines (``Tokens: 2.1k sent, 345
received. Cost: $0.01 message, $0.03 session.``), errors from its LiteLLM exception lines. aider
exits 0 even when every API call failed, so an error it did not recover from (no later
``Tokens:`` line) fails the attempt. Edits it refused (``Skipping edits to …``: a file the
repository ignores, say) are the attempt's summary, so a run that changed nothing says why.
It retries a 429 by itself for about a minute (0.25 s doubling to 32 s; no flag shortens it)
before giving up with the provider's message, whose "try again in …" is the pause.
``max_cost_usd``: orchardist stops it once the ``Cost:`` it prints (or its tokens priced with
``price_in``/``price_out``) reach the cap; it prints one summary line per model call.

Install aider in its own environment (``pipx install aider-chat``): it pins hundreds of exact
dependencies and is never a dependency of orchardist.

Files: its chat history is its session: it goes to the attempt's private HOME, is kept for the
task's next attempt, which restores it (``--restore-chat-history``); its input history goes to
the attempt's private folder (beside the output file; the logs folder is read-only to the
agent). Its repository map's cache (``.aider.tags.cache.v4/`` at the repository's root, not
movable) is removed when it ends, unless
the worktree had one before: it is aider's, not the work. aider insists on a git identity and,
finding none, writes one into the repository's config; orchardist gives it one through the
environment (``GIT_CONFIG_*``), so it writes nothing there.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from ..confine.procs import ProcessResult
from ..state.agentrecords import Failure
from .cli import CliAgent, Needs, Seen
from .context import AgentContext, AgentResult

_NUMBER = r"([\d.,]+)\s*([kKmM]?)"
_TOKENS = re.compile(
    rf"Tokens: {_NUMBER} sent(?:, {_NUMBER} cache write)?(?:, {_NUMBER} cache hit)?,"
    rf" {_NUMBER} received"
)
_COST = re.compile(r"Cost: \$([\d.]+) message, \$([\d.]+) session")
_ERROR = re.compile(
    r"^(?:litellm\.)?\w*(?:Error|Exception)\b.*|^The API provider .*|^Missing these environment"
)
_SKIPPED = re.compile(r"^Skipping edits to .*|^Unable to create .*, skipping edits\.$")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}
LOCAL_PREFIXES = ("ollama/", "ollama_chat/", "lm_studio/")
TAGS_CACHE = ".aider.tags.cache.v4"  # aider's repository-map cache, at the repository's root
CHAT_HISTORY = ".aider/chat.history.md"  # in its HOME: its session, kept for the next attempt
LOCAL_PRICES = "LITELLM_LOCAL_MODEL_COST_MAP"  # LiteLLM reads its installed price list, no fetch


class AiderAgent(CliAgent):
    """aider (``aider``), installed on its own."""

    kind: ClassVar[str] = "aider"
    executable: ClassVar[str] = "aider"
    home_files: ClassVar[tuple[str, ...]] = (
        ".aider.conf.yml",
        ".aider.model.settings.yml",
        ".aider.model.metadata.json",
    )
    home_state: ClassVar[tuple[str, ...]] = (".aider", ".cache")
    session_files: ClassVar[tuple[str, ...]] = (CHAT_HISTORY,)
    env_keys: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "OPENAI_API_BASE",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "OPENROUTER_API_KEY",
        "DEEPSEEK_API_KEY",
    )
    key_vars: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "OPENROUTER_API_KEY",
        "DEEPSEEK_API_KEY",
    )
    unsupported: ClassVar[dict[str, str]] = {
        "max_turns": "aider answers one message per run; there is no turn limit to set",
        "permission": "aider has no permission modes: it edits files and, even with"
        " --yes-always, runs no shell commands; give it --test-cmd/--lint-cmd in args",
    }

    @classmethod
    def needs(cls, options: Mapping[str, Any]) -> Needs:
        """No key for a local model (Ollama, LM Studio)."""
        needs = super().needs(options)
        if str(options.get("model", "")).startswith(LOCAL_PREFIXES):
            return replace(needs, key_vars=())
        return needs

    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """``aider --message-file`` with its history files kept out of the worktree."""
        argv = [self.command, "--message-file", str(ctx.prompt_file)]
        argv += ["--yes-always", "--no-auto-commits", "--no-stream", "--no-pretty"]
        # every attempt's home is new, so every run is aider's "first run": with --yes-always it
        # would open its release notes in a browser, and say yes when it asks whether to send
        # analytics (it asks a tenth of new homes, and any whose config says `analytics: true`)
        argv += ["--no-gitignore", "--no-check-update", "--no-show-release-notes", "--no-analytics"]
        private = ctx.output_file.parent
        argv += ["--chat-history-file", str(ctx.home / CHAT_HISTORY)]
        argv += ["--input-history-file", str(private / "aider.input.history")]
        if ctx.resume:
            argv.append("--restore-chat-history")
        if self.model:
            argv += ["--model", self.model]
        return argv + self.args

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """A git identity for aider's check (it never commits: ``--no-auto-commits``), and
        LiteLLM's installed price list instead of a download at every start.

        LiteLLM fetches its price list (about 1.3 MB, from GitHub, with a 5 s timeout) while
        aider imports it, and every attempt's home is new, so nothing of it is cached: a download
        per attempt, or a 5 s stall where the network drops packets. A model the installed
        LiteLLM knows is then priced as it was released; for one it does not, aider still
        downloads the same list itself (``~/.aider/caches/``). A profile that passes
        ``LITELLM_LOCAL_MODEL_COST_MAP`` in ``env`` keeps its own value."""
        identity = {"user.name": "orchardist agent", "user.email": "agent@orchardist.invalid"}
        env = {"GIT_CONFIG_COUNT": str(len(identity))}
        for n, (key, value) in enumerate(identity.items()):
            env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
        if LOCAL_PRICES not in self.profile.env:
            env[LOCAL_PRICES] = "True"
        return env

    def run(self, ctx: AgentContext) -> AgentResult:
        """Run aider; then remove the cache it left in the worktree, unless it was there before."""
        cache = ctx.worktree / TAGS_CACHE
        had_cache = cache.exists() or cache.is_symlink()
        try:
            return super().run(ctx)
        finally:
            if not had_cache and cache.is_dir() and not cache.is_symlink():
                shutil.rmtree(cache, ignore_errors=True)

    def prompt_on_stdin(self, ctx: AgentContext) -> bool:
        """Never: aider reads the prompt file itself."""
        return False

    def feed(self, seen: Seen, raw: bytes) -> None:
        """Every line is text: aider prints no JSON, and the model's JSON is just text."""
        self.text(seen, raw.decode("utf-8", errors="replace").rstrip("\r"))

    def text(self, seen: Seen, line: str) -> None:
        """Summary lines add usage; an error stays pending until a later call succeeds."""
        super().text(seen, line)
        if tokens := _TOKENS.search(line):
            sent, received = _count(*tokens.group(1, 2)), _count(*tokens.group(7, 8))
            seen.add_tokens(sent, received)
            seen.count_turn()
            seen.state["pending"], seen.state["wrapped"] = [], False
        if cost := _COST.search(line):
            seen.cost_usd = float(cost.group(2))  # the session total so far
        pending = seen.state.setdefault("pending", [])
        if _ERROR.match(line.strip()):
            pending.append(line.strip())
            seen.state["wrapped"] = True
        elif (
            pending and seen.state.get("wrapped") and line.strip() and not line.startswith("Retry")
        ):
            pending[-1] += " " + line.strip()  # aider wraps long messages at its console width
        else:
            seen.state["wrapped"] = False
        if _SKIPPED.match(line.strip()):  # an edit aider refused (an ignored file, say)
            seen.summary = "\n".join(filter(None, [seen.summary, f"aider: {line.strip()}"]))

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """An error aider never got past is a failure, whatever its exit code."""
        for message in seen.state.get("pending", []):
            seen.error(message)
        if (ctx.home / CHAT_HISTORY).is_file():
            seen.session_id = CHAT_HISTORY  # aider names no session: its chat history is one
        return super().result(proc, seen, ctx)

    def said(self, seen: Seen) -> str:
        """aider's error lines; its other output is mostly the model talking."""
        return "\n".join(seen.errors) if seen.errors else "\n".join(seen.text)

    def verdict(self, proc: ProcessResult, seen: Seen) -> tuple[Failure, str]:
        """Classified from the error lines, described by the last one."""
        failure, detail = super().verdict(proc, seen)
        if seen.errors:
            detail = f"aider failed: {seen.errors[-1]}"[:2000]
        return failure, detail


def _count(number: str, suffix: str) -> int:
    return int(float(number.replace(",", "")) * _SCALE[suffix.lower()])
