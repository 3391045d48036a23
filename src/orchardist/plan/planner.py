"""``orchardist plan``: a planner agent turns a written spec into a plan, checked by orchardist.

The planner works in a private export of the repository's ``HEAD`` (never the user's checkout),
reads the spec and the code, and writes a plan to ``$ORCHARDIST_PLAN_FILE``. orchardist
validates it with the full validator, exactly as ``orchardist validate`` would at the plan's
final path; while there are problems (at most ``max_rounds`` rounds) it sends them back, with
the previous plan, in the next round's prompt. Agent profiles come from the config files
(:mod:`orchardist.config`).

The plan is an agent's words, and ``--run --yes`` runs it unread: it may not widen what agents
receive beyond what the user configured (:func:`widening`), the same rule as for a repository's
config file; each such key is a problem sent back, and the user sets it after review.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..agents import Agent, agent_class, make_agent
from ..agents.context import AgentContext, AgentResult
from ..config import PROFILE_WIDENING
from ..confine.isolation import Policy
from ..confine.procs import CancelToken, new_marker
from ..confine.scrubbed import BASE_ENV
from ..errors import PlanError, UsageError
from ..specs import Plan, RunConfig
from ..state.agentrecords import AgentProfile
from .loading import load_plan

MAX_PLAN_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Round:
    """One round of the planner: what it was told, and what was wrong with what it wrote."""

    n: int
    exit_code: int
    problems: tuple[str, ...]
    log: Path


@dataclass(frozen=True)
class Planned:
    """The outcome: a valid plan written at ``path``, or the last round's problems."""

    path: Path
    rounds: tuple[Round, ...]
    plan: Plan | None

    @property
    def ok(self) -> bool:
        return self.plan is not None


def _prompt(spec: str, profiles_toml: str, last: str, problems: tuple[str, ...]) -> str:
    parts = [
        "You are planning work for orchardist, which runs coding agents in parallel, one task",
        "each, in separate git worktrees, and merges each task once its verify commands pass.",
        "Read the specification below and the repository (your working directory is a copy of",
        "it), then write a plan as TOML to the file named by $ORCHARDIST_PLAN_FILE.",
        "",
        "Plan format:",
        '- optional [run] with verify = "command that proves a task done" (default for tasks)',
        "- one [[task]] table per task: id (letters, digits, . _ -), title, prompt (what the",
        "  agent must do, self-contained), agent (a profile name), depends_on = [ids],",
        '  verify (commands; "none" for no check), estimate (e.g. "10m", for scheduling)',
        '- for a bug to fix: pipeline = "fix" (one shot, escalating to reproduce, audit,',
        '  localize and fix stages with handoffs) or "debug" (those stages directly), the bug',
        "  report as its prompt, and check = a command that fails now, when there is one",
        "- small tasks that touch few files; dependencies only where one task needs another's",
        "  work; no cycles",
        "- a plan is self-contained: copy the [agents.NAME] tables of the profiles it uses",
        "  from these (the user's configured profiles) into the plan, or name them:",
        "",
        profiles_toml.strip() or "(none configured: define [agents.NAME] tables yourself)",
        "",
        "- leave out [run] isolation, sandbox, network, guard_checkout, workspace, executor,",
        "  ray_address and notify, and a profile's env, command, args, permission,",
        "  allowed_tools and api_key_env unless copied as configured: they widen what agents get;",
        "  the user sets them",
        "",
        "Specification:",
        spec.strip(),
    ]
    if problems:
        parts += [
            "",
            "Your previous plan had these problems; write a corrected plan:",
            *(f"- {p}" for p in problems),
            "",
            "Your previous plan:",
            last,
        ]
    return "\n".join(parts) + "\n"


def _export(repo_root: Path, into: Path) -> None:
    """A copy of the committed ``HEAD`` (no .git, nothing uncommitted)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo_root), "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise UsageError(f"cannot export {repo_root}: {archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def _read_plan(path: Path) -> str | None:
    """The planner's plan, if it wrote a regular file of sane size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return None
        data = os.read(fd, MAX_PLAN_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_PLAN_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def _validate(
    text: str, out: Path, configured: Mapping[str, AgentProfile]
) -> tuple[Plan | None, tuple[str, ...]]:
    """Validate ``text`` as the plan at ``out`` would be (relative paths resolve the same),
    then check that it widens nothing (:func:`widening`)."""
    fd, name = tempfile.mkstemp(prefix=".orchardist-plan-", suffix=out.suffix, dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            plan = load_plan(name)
            wide = widening(plan, configured)
            return (None, tuple(f"{out.name}: {w}" for w in wide)) if wide else (plan, ())
        except PlanError as exc:
            shown = name
            return None, tuple(str(p).replace(shown, out.name) for p in exc.problems)
    finally:
        os.unlink(name)


def make_plan(
    repo_root: Path,
    spec_path: Path,
    profile: AgentProfile,
    out: Path,
    profiles_toml: str,
    log_dir: Path,
    max_rounds: int = 3,
    on_round: Callable[[Round], None] | None = None,
    configured: Mapping[str, AgentProfile] | None = None,
) -> Planned:
    """Ask the planner for a plan until it validates (``max_rounds`` at most); write it.
    Each round's log is kept in ``log_dir``. ``configured``: the config files' profiles, which
    the plan may copy as they are."""
    try:
        spec = spec_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the spec {spec_path}: {exc}") from None
    out = out.resolve()
    if not out.parent.is_dir():
        raise UsageError(f"{out.parent} is not a folder: cannot write the plan there")
    agent = make_agent(profile)
    rounds: list[Round] = []
    last = ""
    problems: tuple[str, ...] = ()
    work = Path(tempfile.mkdtemp(prefix="orchardist-plan-"))
    try:
        for n in range(1, max_rounds + 1):
            round_dir = work / f"round{n}"
            tree = round_dir / "tree"
            _export(repo_root, tree)
            plan_file = round_dir / "plan.toml"
            prompt = _prompt(spec, profiles_toml, last, problems)
            prompt_file = round_dir / "prompt.md"
            prompt_file.write_text(prompt, encoding="utf-8")
            log = round_dir / "planner.log"
            result = _ask(agent, profile, spec_path, round_dir, prompt, n)
            text = _read_plan(plan_file)
            plan: Plan | None = None
            if result.failure is not None:
                problems = (f"the planner failed: {result.detail}",)
            elif text is None:
                problems = ("no plan was written to $ORCHARDIST_PLAN_FILE (a TOML file)",)
            else:
                last = text
                plan, problems = _validate(text, out, configured or {})
            done = Round(n, result.exit_code, problems, _keep(log, log_dir / f"round{n}.log"))
            rounds.append(done)
            if on_round is not None:
                on_round(done)
            if plan is not None and text is not None:
                out.write_text(text, encoding="utf-8")
                return Planned(out, tuple(rounds), load_plan(out))
        return Planned(out, tuple(rounds), None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ask(
    agent: Agent, profile: AgentProfile, spec_path: Path, round_dir: Path, prompt: str, n: int
) -> AgentResult:
    """Round ``n``: the planner agent run on the copy in ``round_dir/tree``, its environment
    the base one plus its profile's, and where to write the plan."""
    tree, prompt_file = round_dir / "tree", round_dir / "prompt.md"
    env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    allow = (*profile.env, *agent_class(profile.kind).env_keys)
    env.update({k: os.environ[k] for k in allow if k in os.environ})
    env.update(
        ORCHARDIST_PLAN_FILE=str(round_dir / "plan.toml"),
        ORCHARDIST_ROUND=str(n),
        ORCHARDIST_SPEC_FILE=str(spec_path.resolve()),
        ORCHARDIST_PROMPT_FILE=str(prompt_file),
        ORCHARDIST_OUTPUT=str(round_dir / "output.json"),
    )
    return agent.run(
        AgentContext(
            run_id=f"plan-{int(time.time())}",
            task_id="plan",
            attempt=n,
            candidate=0,
            title="write a plan",
            prompt=prompt,
            worktree=tree,
            cwd=tree,
            prompt_file=prompt_file,
            output_file=round_dir / "output.json",
            log=round_dir / "planner.log",
            env=env,
            timeout_s=profile.timeout_s,
            cancel=CancelToken(),
            marker=new_marker(),
        )
    )


def _keep(log: Path, kept: Path) -> Path:
    """A round's log copied to ``kept`` (empty when the planner wrote none)."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    if log.exists():
        shutil.copyfile(log, kept)
    else:
        kept.write_text("")
    return kept


_WIDE = "widens what agents receive: the user sets it, after reading the plan"


def widening(plan: Plan, configured: Mapping[str, AgentProfile]) -> list[str]:
    """What a planned plan sets that widens what agents receive: ``[run]`` keys that weaken
    isolation or send attempts elsewhere, and profile keys (``env``, each kind's
    ``widening_keys``) not as the configured profile of that name has them."""
    found = [f"run.{key}: {_WIDE}" for key in _wider_run(plan.run)]
    for name, profile in plan.agents.items():
        if name in plan.config_agents:
            continue  # the configured profile itself, named
        same = configured.get(name)
        if same is not None and same.kind != profile.kind:
            same = None
        for key in sorted(PROFILE_WIDENING | agent_class(profile.kind).widening_keys):
            if _value(profile, key) not in (_value(same, key), _value(None, key)):
                found.append(f"agents.{name}.{key}: {_WIDE}")
    return found


def _wider_run(run: RunConfig) -> list[str]:
    """The ``[run]`` keys set wider than the defaults (``required`` isolation is narrower)."""
    plain = RunConfig()
    wider = {
        "isolation": run.isolation not in (Policy.AUTO, Policy.REQUIRED),
        "sandbox": not run.sandbox,
        "network": run.network,
        "guard_checkout": not run.guard_checkout,
        "workspace": run.workspace is not None,
        "executor": run.executor != plain.executor,
        "ray_address": run.ray_address != plain.ray_address,
        "notify": run.notify is not None,  # a command run outside any isolation
    }
    return [key for key, wide in wider.items() if wide]


def _value(profile: AgentProfile | None, key: str) -> object:
    """A profile's value of a widening key; its default when absent (or no profile)."""
    if profile is None:
        return () if key == "env" else None
    return profile.env if key == "env" else profile.options.get(key)
