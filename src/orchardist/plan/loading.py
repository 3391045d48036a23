"""Plan files (TOML or YAML) → a validated, frozen :class:`Plan`.

Validation collects every problem before raising, so a user fixes a plan in one pass. Each
problem names the file and, where it applies, the task and the field. The validator is built in
layers: :mod:`.files` reads the file, :mod:`.fields` checks single fields, :mod:`.tasks` the
``[[task]]`` tables, :mod:`.runtable` the ``[run]`` table, and this module ``[agents.NAME]``, the
config files and the whole plan.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import (
    CONFIG_NAME,
    Config,
    Ignored,
    config_files,
    config_text,
    screen_repository,
    take_trusted,
    user_config,
    widening_keys,
)
from ..confine.isolation import Policy
from ..errors import GitError, PlanError, Problem, unknown_key
from ..specs import Plan as Plan
from ..specs import RunConfig as RunConfig
from ..specs import parse_duration as parse_duration
from ..state.agentrecords import BREAKER_COOLDOWN_S, BREAKER_THRESHOLD, NUM_CPUS
from ..state.agentrecords import AgentProfile as AgentProfile
from .files import nul_fields, parse
from .runtable import RunChecks
from .tasks import TaskChecks

if TYPE_CHECKING:
    from ..git.repo import Repo
    from ..scan.profiles import ScannerProfile

PROFILE_KEYS = {
    "kind",
    "timeout",
    "max_parallel",
    "env",
    "launch_interval",
    "fallback",
    "circuit_breaker",
    "cooldown",
    "num_cpus",
    "memory_mb",
}


def load_plan(path: str | os.PathLike[str], require_tasks: bool = True) -> Plan:
    """Read and validate a plan file; raise :class:`PlanError` listing every problem.

    ``require_tasks=False`` accepts a file with no tasks (a scan configuration).
    """
    return read_plan(path, require_tasks)[0]


def read_plan(path: str | os.PathLike[str], require_tasks: bool = True) -> tuple[Plan, Repo]:
    """:func:`load_plan`, and the plan's repository as it was found: set up to read
    (``identity=False, untracked=False``) and resolved at the plan's base, by the one git
    process that told where it is. ``validate`` checks the plan with it; ``run`` sets it up
    for commits (:meth:`Repo.for_commits`)."""
    plan_path = Path(path).resolve()
    shown = str(path)
    try:
        raw_bytes = plan_path.read_bytes()
    except OSError as exc:
        raise PlanError([Problem(shown, f"cannot read plan: {exc.strerror or exc}")]) from exc
    data = parse(shown, plan_path, raw_bytes)
    digest = hashlib.sha256(raw_bytes).hexdigest()
    validator = _Validator(shown, plan_path, data, digest, require_tasks)
    plan = validator.plan()
    assert validator.repo is not None  # (a plan without one has a problem)
    return plan, validator.repo


def read_profiles_file(
    path: Path, screen: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[dict[str, AgentProfile], list[Problem]]:
    """The ``[agents.NAME]`` tables of a config file (nothing else is allowed in one), checked
    as a plan's are, and the problems found, each naming the file (the profiles that could
    be read are returned even then, so a plan using them is not told they are unknown).
    ``screen`` takes out of the parsed file what may not be read from it."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        return {}, [Problem(str(path), f"cannot read: {exc.strerror or exc}")]
    try:
        data = parse(str(path), path, raw_bytes)
    except PlanError as exc:
        return {}, exc.problems
    if screen is not None:
        data = screen(data)
    return _Validator(str(path), path, data, "").profiles_file()


def load_config(repo_root: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read the config files; raise :class:`PlanError` naming the file of each problem.
    (A profile's ``fallback`` is checked where the profiles are used, against all of them.)"""
    config, problems = read_config(repo_root, environ)
    if problems:
        raise PlanError(problems)
    return config


def read_config(
    repo_root: Path, environ: Mapping[str, str] | None = None
) -> tuple[Config, list[Problem]]:
    """The config files' profiles that could be read, and every problem found in them.

    The user's file first: it says whether the repository is trusted and which names are
    the user's. The repository's is then read whole when trusted (its profiles win, as the
    user asked), else screened (the user's win; see :mod:`orchardist.config`)."""
    user_path, repo_path = user_config(environ), repo_root / CONFIG_NAME
    trusted, user, problems = _read_user_file(user_path)
    repo: dict[str, AgentProfile] = {}
    ignored: list[Ignored] = []
    is_trusted = repo_root.resolve() in trusted
    if repo_path.is_file():

        def screen(data: dict[str, Any]) -> dict[str, Any]:
            screened, left_out = screen_repository(
                data, repo_path, dict.fromkeys(user, user_path), widening_keys
            )
            ignored.extend(left_out)
            return screened

        repo, wrong = read_profiles_file(repo_path, None if is_trusted else screen)
        problems += wrong
    order = [(user_path, user), (repo_path, repo)]  # the winner last
    profiles: dict[str, AgentProfile] = {}
    origins: dict[str, Path] = {}
    for path, found in order:
        profiles.update(found)
        origins.update(dict.fromkeys(found, path))
    texts = [
        config_text(path, found, path == repo_path and not is_trusted)
        for path, found in reversed(order)
        if found
    ]
    files = tuple(config_files(repo_root, environ))
    return Config(profiles, origins, files, "\n".join(texts), tuple(ignored)), problems


def _read_user_file(
    path: Path,
) -> tuple[tuple[Path, ...], dict[str, AgentProfile], list[Problem]]:
    """The user's file: the repositories it trusts, its profiles, and its problems."""
    if not path.is_file():
        return (), {}, []
    trusted: tuple[Path, ...] = ()
    problems: list[Problem] = []

    def take(data: dict[str, Any]) -> dict[str, Any]:
        nonlocal trusted
        trusted, wrong = take_trusted(data, path)
        problems.extend(wrong)
        return data

    profiles, wrong = read_profiles_file(path, take)
    return trusted, profiles, problems + wrong


class _Validator(TaskChecks, RunChecks):
    """Walks the raw mapping once, collecting problems instead of stopping at the first."""

    def __init__(
        self, shown: str, path: Path, data: dict[str, Any], digest: str, require_tasks: bool = True
    ) -> None:
        super().__init__(shown, path, data, require_tasks)
        self.digest = digest
        self.ignored: tuple[Ignored, ...] = ()  # what the repository's config could not set
        self.origins: Mapping[str, Path] = {}  # the config file of each profile read from one
        self.repo: Repo | None = None  # the plan's repository, once found (see _repo)

    def plan(self) -> Plan:
        """The whole plan, or PlanError with every problem found."""
        for key in sorted(set(self.data) - {"run", "agents", "task", "tasks", "scanners"}):
            self.problem(unknown_key(key, {"run", "agents", "task", "scanners"}), fld=key)
        if "task" in self.data and "tasks" in self.data:
            self.problem("give [[task]] tables or tasks = [...], not both", fld="tasks")
        for where in nul_fields(self.data):
            self.problem("contains a NUL byte", fld=where.replace("\0", "\\0") or None)
        run_raw = self._table(self.data.get("run", {}), "run")
        repo = self._repo(run_raw)
        run = self._run(run_raw, repo)
        self.own_agents = self._agents()
        agents = self._with_config(self.own_agents, repo)
        tasks = self._tasks(run, agents)
        if run.isolation is not Policy.OFF:
            used = {name for t in tasks for name in (t.agent, *t.agents)}
            confined = {n: p for n, p in agents.items() if n in used or n in self.own_agents}
            self._confined(confined, repo)
        if not self.problems and any(t.pipeline is not None and not t.stage for t in tasks):
            from ..pipelines.expand import expand  # (pipelines are rare: not imported for none)

            tasks, clashes = expand(tasks, agents)
            for task_id, fld, message in clashes:
                self.problem(message, task_id, fld)
        scanners = self._scanners(agents) if "scanners" in self.data else {}
        if self.problems:
            raise PlanError(self.problems)
        assert repo is not None
        from_config = frozenset(agents) - frozenset(self.own_agents)
        return Plan(
            self.path, repo, run, agents, tasks, self.digest, scanners, from_config, self.ignored
        )

    def profiles_file(self) -> tuple[dict[str, AgentProfile], list[Problem]]:
        """A config file: ``[agents.NAME]`` tables only."""
        for key in sorted(set(self.data) - {"agents"}):
            self.problem(unknown_key(key, {"agents"}) + " (a config file holds profiles)", fld=key)
        for where in nul_fields(self.data):
            self.problem("contains a NUL byte", fld=where.replace("\0", "\\0") or None)
        return self._agents(), self.problems

    def _with_config(
        self, own: dict[str, AgentProfile], repo: Path | None
    ) -> dict[str, AgentProfile]:
        """The config files' profiles under the plan's own (which win); every fallback known."""
        origins: Mapping[str, Path] = {}
        agents = dict(own)
        if repo is not None:
            config, problems = read_config(repo)
            self.problems += problems
            self.ignored = config.ignored
            agents = {**config.profiles, **own}
            origins = self.origins = config.origins
        for name, profile in agents.items():
            if profile.fallback == name:  # its breaker open, it would fall back on itself
                where = str(origins[name]) if name not in own else self.shown
                self.problems.append(
                    Problem(
                        where,
                        "a profile cannot be its own fallback",
                        field=f"agents.{name}.fallback",
                    )
                )
            elif profile.fallback is not None and profile.fallback not in agents:
                where = str(origins[name]) if name not in own else self.shown
                self.problems.append(
                    Problem(
                        where,
                        f"unknown agent profile {profile.fallback!r}",
                        field=f"agents.{name}.fallback",
                    )
                )
        return agents

    def _confined(self, agents: Mapping[str, AgentProfile], repo: Path | None) -> None:
        """Profiles that cannot work inside orchardist's isolation, located in their file."""
        if not agents:  # a scan's config: the agents' modules are not even imported
            return
        from ..agents import agent_class

        for name, profile in agents.items():
            # the kinds that run a CLI say what confinement does to them; asked by name, so
            # that a plan of shell agents does not import the CLI agents' module
            check: Any = getattr(agent_class(profile.kind), "check_confined", None)
            if check is None:
                continue
            where = self.shown if name in self.own_agents else str(self.origins.get(name))
            for message, key in check(profile.options, repo or self.path.parent):
                fld = f"agents.{name}.{key}" if key else f"agents.{name}"
                self.problems.append(Problem(where, message, field=fld))

    def _scanners(self, agents: Mapping[str, AgentProfile]) -> dict[str, ScannerProfile]:
        """``[scanners.NAME]``: the profiles that could be read (their module, its records
        and patterns, imported only for a plan that has some)."""
        from ..scan.profiles import validate_scanners

        return validate_scanners(
            self.data["scanners"],
            lambda message, fld: self.problem(message, fld=fld),
            agents,
            parse_duration,
        )

    def _repo(self, run_raw: dict[str, Any]) -> Path | None:
        """The top level of the repository the plan runs in (``[run] repo``, else the plan's
        folder's), its facts and base asked in the same git process (``self.repo``)."""
        from ..git.repo import Repo

        start = self.path.parent
        if "repo" in run_raw:
            if not isinstance(run_raw["repo"], str):
                self.problem("expected a path string", fld="run.repo")
                return None
            start = (self.path.parent / run_raw["repo"]).resolve()
        base = run_raw.get("base", RunConfig.base)  # checked by _run; git is given a string
        base = base if isinstance(base, str) and "\0" not in base else None
        try:
            self.repo = Repo(start, identity=False, resolve=base, untracked=False, within=True)
        except GitError:
            self.problem(f"{start} is not inside a git repository", fld="run.repo")
            return None
        return self.repo.root

    def _agents(self) -> dict[str, AgentProfile]:
        """``[agents.NAME]``: every profile that could be read."""
        agents: dict[str, AgentProfile] = {}
        for name, raw in self._table(self.data.get("agents", {}), "agents").items():
            profile = self._profile(name, self._table(raw, f"agents.{name}"))
            if profile is not None:
                agents[name] = profile
        return agents

    def _profile(self, name: str, raw: dict[str, Any]) -> AgentProfile | None:
        """One agent profile; None when its kind is unknown."""
        from ..agents import KINDS, agent_class

        where = f"agents.{name}"
        kind = raw.get("kind", "shell")
        if not isinstance(kind, str) or kind not in KINDS:  # a list is no key of KINDS
            self.problem(
                f"unknown kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}",
                fld=f"{where}.kind",
            )
            return None
        cls = agent_class(kind)
        self._unknown_keys(raw, PROFILE_KEYS | set(cls.profile_keys), where)
        options = {k: v for k, v in raw.items() if k in cls.profile_keys}
        for message, key in cls.check_options(options):
            self.problem(message, fld=f"{where}.{key}")
        timeout = self._duration(raw["timeout"], f"{where}.timeout") if "timeout" in raw else None
        max_par = None
        if "max_parallel" in raw:
            max_par = self._positive_int(raw["max_parallel"], f"{where}.max_parallel")
        env = self._str_list(raw.get("env", []), f"{where}.env")
        interval = 0.0
        if "launch_interval" in raw:
            interval = self._duration(raw["launch_interval"], f"{where}.launch_interval") or 0.0
        fallback = self._str(raw["fallback"], f"{where}.fallback") if "fallback" in raw else None
        # A shell command's failures are the task's, not a flaky backend's: no breaker.
        threshold = 0 if kind in ("shell", "scripted") else BREAKER_THRESHOLD
        if "circuit_breaker" in raw:
            threshold = self._count(raw["circuit_breaker"], f"{where}.circuit_breaker")
        cooldown = BREAKER_COOLDOWN_S
        if "cooldown" in raw:
            cooldown = self._duration(raw["cooldown"], f"{where}.cooldown") or BREAKER_COOLDOWN_S
        num_cpus = NUM_CPUS
        if "num_cpus" in raw:
            num_cpus = self._money(raw["num_cpus"], f"{where}.num_cpus") or NUM_CPUS
        memory_mb = (
            self._money(raw["memory_mb"], f"{where}.memory_mb") if "memory_mb" in raw else None
        )
        return AgentProfile(
            name,
            kind,
            timeout,
            max_par,
            tuple(env),
            interval,
            fallback,
            options,
            threshold,
            cooldown,
            num_cpus,
            memory_mb,
        )
