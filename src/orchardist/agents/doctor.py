"""``orchardist doctor PLAN``: can each agent profile of a plan run on this machine?

For every profile: is its CLI on PATH, and what does ``--version`` say (run with a short
timeout); are its credentials there (one of its key variables set, or the file a login leaves);
are the variables the profile lists in ``env`` set. Values are never printed, only names.

With ``--probe`` it also makes one tiny real request per profile: the profile's agent runs once,
as an attempt runs it (the same command line, variables, private home and isolation: under
bubblewrap with the same binds, its tree shown at the repository's path, in an empty repository
of its own), on a prompt asking for a one-word answer, and the outcome is classified like an
attempt's (``ok``, ``auth_error``, ``rate_limited``, ...); the report shows the command line it
ran. It costs one small model call each. A profile whose command (or a file it names) attempts
could not see in their isolation is reported missing without a probe (see confine/exes.py).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..confine.attemptpaths import AttemptPaths
from ..confine.homes import fill_home, tool_homes
from ..confine.procs import CancelToken, new_marker
from ..confine.scrubbed import scrubbed_env
from ..confine.spec import Spec, wrap, writable_of
from ..specs import Plan
from ..state.agentrecords import AgentProfile
from . import agent_class, command_words, make_agent
from .cli import Needs, home_path
from .context import AgentContext

VERSION_TIMEOUT_S = 15.0
PROBE_TIMEOUT_S = 120.0
PROBE_PROMPT = (
    "This is a connectivity check by orchardist doctor. Use no tool, run nothing and change no"
    " file: reply at once with one short line (ending with the word your instructions give for"
    " finishing, if they give one)."
)
NOT_PROBED = ("shell", "scripted")  # kinds that call no model


class Sight(Protocol):
    """How attempts are confined on this machine (confine.confinement.Confinement)."""

    def private_env(self, paths: AttemptPaths) -> dict[str, str]:
        """The variables pointing an attempt's tools at its own folders."""
        ...

    def refusals(self, words: tuple[str, ...]) -> list[str]:
        """Why a command line cannot run confined."""
        ...

    def spec(
        self,
        paths: AttemptPaths,
        network: bool,
        hidden: tuple[Path, ...] = (),
        words: tuple[str, ...] = (),
        user_git: bool = True,
    ) -> Spec | None:
        """How a process of the attempt at ``paths`` is confined."""
        ...


@dataclass(frozen=True)
class ProfileReport:
    """What doctor found for one agent profile."""

    name: str
    kind: str
    command: str | None = None  # the executable looked for, if the kind runs one
    path: str | None = None  # where it was found on PATH
    version: str | None = None  # first line of its --version output
    keys: dict[str, bool] = field(default_factory=dict)  # credential variable → set?
    login: str | None = None  # the login file found, when no key variable is set
    env: dict[str, bool] = field(default_factory=dict)  # the profile's env entries → set?
    missing: tuple[str, ...] = ()  # what stops this profile from running
    notes: tuple[str, ...] = ()  # worth knowing, not fatal
    probe: str | None = None  # with --probe: "ok" or the failure class of the tiny request
    probe_detail: str = ""  # what the agent said when the probe failed
    probe_argv: tuple[str, ...] = ()  # the command line the probe ran, confinement included

    @property
    def ok(self) -> bool:
        """Nothing missing."""
        return not self.missing


def check_plan(
    plan: Plan,
    environ: Mapping[str, str] | None = None,
    probe: bool = False,
    sight: Sight | None = None,
) -> list[ProfileReport]:
    """A report for every agent profile of the plan, in plan order, and for the config files'
    profiles it uses (not the others: they may be for other work); ``probe``: with a request;
    ``sight``: the attempts' confinement, which the checks and the probe use."""
    used = plan.used_agents()
    profiles = [
        profile
        for name, profile in plan.agents.items()
        if name not in plan.config_agents or name in used
    ]
    reports = [_unseen(check_profile(profile, environ), profile, sight) for profile in profiles]
    if probe:
        reports = [
            probe_profile(profile, report, environ, sight=sight)
            for profile, report in zip(profiles, reports, strict=True)
        ]
    return reports


def _unseen(report: ProfileReport, profile: AgentProfile, sight: Sight | None) -> ProfileReport:
    """``report`` with what attempts could not see of the profile's command line."""
    refused = [] if sight is None else sight.refusals(command_words(profile))
    return replace(report, missing=(*report.missing, *refused)) if refused else report


def probe_profile(
    profile: AgentProfile,
    report: ProfileReport,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
    sight: Sight | None = None,
) -> ProfileReport:
    """``report`` with the outcome of one tiny real request through the profile's agent,
    confined as ``sight`` confines attempts.

    Skipped when the profile cannot run anyway (its CLI is missing or cannot be seen) or
    calls no model.
    """
    if profile.kind in NOT_PROBED:
        return replace(report, notes=(*report.notes, "calls no model; not probed"))
    if report.command is not None and report.path is None:
        return report
    if sight is not None and sight.refusals(command_words(profile)):
        return report  # an attempt could not start it either: said in missing
    environ = os.environ if environ is None else environ
    cls: Any = agent_class(profile.kind)
    with tempfile.TemporaryDirectory(prefix="orchardist-probe-") as tmp:
        paths = AttemptPaths.under(Path(tmp))
        for folder in paths.writable:
            folder.mkdir(parents=True)
        subprocess.run(
            ["git", "init", "-q", str(paths.tree)], check=True, env=scrubbed_env((), environ)
        )
        real_home = Path(environ.get("HOME") or Path.home())
        fill_home(paths, real_home, cls.home_files, cls.home_state)
        spec = None
        if sight is not None:
            spec = sight.spec(paths, network=True, words=command_words(profile), user_git=False)
        ctx = _probe_context(profile, cls, paths, environ, timeout_s, spec, sight)
        ctx.prompt_file.write_text(PROBE_PROMPT, encoding="utf-8")
        agent = make_agent(_one_turn(profile, cls))
        ran = tuple(_ran(agent, ctx))
        result = agent.run(ctx)
    if result.failure is None and not result.cancelled:
        return replace(report, probe="ok", probe_argv=ran)
    outcome = result.failure.value if result.failure is not None else "cancelled"
    detail = result.detail or f"exit {result.exit_code}"
    problem = f"probe: {outcome}: {detail.splitlines()[0] if detail else ''}"[:300]
    missing = (*report.missing, problem)
    return replace(report, probe=outcome, probe_detail=detail, probe_argv=ran, missing=missing)


def _ran(agent: Any, ctx: AgentContext) -> list[str]:
    """The command line the agent runs for ``ctx``, wrapped in its confinement as
    procs.run_process wraps it (an agent that builds none: [])."""
    if not hasattr(agent, "argv"):
        return []
    on_stdin = agent.prompt_on_stdin(ctx)
    argv: list[str] = agent.argv(ctx, None if on_stdin else ctx.prompt)
    return argv if ctx.confine is None else wrap(argv, ctx.confine, cwd=ctx.cwd)


def _one_turn(profile: AgentProfile, cls: Any) -> AgentProfile:
    """The profile limited to one model turn, where its kind has a turn limit."""
    keys: frozenset[str] = getattr(cls, "profile_keys", frozenset())
    if "max_turns" not in keys or "max_turns" in getattr(cls, "unsupported", {}):
        return profile
    return replace(profile, options={**profile.options, "max_turns": 1})


def _probe_context(
    profile: AgentProfile,
    cls: Any,
    paths: AttemptPaths,
    environ: Mapping[str, str],
    timeout_s: float,
    confine: Spec | None,
    sight: Sight | None,
) -> AgentContext:
    """The context an attempt's agent would get, in the probe's own folders: the same
    variables (executors/local.py and attempt.py) and confinement."""
    env = scrubbed_env((*cls.env_keys, *profile.env), environ)
    real_home = Path(environ.get("HOME") or Path.home())
    env.update(tool_homes(environ, real_home) if sight is None else sight.private_env(paths))
    env.update(
        ORCHARDIST_RUN="doctor",
        ORCHARDIST_TASK="probe",
        ORCHARDIST_ATTEMPT="1",
        ORCHARDIST_CANDIDATE="1",
        ORCHARDIST_WORKTREE=str(paths.tree),
        ORCHARDIST_PROMPT=PROBE_PROMPT,
        ORCHARDIST_PROMPT_FILE=str(paths.io / "prompt.md"),
        ORCHARDIST_OUTPUT=str(paths.output_file),
        HOME=str(paths.home),
        TMPDIR=str(paths.tmp),
    )
    return AgentContext(
        run_id="doctor",
        task_id="probe",
        attempt=1,
        candidate=1,
        title="probe",
        prompt=PROBE_PROMPT,
        worktree=paths.tree,
        cwd=paths.tree,
        prompt_file=paths.io / "prompt.md",
        output_file=paths.output_file,
        log=paths.io / "probe.log",
        env=env,
        timeout_s=timeout_s,
        cancel=CancelToken(),
        marker=new_marker(),
        writable=None if confine is None else writable_of(confine),
        confine=confine,
        paths=paths,
    )


def check_profile(profile: AgentProfile, environ: Mapping[str, str] | None = None) -> ProfileReport:
    """Look for the profile's executable, its credentials and its env entries."""
    environ = os.environ if environ is None else environ
    cls: Any = agent_class(profile.kind)
    needs: Needs = cls.needs(profile.options) if hasattr(cls, "needs") else Needs()
    missing: list[str] = []
    notes: list[str] = []
    command = path = version = None
    if needs.executable:
        command = needs.executable
        path = shutil.which(command, path=environ.get("PATH"))
        if path is None:
            missing.append(f"`{command}` not found on PATH (install it, or set command = ...)")
        else:
            version, problem = _version(path, needs.version_args, environ)
            if problem:
                missing.append(problem)
    elif not needs.key_vars:
        notes.append(f"kind {profile.kind!r} runs no external CLI; nothing to check")
    keys = {name: bool(environ.get(name)) for name in needs.key_vars}
    login = None
    if keys and not any(keys.values()):
        login = _login_file(needs.login_files, environ)
        if login is None:
            missing.append(_credentials_missing(needs))
    env = {name: bool(environ.get(name)) for name in profile.env}
    notes += [f"env {name} is not set, so it is not passed" for name, ok in env.items() if not ok]
    if profile.kind == "llm":
        notes.append(f"base_url {profile.options.get('base_url')} (not contacted)")
    return ProfileReport(
        profile.name,
        profile.kind,
        command,
        path,
        version,
        keys,
        login,
        env,
        tuple(missing),
        tuple(notes),
    )


def _version(
    path: str, args: tuple[str, ...], environ: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """First line of ``path --version`` on stdout (stderr carries warnings), or a problem."""
    env = scrubbed_env((), environ)
    shown = " ".join([Path(path).name, *args])
    with tempfile.TemporaryDirectory(prefix="orchardist-doctor-") as tmp:
        proc = subprocess.Popen(
            [path, *args],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=VERSION_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            return None, f"`{shown}` did not answer within {VERSION_TIMEOUT_S:g}s"
        finally:
            _kill_group(proc.pid)  # anything it left behind in its session
    if proc.returncode != 0:
        first = _first_line(err) or _first_line(out)
        return None, f"`{shown}` failed (exit {proc.returncode})" + (f": {first}" if first else "")
    return _first_line(out) or None, None


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:200]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _login_file(templates: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    for template in templates:
        path = home_path(template, environ)
        if "$" not in str(path) and path.is_file():
            return str(path)
    return None


def _credentials_missing(needs: Needs) -> str:
    names = ", ".join(needs.key_vars)
    text = (
        f"credentials: {names} is not set"
        if len(needs.key_vars) == 1
        else (f"credentials: none of {names} is set")
    )
    if needs.login_files:
        text += " and no login was found" + (f" ({needs.login_hint})" if needs.login_hint else "")
    return text


# -- output -----------------------------------------------------------------------------------


def render(plan_name: str, reports: list[ProfileReport]) -> str:
    """The report for people."""
    bad = sum(not r.ok for r in reports)
    lines = [f"{plan_name}: {len(reports)} agent profile(s), {bad} with something missing"]
    for r in reports:
        found = []
        if r.path:
            found.append(f"{r.version or r.command} at {r.path}")
        set_keys = [name for name, ok in r.keys.items() if ok]
        if set_keys:
            found.append("credentials: " + ", ".join(set_keys))
        elif r.login:
            found.append(f"credentials: login at {r.login}")
        head = f"  {'ok' if r.ok else 'MISSING':<8} {r.name} ({r.kind})"
        if r.probe == "ok":
            found.append("probe: ok")
        lines.append(head + (": " + "; ".join(found) if found else ""))
        lines += [f"           - {m}" for m in r.missing]
        if r.probe_argv:
            lines.append(f"           · probe ran: {shlex.join(r.probe_argv)}")
        lines += [f"           · {n}" for n in r.notes]
    return "\n".join(lines)


def to_json(plan_name: str, reports: list[ProfileReport]) -> dict[str, Any]:
    """The report as a JSON document."""
    return {
        "plan": plan_name,
        "ok": all(r.ok for r in reports),
        "profiles": [{**asdict(r), "ok": r.ok} for r in reports],
    }
