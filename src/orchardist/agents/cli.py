"""What every agent-CLI adapter shares: profile keys, the run, the event stream, the verdict.

An adapter (claude.py, codex.py, ...) says how to build its command line, what its output lines
mean, and which environment variables it needs. :class:`CliAgent` does the rest::

    argv ─ run_process (log, timeout, cancel) ─ each line ─ adapter.event / adapter.text ─ Seen
                                                                                           │
    AgentResult ◀─ timeout · cancelled · budget spent · ok · rate_limited · auth_error · agent_error

Errors are classified only from what the tool reports as errors (error events, stderr lines),
never from the model's messages.

A profile's ``max_cost_usd`` caps what one attempt may spend, and so does what is left of the
task's ``max_cost_usd`` when the attempt starts (``ctx.max_cost_usd``; the lower one holds). A
tool with a budget flag of its own gets it (``budget_flag``: Claude Code's ``--max-budget-usd``);
for the others orchardist watches the usage the tool reports while it runs (a cost, or tokens
priced with ``price_in``/``price_out``) and stops it once the cap is reached: the attempt fails
(``agent_error``, "budget spent") and keeps the usage seen. A tool that reports usage only when
it ends cannot be stopped this way (``unsupported``).
"""

from __future__ import annotations

import abc
import json
import shutil
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..confine.procs import CancelToken, ProcessRequest, ProcessResult, run_process
from ..confine.scrubbed import BASE_ENV
from ..state.agentrecords import AgentProfile, Failure
from ..state.usage import Usage
from ..terminal import plain
from .context import AgentContext, AgentResult
from .limits import classify, retry_after_s

COMMON_KEYS = frozenset(
    {"command", "model", "args", "max_turns", "max_cost_usd", "permission", "price_in", "price_out"}
)
MAX_ARG_BYTES = 100_000  # longer prompts go through stdin (one argv string is capped at 128 KiB)
SUMMARY_CHARS = 2000
BOTH_PRICES = "give both price_in and price_out (USD per million tokens)"
NEEDS_PRICES = "needs price_in and price_out: this tool reports tokens, not cost"
_TAIL_LINES = 40


@dataclass(frozen=True)
class Needs:
    """What an agent kind needs from the machine, for ``orchardist doctor``."""

    executable: str | None = None  # looked up on PATH; None: nothing to run
    version_args: tuple[str, ...] = ("--version",)
    key_vars: tuple[str, ...] = ()  # any one of them is enough
    login_files: tuple[str, ...] = ()  # or a credentials file a login left (~ and $VARS expand)
    login_hint: str = ""  # how to log in, for the report


@dataclass
class Seen:
    """What the tool's output has said so far; filled line by line while it runs."""

    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    session_id: str | None = None
    summary: str = ""
    errored: bool = False  # the tool itself reported that the run failed
    errors: list[str] = field(default_factory=list)  # its error messages
    failure: Failure | None = None  # a classification the tool made explicit (status codes)
    retry_after_s: float | None = None
    text: deque[str] = field(default_factory=lambda: deque(maxlen=_TAIL_LINES))  # non-JSON lines
    state: dict[str, Any] = field(default_factory=dict)  # an adapter's own bookkeeping

    def add_tokens(self, input_tokens: Any, output_tokens: Any) -> None:
        """Add one turn's token counts (ignoring what is not a number)."""
        if _is_number(input_tokens):
            self.input_tokens = (self.input_tokens or 0) + int(input_tokens)
        if _is_number(output_tokens):
            self.output_tokens = (self.output_tokens or 0) + int(output_tokens)

    def add_cost(self, cost_usd: Any) -> None:
        """Add a reported cost."""
        if _is_number(cost_usd):
            self.cost_usd = (self.cost_usd or 0.0) + float(cost_usd)

    def count_turn(self) -> None:
        """One more model turn."""
        self.turns = (self.turns or 0) + 1

    def error(self, message: Any, status: Any = None, fatal: bool = True) -> None:
        """The tool reported an error (``fatal``: the run failed); a status classifies it."""
        self.errored = self.errored or fatal
        if message:
            self.errors.append(str(message)[:SUMMARY_CHARS])
        if _is_number(status):
            self.failure = self.failure or classify("", int(status))

    def usage(self, price_in: float | None, price_out: float | None) -> Usage:
        """The usage seen; priced from the profile when the tool reported no cost."""
        cost = self.cost_usd
        counted = self.input_tokens is not None or self.output_tokens is not None
        if cost is None and counted and price_in is not None and price_out is not None:
            tokens_in, tokens_out = self.input_tokens or 0, self.output_tokens or 0
            cost = (tokens_in * price_in + tokens_out * price_out) / 1e6
        return Usage(cost, self.input_tokens, self.output_tokens, self.turns, self.session_id)


class CliAgent(abc.ABC):
    """Base of the agent-CLI adapters; subclasses fill in the class variables and hooks."""

    kind: ClassVar[str]
    executable: ClassVar[str]  # the default ``command``
    profile_keys: ClassVar[frozenset[str]] = COMMON_KEYS
    # which program gets the tool's credentials and home files, with which flags and mode
    widening_keys: ClassVar[frozenset[str]] = frozenset({"command", "args", "permission"})
    env_keys: ClassVar[tuple[str, ...]] = ()
    home_files: ClassVar[tuple[str, ...]] = ()  # copied from the real home into the private one
    home_state: ClassVar[tuple[str, ...]] = ()  # folders made in the private home for its state
    home_cache: ClassVar[tuple[str, ...]] = ()  # downloads kept per profile (confine/caches.py)
    session_files: ClassVar[tuple[str, ...]] = ()  # its sessions, kept for the next attempt
    key_vars: ClassVar[tuple[str, ...]] = ()  # the credentials among env_keys (any one will do)
    login_files: ClassVar[tuple[str, ...]] = ()
    login_hint: ClassVar[str] = ""
    default_permission: ClassVar[Any] = None
    budget_flag: ClassVar[bool] = False  # the tool stops itself at max_cost_usd
    reports_cost: ClassVar[bool] = True  # False: max_cost_usd needs price_in and price_out
    unsupported: ClassVar[Mapping[str, str]] = {}  # common key → why this tool cannot honour it

    def __init__(self, profile: AgentProfile) -> None:
        self.profile = profile
        self.options: Mapping[str, Any] = profile.options
        self.command = str(self.options.get("command", self.executable))
        self.model: str | None = self.options.get("model")
        self.args: list[str] = list(self.options.get("args", []))
        self.max_turns: int | None = self.options.get("max_turns")
        self.permission: Any = self.options.get("permission", self.default_permission)
        self.price_in: float | None = self.options.get("price_in")
        self.price_out: float | None = self.options.get("price_out")
        self.max_cost_usd: float | None = self.options.get("max_cost_usd")

    # -- profile checks --------------------------------------------------------------------

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Type-check the common keys, then the adapter's own."""
        problems = [(why, key) for key, why in cls.unsupported.items() if key in options]
        checks = {
            "command": _nonempty_str,
            "model": _nonempty_str,
            "args": str_list_problem,
            "max_turns": _positive_int,
            "max_cost_usd": _positive,
            "price_in": _non_negative,
            "price_out": _non_negative,
        }
        for key, check in checks.items():
            if key in options and key not in cls.unsupported:
                problem = check(options[key])
                if problem:
                    problems.append((problem, key))
        if "permission" in options and "permission" not in cls.unsupported:
            problems += [(p, "permission") for p in cls.check_permission(options["permission"])]
        if ("price_in" in options) != ("price_out" in options):
            problems.append((BOTH_PRICES, "price_in"))
        budget = "max_cost_usd" in options and "max_cost_usd" not in cls.unsupported
        if budget and not cls.reports_cost and "price_in" not in options:
            problems.append((NEEDS_PRICES, "max_cost_usd"))
        return problems + cls.check_extra(options)

    @classmethod
    def check_permission(cls, value: Any) -> list[str]:
        """Problems with a ``permission`` value."""
        return []

    @classmethod
    def check_extra(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Problems with the adapter's own keys."""
        return []

    @classmethod
    def check_confined(cls, options: Mapping[str, Any], repo: Path) -> list[tuple[str, str]]:
        """Problems of a profile that only show when orchardist confines the tool (a sandbox of
        the tool's own that cannot start inside orchardist's), as ``(message, key)``; an empty
        key: the profile as a whole (a settings file of the tool's turns it on)."""
        return []

    @classmethod
    def needs(cls, options: Mapping[str, Any]) -> Needs:
        """What ``orchardist doctor`` should look for."""
        return Needs(
            executable=str(options.get("command", cls.executable)),
            key_vars=cls.key_vars,
            login_files=cls.login_files,
            login_hint=cls.login_hint,
        )

    # -- hooks -----------------------------------------------------------------------------

    @abc.abstractmethod
    def argv(self, ctx: AgentContext, prompt: str | None) -> list[str]:
        """The command line; ``prompt`` is None when it goes through stdin instead."""

    def prompt_on_stdin(self, ctx: AgentContext) -> bool:
        """Whether the prompt file is fed on stdin (default: only when too long for argv)."""
        return len(ctx.prompt.encode("utf-8")) > MAX_ARG_BYTES

    def extra_env(self, ctx: AgentContext) -> dict[str, str]:
        """Variables the adapter sets for the tool."""
        return {}

    def event(self, seen: Seen, event: dict[str, Any]) -> None:  # noqa: B027 (a no-op hook)
        """Take in one JSON event of the tool's stream."""

    def budget_usd(self, ctx: AgentContext) -> float | None:
        """What this attempt may spend: the profile's cap or the task's budget left, the lower."""
        caps = [c for c in (self.max_cost_usd, ctx.max_cost_usd) if c is not None]
        return min(caps) if caps else None

    def spent_usd(self, seen: Seen, ctx: AgentContext) -> float | None:
        """What the run has cost so far, by what the tool reported (for ``max_cost_usd``)."""
        return seen.usage(self.price_in, self.price_out).cost_usd

    def text(self, seen: Seen, line: str) -> None:
        """Take in one line that is not JSON (stderr, banners); kept for classification."""
        if line.strip():
            seen.text.append(line)

    def said(self, seen: Seen) -> str:
        """The error text to classify: error messages, then the other non-JSON lines."""
        return "\n".join([*seen.errors, *seen.text])

    def verdict(self, proc: ProcessResult, seen: Seen) -> tuple[Failure, str]:
        """Failure class and detail of a run that did not succeed."""
        failure = seen.failure or classify(self.said(seen)) or Failure.AGENT_ERROR
        first = seen.errors[0] if seen.errors else (seen.text[-1] if seen.text else "")
        detail = f"{self.kind} failed (exit {proc.exit_code})" + (f": {first}" if first else "")
        return failure, detail[:SUMMARY_CHARS]

    # -- the run ---------------------------------------------------------------------------

    def run(self, ctx: AgentContext) -> AgentResult:
        """Run the tool in ``ctx.cwd``, reading its stream as it comes."""
        env = self.child_env(ctx)
        if shutil.which(self.command, path=env.get("PATH")) is None:
            detail = (
                f"{self.command!r} not found on PATH; install {self.kind} or set the profile's"
                " command (orchardist doctor PLAN checks this)"
            )
            return AgentResult(127, 0.0, Failure.AGENT_ERROR, detail)
        on_stdin = self.prompt_on_stdin(ctx)
        seen = Seen()
        stop = CancelToken()  # the budget's: orchardist stops the tool itself
        # a tool that stops itself, or reports usage only as it ends, is not stopped here
        watch = not self.budget_flag and "max_cost_usd" not in self.unsupported
        budget = self.budget_usd(ctx) if watch else None

        def on_line(raw: bytes) -> None:
            self.feed(seen, raw)
            if budget is not None and not stop.cancelled:
                spent = self.spent_usd(seen, ctx)
                if spent is not None and spent >= budget:
                    seen.state["budget"] = (
                        f"{self.kind} stopped by orchardist: budget spent (${spent:.4f} of"
                        f" max_cost_usd={budget:g})"
                    )
                    stop.cancel("budget")

        try:
            proc = run_process(
                ProcessRequest(
                    argv=self.argv(ctx, None if on_stdin else ctx.prompt),
                    cwd=ctx.cwd,
                    env=env,
                    log=ctx.log,
                    timeout_s=ctx.timeout_s,
                    cancel=ctx.cancel,
                    stop=stop,
                    stdin_file=ctx.prompt_file if on_stdin else None,
                    on_line=on_line,
                    marker=ctx.marker,
                    writable=ctx.writable,
                    confine=ctx.confine,
                )
            )
        finally:
            stop.close()
        return self.result(proc, seen, ctx)

    def child_env(self, ctx: AgentContext) -> dict[str, str]:
        """ctx.env narrowed to what this tool may see, plus the adapter's own variables."""
        env = narrow_env(ctx.env, (*self.env_keys, *self.profile.env))
        return {**env, **self.extra_env(ctx)}

    def feed(self, seen: Seen, raw: bytes) -> None:
        """One output line: a JSON event, or text."""
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        event = json_event(line)
        if event is not None:
            self._take(seen, event)
            return
        self.text(seen, line)

    def _take(self, seen: Seen, event: dict[str, Any]) -> None:
        """One event through the adapter; one it cannot read (NaN turns, a cost of 400 digits,
        a reset time past the calendar) fails the attempt as the agent's error, not
        orchardist's (an exception here used to end it as infra_error, retried uncounted)."""
        try:
            self.event(seen, event)
        except (ArithmeticError, ValueError, TypeError, LookupError, AttributeError) as exc:
            if seen.failure is not Failure.AGENT_ERROR:
                said = plain(f"{type(exc).__name__}: {exc}")[:200]
                seen.errors.insert(0, f"output orchardist cannot read ({said})")
            seen.errored, seen.failure = True, Failure.AGENT_ERROR

    def result(self, proc: ProcessResult, seen: Seen, ctx: AgentContext) -> AgentResult:
        """Map the finished process and what it said to an AgentResult."""
        usage = seen.usage(self.price_in, self.price_out)
        if proc.timed_out:
            detail = f"{self.kind} timed out after {ctx.timeout_s:g}s"
            return AgentResult(proc.exit_code, proc.duration_s, Failure.TIMEOUT, detail, usage)
        if proc.cancelled and "budget" in seen.state and not ctx.cancel.cancelled:
            detail = seen.state["budget"]
            with ctx.log.open("a", encoding="utf-8") as log:  # the tool's own output says nothing
                log.write(f"orchardist: {detail}\n")
            return AgentResult(
                proc.exit_code or 1, proc.duration_s, Failure.AGENT_ERROR, detail, usage
            )
        if proc.cancelled:
            reason = ctx.cancel.reason or "cancelled"
            return AgentResult(proc.exit_code, proc.duration_s, None, reason, usage, True)
        if proc.exit_code == 0 and not seen.errored:
            return AgentResult(0, proc.duration_s, None, plain(seen.summary)[:SUMMARY_CHARS], usage)
        failure, detail = self.verdict(proc, seen)
        detail = plain(detail)
        retry = None
        if failure is Failure.RATE_LIMITED:
            retry = seen.retry_after_s
            if retry is None:
                retry = retry_after_s(self.said(seen))
        exit_code = proc.exit_code or 1  # the tool said it failed, even if it exited 0
        return AgentResult(exit_code, proc.duration_s, failure, detail, usage, retry_after_s=retry)


# -- option checks ---------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _nonempty_str(value: Any) -> str | None:
    return None if isinstance(value, str) and value.strip() else "expected a non-empty string"


def str_list_problem(value: Any) -> str | None:
    """A problem unless ``value`` is a list of strings."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return None
    return "expected a list of strings"


def _positive_int(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    return "expected a whole number ≥ 1"


def _positive(value: Any) -> str | None:
    return None if _is_number(value) and value > 0 else "expected a positive number of US dollars"


def _non_negative(value: Any) -> str | None:
    return None if _is_number(value) and value >= 0 else "expected a number ≥ 0"


def check_choice(value: Any, choices: tuple[str, ...]) -> list[str]:
    """A problem unless ``value`` is one of ``choices``."""
    if isinstance(value, str) and value in choices:
        return []
    return [f"expected one of {', '.join(choices)}"]


def narrow_env(env: Mapping[str, str], allow: Iterable[str]) -> dict[str, str]:
    """``env`` keeping only the base variables, ``allow`` and orchardist's own ORCHARDIST_*."""
    allowed = {*BASE_ENV, *allow}
    return {k: v for k, v in env.items() if k in allowed or k.startswith("ORCHARDIST_")}


def home_path(template: str, env: Mapping[str, str]) -> Path:
    """Expand ``~`` and ``$VARS`` of a login-file template against ``env``."""
    text = template
    for name, value in sorted(env.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f"${name}", value)
    if text.startswith("~"):
        text = env.get("HOME", "~") + text[1:]
    return Path(text)


def json_event(line: str) -> dict[str, Any] | None:
    """A line of a CLI's JSON stream as its event, or None for a line that is not one (text,
    a JSON value that is no object, JSON cut short)."""
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
