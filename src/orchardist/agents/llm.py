"""``kind = "llm"``: any OpenAI-compatible chat-completions endpoint, working through a shell.

For an API key or a local server (OpenAI, OpenRouter, vLLM, Ollama, LM Studio) and no agent
CLI. Each turn the model answers with one command in a fenced block; orchardist runs it in the
worktree (``run_process``: timeout, the attempt's marker, the scrubbed environment) and sends
back its exit code and output, shortened to head and tail. The loop ends when the model answers
``ORCHARDIST_DONE`` on a line of its own, or at ``max_turns`` / ``max_cost_usd``::

    messages ─ POST /chat/completions ─ reply ─┬─ ORCHARDIST_DONE → done
        ▲        (429/5xx: wait, retry)        └─ ```bash cmd``` → run_process → observation ─┐
        └──────────────────────────────────────────────────────────────────────────────────┘

The API key is read by orchardist from ``api_key_env`` and never reaches the commands. Tokens
come from each response's ``usage``; cost from the profile's prices (USD per million tokens).
The transcript is saved next to the attempt log as ``*.transcript.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ..confine.procs import ProcessRequest, run_process
from ..safeio import read_capped, write_whole
from ..specs import parse_duration
from ..state.agentrecords import AgentProfile, Failure
from ..state.usage import Usage
from .cli import BOTH_PRICES, Needs, narrow_env
from .context import AgentContext, AgentResult
from .limits import classify

DONE = "ORCHARDIST_DONE"
DEFAULT_MAX_TURNS = 40
DEFAULT_COMMAND_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 300.0
MAX_RETRIES = 5
MAX_INLINE_WAIT_S = 60.0  # a longer Retry-After ends the attempt as rate limited instead
OUTPUT_CHARS = 10_000
HISTORY = ".orchardist-llm/messages.json"  # in the attempt's HOME: the conversation so far
MAX_HISTORY_BYTES = 16 << 20
_DONE_LINE = re.compile(rf"^\s*{DONE}\s*$", re.MULTILINE)
_BLOCK = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SYSTEM_PROMPT = """\
You are a software engineer completing a task in a git working tree, using only shell commands.

Answer every turn with a short thought, then exactly one command in a fenced block:

```bash
the command
```

The command runs with {shell} in {cwd}, in a fresh shell each time (cd and variables do not
persist), with a {timeout:g}s timeout and no terminal: do not start editors, pagers or other
interactive programs. Edit files with shell tools (cat <<'EOF' > file, sed, python). You get
back the exit code and the output; long output is shortened in the middle.

When the task is done and you have checked it, answer with {done} on a line of its own and no
command."""

FORMAT_ERROR = (
    "Your answer had {n} command blocks. Answer with exactly one command in a ```bash block, or"
    f" with {DONE} alone once the task is done."
)


class LlmAgent:
    """A small command loop over an OpenAI-compatible chat-completions API."""

    kind: ClassVar[str] = "llm"
    profile_keys: ClassVar[frozenset[str]] = frozenset(
        {
            "base_url",
            "api_key_env",
            "model",
            "max_turns",
            "max_cost_usd",
            "price_in",
            "price_out",
            "command_timeout",
            "temperature",
        }
    )
    # which of the caller's variables orchardist sends to base_url as the API key
    widening_keys: ClassVar[frozenset[str]] = frozenset({"api_key_env"})
    env_keys: ClassVar[tuple[str, ...]] = ()  # the key stays with orchardist
    home_files: ClassVar[tuple[str, ...]] = ()  # it runs in orchardist, not in a tool
    home_state: ClassVar[tuple[str, ...]] = ()
    home_cache: ClassVar[tuple[str, ...]] = ()
    session_files: ClassVar[tuple[str, ...]] = (HISTORY,)  # its messages, for the next attempt

    def __init__(
        self,
        profile: AgentProfile,
        *,
        sleep: Callable[[float], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = profile
        opts = profile.options
        self.url = str(opts["base_url"]).rstrip("/") + "/chat/completions"
        self.model = str(opts["model"])
        self.api_key_env: str | None = opts.get("api_key_env")
        self.max_turns = int(opts.get("max_turns", DEFAULT_MAX_TURNS))
        self.max_cost_usd: float | None = opts.get("max_cost_usd")
        self.price_in: float | None = opts.get("price_in")
        self.price_out: float | None = opts.get("price_out")
        self.temperature: float | None = opts.get("temperature")
        timeout = opts.get("command_timeout")
        self.command_timeout_s = (
            parse_duration(timeout) if timeout is not None else DEFAULT_COMMAND_TIMEOUT_S
        )
        self.sleep = sleep  # tests inject one; by default waits wake on cancellation
        self.environ = os.environ if environ is None else environ
        self.shell = shutil.which("bash") or "/bin/sh"

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Required ``base_url`` and ``model``; numbers, names and durations well-formed."""
        problems: list[tuple[str, str]] = []
        url = options.get("base_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            problems.append(
                ("required: the API's base URL, e.g. https://api.openai.com/v1", "base_url")
            )
        if not isinstance(options.get("model"), str) or not options["model"].strip():
            problems.append(("required: the model name the API expects", "model"))
        key = options.get("api_key_env")
        if key is not None and not (isinstance(key, str) and _ENV_NAME.match(key)):
            problems.append(("expected the name of an environment variable", "api_key_env"))
        turns = options.get("max_turns", 1)
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            problems.append(("expected a whole number ≥ 1", "max_turns"))
        for name in ("max_cost_usd", "price_in", "price_out", "temperature"):
            value = options.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                problems.append(("expected a number ≥ 0", name))
        if ("price_in" in options) != ("price_out" in options):
            problems.append((BOTH_PRICES, "price_in"))
        if "max_cost_usd" in options and "price_in" not in options:
            problems.append(("needs price_in and price_out to count the cost", "max_cost_usd"))
        if "command_timeout" in options:
            try:
                parse_duration(options["command_timeout"])
            except ValueError as exc:
                problems.append((str(exc), "command_timeout"))
        return problems

    @classmethod
    def needs(cls, options: Mapping[str, Any]) -> Needs:
        """No executable; the key variable, if the profile names one."""
        key = options.get("api_key_env")
        return Needs(key_vars=(str(key),) if key else ())

    def run(self, ctx: AgentContext) -> AgentResult:
        """Talk to the model and run its commands until it is done or a limit is hit."""
        key = self.environ.get(self.api_key_env) if self.api_key_env else None
        if self.api_key_env and not key:
            detail = f"environment variable {self.api_key_env} (api_key_env) is not set"
            return AgentResult(1, 0.0, Failure.AUTH_ERROR, detail)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(headers=headers, timeout=REQUEST_TIMEOUT_S) as client:
            loop = _Loop(self, ctx, client)
            try:
                return loop.run()
            finally:
                loop.save()


class _Loop:
    """One attempt's conversation: messages, usage, deadline."""

    def __init__(self, agent: LlmAgent, ctx: AgentContext, client: httpx.Client) -> None:
        self.agent, self.ctx, self.client = agent, ctx, client
        self.start = time.monotonic()
        self.deadline = None if ctx.timeout_s is None else self.start + ctx.timeout_s
        system = SYSTEM_PROMPT.format(
            shell=agent.shell, cwd=ctx.cwd, timeout=agent.command_timeout_s, done=DONE
        )
        earlier = _history(ctx.home / HISTORY) if ctx.resume else []
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": system},  # this attempt's (its cwd)
            *earlier[1:],
            {"role": "user", "content": ctx.prompt},
        ]
        self.resumed = bool(earlier) or not ctx.resume  # False: no history to continue
        self.usage = Usage(turns=0)
        self.reported_cost: float | None = None
        self.stop = ""
        self.transcript = ctx.log.with_suffix(".transcript.json")

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> AgentResult:
        if not self.resumed:  # the executor starts afresh (agents/sessions.py)
            return self.end(Failure.AGENT_ERROR, f"no message history to continue at ~/{HISTORY}")
        for _ in range(self.agent.max_turns):
            reply = self.complete()
            if isinstance(reply, AgentResult):
                return reply
            self.log(f"\n[orchardist llm] turn {self.usage.turns}\n{reply}\n")
            if _DONE_LINE.search(reply):
                return self.end(None, _DONE_LINE.sub("", reply).strip())
            if over := self.over_budget():
                return self.end(Failure.AGENT_ERROR, over)
            blocks = _BLOCK.findall(reply)
            if len(blocks) == 1:
                observation = self.execute(blocks[0].strip())
            else:
                observation = FORMAT_ERROR.format(n=len(blocks))
            if stopped := self.stopped():
                return stopped
            self.messages.append({"role": "user", "content": observation})
            self.save()
        return self.end(Failure.AGENT_ERROR, f"no {DONE} after max_turns={self.agent.max_turns}")

    def complete(self) -> str | AgentResult:
        """One chat completion; 429 and 5xx are retried with backoff, honouring Retry-After."""
        body: dict[str, Any] = {"model": self.agent.model, "messages": self.messages}
        if self.agent.temperature is not None:
            body["temperature"] = self.agent.temperature
        for attempt in range(MAX_RETRIES + 1):
            if stopped := self.stopped():
                return stopped
            status, wait = None, None
            try:
                response = self.interruptible(lambda: self.client.post(self.agent.url, json=body))
            except httpx.HTTPError as exc:
                problem = f"cannot reach {self.agent.url}: {exc}"
            else:
                if response is None:
                    return self.stopped() or self.end(None, "cancelled", cancelled=True)
                if response.status_code == 200:
                    return self.take(response)
                status, wait = response.status_code, _retry_after(response.headers)
                problem = f"HTTP {status} from {self.agent.url}: {response.text[:500]}"
                if status != 429 and status < 500:
                    return self.end(classify(problem, status) or Failure.AGENT_ERROR, problem)
            if attempt == MAX_RETRIES or (wait is not None and wait > MAX_INLINE_WAIT_S):
                failure = classify(problem, status) or Failure.AGENT_ERROR
                retry = wait if failure is Failure.RATE_LIMITED else None
                return self.end(failure, problem, retry_after_s=retry)
            delay = wait if wait is not None else min(2.0**attempt, 30.0)
            self.log(f"[orchardist llm] {problem.splitlines()[0][:200]}; retrying in {delay:g}s\n")
            self.wait(delay)
        raise AssertionError("unreachable")

    def take(self, response: httpx.Response) -> str | AgentResult:
        """The reply's text; usage counted."""
        try:
            data = response.json()
            text = data["choices"][0]["message"].get("content") or ""
            usage = data.get("usage") or {}
            tokens_in = int(usage.get("prompt_tokens") or 0)
            tokens_out = int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return self.end(Failure.AGENT_ERROR, f"malformed response: {response.text[:300]}")
        if isinstance(usage.get("cost"), int | float):
            self.reported_cost = (self.reported_cost or 0.0) + float(usage["cost"])
        self.usage = Usage(
            turns=(self.usage.turns or 0) + 1,
            input_tokens=(self.usage.input_tokens or 0) + tokens_in,
            output_tokens=(self.usage.output_tokens or 0) + tokens_out,
            session_id=self.usage.session_id or data.get("id"),
        )
        self.messages.append({"role": "assistant", "content": str(text)})
        return str(text)

    def execute(self, command: str) -> str:
        """Run one command in the worktree; its exit code and shortened output."""
        self.log(f"[orchardist llm] $ {command}\n")
        output = _Output(OUTPUT_CHARS)
        timeout = self.agent.command_timeout_s
        if self.deadline is not None:
            timeout = max(0.01, min(timeout, self.deadline - time.monotonic()))
        proc = run_process(
            ProcessRequest(
                argv=[self.agent.shell, "-c", command],
                cwd=self.ctx.cwd,
                env=self.env(),
                log=self.ctx.log,
                timeout_s=timeout,
                cancel=self.ctx.cancel,
                on_line=output.add,
                marker=self.ctx.marker,
                writable=self.ctx.writable,
                confine=self.ctx.confine,
            )
        )
        note = f" (killed: timed out after {timeout:g}s)" if proc.timed_out else ""
        return f"exit code: {proc.exit_code}{note}\n<output>\n{output.text()}</output>"

    # -- limits and endings ----------------------------------------------------------------

    def cost(self) -> float | None:
        agent, usage = self.agent, self.usage
        if agent.price_in is not None and agent.price_out is not None:
            tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
            return (tokens_in * agent.price_in + tokens_out * agent.price_out) / 1e6
        return self.reported_cost

    def over_budget(self) -> str:
        caps = [c for c in (self.agent.max_cost_usd, self.ctx.max_cost_usd) if c is not None]
        cost, limit = self.cost(), min(caps) if caps else None
        if cost is not None and limit is not None and cost >= limit:
            return f"spent ${cost:.4f}, reaching max_cost_usd={limit:g}"
        return ""

    def stopped(self) -> AgentResult | None:
        """A result if the attempt was cancelled or ran out of time."""
        if self.ctx.cancel.cancelled:
            return self.end(None, self.ctx.cancel.reason or "cancelled", cancelled=True)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            timeout = self.ctx.timeout_s or 0.0
            return self.end(Failure.TIMEOUT, f"llm agent timed out after {timeout:g}s")
        return None

    def end(
        self,
        failure: Failure | None,
        detail: str,
        *,
        cancelled: bool = False,
        retry_after_s: float | None = None,
    ) -> AgentResult:
        self.stop = f"{failure or ('cancelled' if cancelled else 'done')}: {detail}"
        usage = Usage(
            self.cost(),
            self.usage.input_tokens,
            self.usage.output_tokens,
            self.usage.turns,
            self.usage.session_id,
        )
        self.usage = usage
        code = 0 if failure is None and not cancelled else 1
        duration = time.monotonic() - self.start
        return AgentResult(code, duration, failure, detail[:2000], usage, cancelled, retry_after_s)

    # -- plumbing --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The commands' environment: ctx.env narrowed to the base and the profile's list."""
        return narrow_env(self.ctx.env, self.agent.profile.env)

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def wait(self, seconds: float) -> None:
        """Sleep, but wake on cancellation and never past the deadline."""
        left = self.remaining()
        seconds = seconds if left is None else min(seconds, left)
        if self.agent.sleep is not None:
            self.agent.sleep(seconds)
            return
        with selectors.DefaultSelector() as sel:
            sel.register(self.ctx.cancel.fileno(), selectors.EVENT_READ)
            sel.select(seconds)

    def interruptible(self, call: Callable[[], httpx.Response]) -> httpx.Response | None:
        """Run a blocking request on a thread; None if cancelled or out of time first.

        An abandoned request finishes on its own within the client's timeout.
        """
        outcome: list[httpx.Response | BaseException] = []
        read, write = os.pipe()

        def target() -> None:
            try:
                outcome.append(call())
            except BaseException as exc:
                outcome.append(exc)
            finally:
                with contextlib.suppress(OSError):
                    os.write(write, b"x")
                os.close(write)

        threading.Thread(target=target, name="llm-request", daemon=True).start()
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(read, selectors.EVENT_READ)
                sel.register(self.ctx.cancel.fileno(), selectors.EVENT_READ)
                sel.select(self.remaining())
        finally:
            os.close(read)
        if not outcome:
            return None
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def log(self, text: str) -> None:
        with self.ctx.log.open("a", encoding="utf-8") as fh:
            fh.write(text)

    def save(self) -> None:
        """Write the transcript (atomically) next to the log."""
        doc = {
            "model": self.agent.model,
            "url": self.agent.url,
            "turns": self.usage.turns,
            "usage": {
                "cost_usd": self.cost(),
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
            "stop": self.stop,
            "messages": self.messages,
        }
        tmp = self.transcript.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        os.replace(tmp, self.transcript)
        if self.resumed and self.usage.turns:  # kept for the task's next attempt
            history = self.ctx.home / HISTORY
            with contextlib.suppress(OSError):
                history.parent.mkdir(parents=True, exist_ok=True)
                write_whole(history, json.dumps(self.messages).encode())


class _Output:
    """A command's output for the model: the head and the tail, the middle counted."""

    def __init__(self, limit: int) -> None:
        self.head: list[str] = []
        self.head_left = limit // 2
        self.tail: deque[str] = deque()
        self.tail_size = 0
        self.tail_max = limit - limit // 2
        self.omitted = 0

    def add(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace") + "\n"
        if self.head_left > 0:
            taken = line[: self.head_left]
            self.head.append(taken)
            self.head_left -= len(taken)
            line = line[len(taken) :]
        if line:
            self.tail.append(line)
            self.tail_size += len(line)
            while self.tail_size > self.tail_max:
                dropped = self.tail.popleft()
                self.tail_size -= len(dropped)
                self.omitted += len(dropped)

    def text(self) -> str:
        gap = f"[... {self.omitted} characters omitted ...]\n" if self.omitted else ""
        return "".join(self.head) + gap + "".join(self.tail)


def _retry_after(headers: httpx.Headers) -> float | None:
    """Retry-After as seconds (it may be a number or an HTTP date)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _history(path: Path) -> list[dict[str, str]]:
    """The messages an earlier attempt kept (its system message first); [] if unreadable."""
    try:
        data = json.loads(read_capped(path, MAX_HISTORY_BYTES) or b"")
    except ValueError:
        return []
    if not isinstance(data, list) or not data:
        return []
    roles = ("system", "user", "assistant")
    ok = all(
        isinstance(m, dict) and m.get("role") in roles and isinstance(m.get("content"), str)
        for m in data
    )
    return [{"role": m["role"], "content": m["content"]} for m in data] if ok else []
