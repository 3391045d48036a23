"""Plan files (TOML or YAML) → a validated, frozen :class:`Plan`.

Validation collects every problem before raising, so a user fixes a plan in one pass. Each
problem names the file and, where it applies, the task and the field.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .config import Config, config_files
from .errors import PlanError, Problem, unknown_key
from .executors import EXECUTORS
from .graph import find_cycles
from .isolation import Policy
from .records import AgentProfile as AgentProfile  # its home; kept importable from here
from .scan.profiles import validate_scanners
from .specs import DEFAULT_BRANCH as DEFAULT_BRANCH  # the records live in specs.py; kept
from .specs import DEFAULT_TASK_TIMEOUT_S as DEFAULT_TASK_TIMEOUT_S  # importable from here
from .specs import MAX_DURATION_S as MAX_DURATION_S
from .specs import MAX_TASK_ID as MAX_TASK_ID
from .specs import Plan as Plan
from .specs import RunConfig as RunConfig
from .specs import StageSpec as StageSpec
from .specs import TaskSpec as TaskSpec
from .specs import parse_duration as parse_duration

TASK_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
# Placeholders a verify or check command may use, filled when the plan is read.
VERIFY_PLACEHOLDERS = ("task",)
AGENT_ONLY_PLACEHOLDERS = ("candidate", "attempt", "prompt_file", "worktree", "run")
_PLACEHOLDER = re.compile(r"(?<![${])\{(" + "|".join(("task", *AGENT_ONLY_PLACEHOLDERS)) + r")\}")

RUN_KEYS = {
    "base",
    "branch",
    "max_parallel",
    "verify",
    "repo",
    "workdir",
    "deadline",
    "max_cost_usd",
    "retry_backoff",
    "candidates",
    "select",
    "regression",
    "regression_every",
    "max_patch_mb",
    "guard_checkout",
    "sandbox",
    "isolation",
    "network",
    "workspace",
    "executor",
    "ray_address",
}
PROFILE_KEYS = {
    "kind",
    "timeout",
    "max_parallel",
    "env",
    "launch_interval",
    "fallback",
    "circuit_breaker",
    "cooldown",
}
SELECT_RULES = ("smallest", "first")
TASK_KEYS = {
    "allow_empty",
    "candidates",
    "select",
    "check",
    "max_cost_usd",
    "id",
    "title",
    "prompt",
    "prompt_file",
    "agent",
    "depends_on",
    "verify",
    "retries",
    "timeout",
    "priority",
    "estimate",
    "workdir",
    "network",
    "pipeline",
    "stages",
}
PIPELINES = ("debug", "fix")  # pipeline = "debug" | "fix": a task run as stages (pipeline.py)
STAGE_NAMES = ("reproduce", "audit", "localize", "fix")  # stages.NAME tables, in run order
STAGE_KEYS = {"agent", "timeout", "retries", "candidates"}


def load_plan(path: str | os.PathLike[str], require_tasks: bool = True) -> Plan:
    """Read and validate a plan file; raise :class:`PlanError` listing every problem.

    ``require_tasks=False`` accepts a file with no tasks (a scan configuration).
    """
    plan_path = Path(path).resolve()
    shown = str(path)
    try:
        raw_bytes = plan_path.read_bytes()
    except OSError as exc:
        raise PlanError([Problem(shown, f"cannot read plan: {exc.strerror or exc}")]) from exc
    data = _parse(shown, plan_path, raw_bytes)
    digest = hashlib.sha256(raw_bytes).hexdigest()
    return _Validator(shown, plan_path, data, digest, require_tasks).plan()


def read_profiles_file(path: Path) -> tuple[dict[str, AgentProfile], list[Problem]]:
    """The ``[agents.NAME]`` tables of a config file (nothing else is allowed in one), checked
    as a plan's are, and the problems found, each naming the file (the profiles that could
    be read are returned even then, so a plan using them is not told they are unknown)."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        return {}, [Problem(str(path), f"cannot read: {exc.strerror or exc}")]
    try:
        data = _parse(str(path), path, raw_bytes)
    except PlanError as exc:
        return {}, exc.problems
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
    """The config files' profiles that could be read, and every problem found in them."""
    files = config_files(repo_root, environ)
    profiles: dict[str, AgentProfile] = {}
    origins: dict[str, Path] = {}
    problems: list[Problem] = []
    texts = []
    for path in reversed(files):  # the winner last
        found, wrong = read_profiles_file(path)
        problems += wrong
        profiles.update(found)
        origins.update(dict.fromkeys(found, path))
        if found:
            texts.append(f"# from {path}\n" + path.read_text(encoding="utf-8", errors="replace"))
    return Config(profiles, origins, tuple(files), "\n".join(reversed(texts))), problems


def _parse(shown: str, plan_path: Path, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError([Problem(shown, "plan is not UTF-8 text")]) from exc
    if plan_path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.load(text, Loader=_unique_key_loader())  # a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise PlanError([Problem(shown, f"invalid YAML: {exc}")]) from exc
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PlanError([Problem(shown, f"invalid TOML: {exc}")]) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PlanError([Problem(shown, "a plan must be a table/mapping at the top level")])
    return data


def _unique_key_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """safe_load that refuses a key given twice in one mapping (YAML keeps the last)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return Loader


def _nul_fields(value: object, where: str = "") -> list[str]:
    """Where a NUL byte hides in the raw plan (no process can take one in an argument)."""
    if isinstance(value, str):
        return [where] if "\0" in value else []
    if isinstance(value, dict):
        found = [f"{where}.{k}".lstrip(".") for k in value if isinstance(k, str) and "\0" in k]
        for key, item in value.items():
            found += _nul_fields(item, f"{where}.{key}".lstrip("."))
        return found
    if isinstance(value, list):
        return [f for i, item in enumerate(value) for f in _nul_fields(item, f"{where}[{i}]")]
    return []


class _Validator:
    """Walks the raw mapping once, collecting problems instead of stopping at the first."""

    def __init__(
        self, shown: str, path: Path, data: dict[str, Any], digest: str, require_tasks: bool = True
    ) -> None:
        self.shown, self.path, self.data, self.digest = shown, path, data, digest
        self.require_tasks = require_tasks
        self.problems: list[Problem] = []
        self.own_agents: dict[str, AgentProfile] = {}

    def problem(self, message: str, task: str | None = None, fld: str | None = None) -> None:
        self.problems.append(Problem(self.shown, message, task, fld))

    def plan(self) -> Plan:
        for key in sorted(set(self.data) - {"run", "agents", "task", "tasks", "scanners"}):
            self.problem(unknown_key(key, {"run", "agents", "task", "scanners"}), fld=key)
        if "task" in self.data and "tasks" in self.data:
            self.problem("give [[task]] tables or tasks = [...], not both", fld="tasks")
        for where in _nul_fields(self.data):
            self.problem("contains a NUL byte", fld=where.replace("\0", "\\0") or None)
        run_raw = self._table(self.data.get("run", {}), "run")
        repo = self._repo(run_raw)
        run = self._run(run_raw, repo)
        self.own_agents = self._agents()
        agents = self._with_config(self.own_agents, repo)
        tasks = self._tasks(run, agents)
        if not self.problems:
            from .pipeline import expand

            tasks, clashes = expand(tasks, agents)
            for task_id, fld, message in clashes:
                self.problem(message, task_id, fld)
        scanners = validate_scanners(
            self.data.get("scanners", {}),
            lambda message, fld: self.problem(message, fld=fld),
            agents,
            parse_duration,
        )
        if self.problems:
            raise PlanError(self.problems)
        assert repo is not None
        from_config = frozenset(agents) - frozenset(self.own_agents)
        return Plan(self.path, repo, run, agents, tasks, self.digest, scanners, from_config)

    def profiles_file(self) -> tuple[dict[str, AgentProfile], list[Problem]]:
        """A config file: ``[agents.NAME]`` tables only."""
        for key in sorted(set(self.data) - {"agents"}):
            self.problem(unknown_key(key, {"agents"}) + " (a config file holds profiles)", fld=key)
        for where in _nul_fields(self.data):
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
            agents = {**config.profiles, **own}
            origins = config.origins
        for name, profile in agents.items():
            if profile.fallback is not None and profile.fallback not in agents:
                where = str(origins[name]) if name not in own else self.shown
                self.problems.append(
                    Problem(
                        where,
                        f"unknown agent profile {profile.fallback!r}",
                        field=f"agents.{name}.fallback",
                    )
                )
        return agents

    # -- tables --------------------------------------------------------------------------

    def _table(self, value: object, fld: str, task: str | None = None) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        self.problem("expected a table", task, fld)
        return {}

    def _repo(self, run_raw: dict[str, Any]) -> Path | None:
        from .gitrepo import find_toplevel

        start = self.path.parent
        if "repo" in run_raw:
            if not isinstance(run_raw["repo"], str):
                self.problem("expected a path string", fld="run.repo")
                return None
            start = (self.path.parent / run_raw["repo"]).resolve()
        top = find_toplevel(start)
        if top is None:
            self.problem(f"{start} is not inside a git repository", fld="run.repo")
        return top

    def _run(self, raw: dict[str, Any], repo: Path | None) -> RunConfig:
        self._unknown_keys(raw, RUN_KEYS, "run")
        default_workdir = "."
        if repo is not None and self.path.parent.is_relative_to(repo):
            default_workdir = self.path.parent.relative_to(repo).as_posix() or "."
        cfg = RunConfig(workdir=default_workdir)
        values: dict[str, Any] = {}
        if "base" in raw:
            values["base"] = self._str(raw["base"], "run.base")
        if "branch" in raw:
            branch = self._str(raw["branch"], "run.branch")
            if branch is not None and not branch.strip():
                self.problem("must not be empty", fld="run.branch")
            values["branch"] = branch
        if "max_parallel" in raw:
            values["max_parallel"] = self._positive_int(raw["max_parallel"], "run.max_parallel")
        if raw.get("verify") == "auto":
            self.problem('"auto" is a per-task setting', fld="run.verify")
        elif "verify" in raw:
            values["verify"] = self._commands(raw["verify"], "run.verify")
        if "workdir" in raw:
            values["workdir"] = self._workdir(raw["workdir"], "run.workdir")
        if "deadline" in raw:
            values["deadline_s"] = self._duration(raw["deadline"], "run.deadline")
        if "max_cost_usd" in raw:
            values["max_cost_usd"] = self._money(raw["max_cost_usd"], "run.max_cost_usd")
        if "retry_backoff" in raw:
            values["retry_backoff_s"] = self._duration(raw["retry_backoff"], "run.retry_backoff")
        if "candidates" in raw:
            values["candidates"] = self._positive_int(raw["candidates"], "run.candidates")
        if "select" in raw:
            values["select"] = self._select(raw["select"], "run.select")
        if "regression" in raw:
            regression = self._commands(raw["regression"], "run.regression") or ()
            for command in regression:
                for name in _PLACEHOLDER.findall(command):
                    self.problem(
                        f"{{{name}}} is not filled in regression commands (they run on the "
                        "run branch, for no one task)",
                        fld="run.regression",
                    )
            values["regression"] = regression
        if "regression_every" in raw:
            every = self._positive_int(raw["regression_every"], "run.regression_every")
            values["regression_every"] = every
        if "max_patch_mb" in raw:
            values["max_patch_mb"] = self._money(raw["max_patch_mb"], "run.max_patch_mb")
        if "workspace" in raw:
            values["workspace"] = self._workspace(raw["workspace"], repo)
        if "executor" in raw:
            values["executor"] = self._executor(raw["executor"])
        if "ray_address" in raw:
            address = self._str(raw["ray_address"], "run.ray_address")
            if address is not None and not address.strip():
                self.problem(
                    "must not be empty (auto finds a cluster started here)", fld="run.ray_address"
                )
            values["ray_address"] = address.strip() if address else None
        if "isolation" in raw:
            values["isolation"] = self._isolation(raw["isolation"])
        elif raw.get("sandbox") is False:
            values["isolation"] = Policy.OFF
        for flag in ("guard_checkout", "sandbox", "network"):
            if flag not in raw:
                continue
            if isinstance(raw[flag], bool):
                values[flag] = raw[flag]
            else:
                self.problem("expected true or false", fld=f"run.{flag}")
        values = {k: v for k, v in values.items() if v is not None}
        return RunConfig(**{**cfg.__dict__, **values})

    def _executor(self, raw: object) -> str | None:
        """``[run] executor``: a name in the executor table."""
        if isinstance(raw, str) and raw in EXECUTORS:
            return raw
        names = ", ".join(f'"{name}"' for name in sorted(EXECUTORS))
        self.problem(f"unknown executor {raw!r}; known executors: {names}", fld="run.executor")
        return None

    def _isolation(self, raw: object) -> Policy | None:
        """``[run] isolation``; an explicit value wins over the older ``sandbox = false``."""
        if isinstance(raw, str) and raw in {p.value for p in Policy}:
            return Policy(raw)
        names = ", ".join(f'"{p.value}"' for p in Policy)
        self.problem(f"expected one of {names}", fld="run.isolation")
        return None

    def _workspace(self, raw: Any, repo: Path | None) -> Path | None:
        """``[run] workspace``: relative to the plan's folder; never inside the repository,
        where the user's git (and the checkout guard) would see every attempt's files."""
        text = self._str(raw, "run.workspace")
        if text is None:
            return None
        if not text.strip():
            self.problem("must not be empty", fld="run.workspace")
            return None
        path = (self.path.parent / Path(text).expanduser()).resolve()
        if repo is not None and path.is_relative_to(repo):
            self.problem(
                f"{path} is inside the repository; choose a folder outside it", fld="run.workspace"
            )
            return None
        return path

    def _agents(self) -> dict[str, AgentProfile]:
        from .agents import KINDS, agent_class

        agents: dict[str, AgentProfile] = {}
        for name, raw in self._table(self.data.get("agents", {}), "agents").items():
            where = f"agents.{name}"
            raw = self._table(raw, where)
            kind = raw.get("kind", "shell")
            if not isinstance(kind, str) or kind not in KINDS:  # a list is no key of KINDS
                self.problem(
                    f"unknown kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}",
                    fld=f"{where}.kind",
                )
                continue
            cls = agent_class(kind)
            self._unknown_keys(raw, PROFILE_KEYS | set(cls.profile_keys), where)
            options = {k: v for k, v in raw.items() if k in cls.profile_keys}
            for message, key in cls.check_options(options):
                self.problem(message, fld=f"{where}.{key}")
            timeout = (
                self._duration(raw["timeout"], f"{where}.timeout") if "timeout" in raw else None
            )
            max_par = None
            if "max_parallel" in raw:
                max_par = self._positive_int(raw["max_parallel"], f"{where}.max_parallel")
            env = self._str_list(raw.get("env", []), f"{where}.env")
            interval = 0.0
            if "launch_interval" in raw:
                interval = self._duration(raw["launch_interval"], f"{where}.launch_interval") or 0.0
            fallback = (
                self._str(raw["fallback"], f"{where}.fallback") if "fallback" in raw else None
            )
            # A shell command's failures are the task's, not a flaky backend's: no breaker.
            threshold = 0 if kind in ("shell", "scripted") else 3
            if "circuit_breaker" in raw:
                where_cb = f"{where}.circuit_breaker"
                threshold = self._count(raw["circuit_breaker"], where_cb)
            cooldown = 60.0
            if "cooldown" in raw:
                cooldown = self._duration(raw["cooldown"], f"{where}.cooldown") or 60.0
            agents[name] = AgentProfile(
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
            )
        return agents

    def _tasks(self, run: RunConfig, agents: Mapping[str, AgentProfile]) -> tuple[TaskSpec, ...]:
        raw_tasks = self.data.get("task", self.data.get("tasks", []))
        if not isinstance(raw_tasks, list):
            self.problem("expected an array of tables ([[task]])", fld="task")
            return ()
        if not raw_tasks and self.require_tasks:
            self.problem("the plan has no tasks", fld="task")
        tasks: list[TaskSpec] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_tasks):
            label = f"#{index + 1}"
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                label = raw["id"] if len(raw["id"]) <= 70 else raw["id"][:40] + "…"
            raw = self._table(raw, "task", label)
            task = self._task(raw, index, label, run, agents)
            if task is None:
                continue
            if task.id in seen:
                self.problem("duplicate task id", task.id, "id")
                continue
            seen.add(task.id)
            tasks.append(task)
        ids = {t.id for t in tasks}
        for task in tasks:
            for dep in task.depends_on:
                if dep not in ids:
                    self.problem(f"unknown task {dep!r}", task.id, "depends_on")
        deps = {t.id: [d for d in t.depends_on if d in ids] for t in tasks}
        for cycle in find_cycles([t.id for t in tasks], deps):  # file order: stable reports
            self.problem(
                "dependency cycle: " + " -> ".join([*cycle, cycle[0]]), cycle[0], "depends_on"
            )
        return tuple(tasks)

    def _task(
        self,
        raw: dict[str, Any],
        index: int,
        label: str,
        run: RunConfig,
        agents: Mapping[str, AgentProfile],
    ) -> TaskSpec | None:
        self._unknown_keys(raw, TASK_KEYS, "task", label)
        task_id = raw.get("id")
        ok = True
        if not isinstance(task_id, str) or not TASK_ID.match(task_id):
            self.problem("required, and must match [A-Za-z0-9_.-]+", label, "id")
            ok = False
        elif (why := task_id_problem(task_id)) is not None:
            self.problem(why, label, "id")
            ok = False
        prompt = self._prompt(raw, label)
        agent_list = self._agent_list(raw.get("agent"), agents, label)
        agent = agent_list[0] if agent_list else None
        if agent is None:
            ok = False
        candidates = run.candidates
        if "candidates" in raw:
            candidates = self._positive_int(raw["candidates"], "candidates", label) or 1
        elif len(agent_list) > 1:
            candidates = len(agent_list)
        select = run.select
        if "select" in raw:
            select = self._select(raw["select"], "select", label) or select
        check = self._str(raw["check"], "check", label) if "check" in raw else None
        if check is not None and isinstance(task_id, str):
            check = self._placeholders(check, task_id, "check", label)
        max_cost = None
        if "max_cost_usd" in raw:
            max_cost = self._money(raw["max_cost_usd"], "max_cost_usd", label)
        deps = self._str_list(raw.get("depends_on", []), "depends_on", label)
        verify = run.verify
        auto_verify = raw.get("verify") == "auto"
        if "verify" in raw and not auto_verify:
            verify = self._commands(raw["verify"], "verify", label) or ()
        if isinstance(task_id, str):
            fld = "verify" if "verify" in raw else "run.verify"
            verify = tuple(self._placeholders(c, task_id, fld, label) for c in verify)
        retries = self._count(raw.get("retries", 0), "retries", label)
        timeout = DEFAULT_TASK_TIMEOUT_S
        if "timeout" in raw:
            timeout = self._duration(raw["timeout"], "timeout", label) or timeout
        priority = raw.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            self.problem("expected an integer", label, "priority")
            priority = 0
        estimate = raw.get("estimate", 1.0)
        if isinstance(estimate, str):
            estimate = self._duration(estimate, "estimate", label) or 1.0
        elif (
            not isinstance(estimate, int | float)
            or isinstance(estimate, bool)
            or not 0 < estimate <= MAX_DURATION_S
        ):
            self.problem("expected a positive number or a duration", label, "estimate")
            estimate = 1.0
        workdir = "."
        if "workdir" in raw:
            workdir = self._workdir(raw["workdir"], "workdir", label) or "."
        else:
            workdir = run.workdir
        network = raw.get("network", run.network)
        if not isinstance(network, bool):
            self.problem("expected true or false", label, "network")
            network = run.network
        allow_empty = raw.get("allow_empty", False)
        if not isinstance(allow_empty, bool):
            self.problem("expected true or false", label, "allow_empty")
            allow_empty = False
        pipeline = None
        if "pipeline" in raw:
            pipeline = raw["pipeline"]
            if pipeline not in PIPELINES:
                names = ", ".join(f'"{p}"' for p in PIPELINES)
                self.problem(f"expected one of {names}", label, "pipeline")
                pipeline = None
        stages, audit = self._stages(raw, label, agents)
        if "stages" in raw and "pipeline" not in raw:
            self.problem('stages need pipeline = "debug" or "fix"', label, "stages")
        if not ok or not isinstance(agent, str) or not isinstance(task_id, str):
            return None
        title = raw.get("title", task_id)
        if not isinstance(title, str):
            self.problem("expected a string", label, "title")
            title = task_id
        return TaskSpec(
            id=task_id,
            title=title.strip() or task_id,
            prompt=prompt,
            agent=agent,
            index=index,
            depends_on=tuple(dict.fromkeys(deps)),
            verify=verify,
            retries=retries,
            timeout_s=timeout,
            priority=priority,
            estimate=float(estimate),
            workdir=workdir,
            candidates=candidates,
            agents=tuple(agent_list) if len(agent_list) > 1 else (),
            select=select,
            check=check,
            auto_verify=auto_verify,
            max_cost_usd=max_cost,
            network=network,
            allow_empty=allow_empty,
            pipeline=pipeline,
            stages=stages,
            audit=audit,
        )

    def _stages(
        self, raw: dict[str, Any], label: str, agents: Mapping[str, AgentProfile]
    ) -> tuple[dict[str, StageSpec], bool]:
        """``stages.NAME.{agent,timeout,retries,candidates}`` and ``stages.audit = false``."""
        table = self._table(raw.get("stages", {}), "stages", label)
        stages: dict[str, StageSpec] = {}
        audit = True
        for name, value in table.items():
            where = f"stages.{name}"
            if name not in STAGE_NAMES:
                self.problem(
                    unknown_key(name, set(STAGE_NAMES)).replace("key", "stage", 1), label, where
                )
                continue
            if name == "audit" and isinstance(value, bool):
                audit = value
                continue
            if not isinstance(value, dict):
                hint = " (or false)" if name == "audit" else ""
                self.problem(f"expected a table{hint}", label, where)
                continue
            for key in sorted(set(value) - STAGE_KEYS):
                self.problem(unknown_key(key, STAGE_KEYS), label, f"{where}.{key}")
            names: list[str] = []
            if "agent" in value:
                names = self._agent_list(value["agent"], agents, label, f"{where}.agent")
            timeout = None
            if "timeout" in value:
                timeout = self._duration(value["timeout"], f"{where}.timeout", label)
            retries = None
            if "retries" in value:
                retries = self._count(value["retries"], f"{where}.retries", label)
            candidates = None
            if "candidates" in value:
                candidates = self._positive_int(value["candidates"], f"{where}.candidates", label)
            elif len(names) > 1:
                candidates = len(names)
            stages[name] = StageSpec(name, tuple(names), timeout, retries, candidates)
        return stages, audit

    def _agent_list(
        self, value: object, agents: Mapping[str, AgentProfile], label: str, fld: str = "agent"
    ) -> list[str]:
        """The task's profile names (one, or one per candidate); problems for unknown ones."""
        pool = self.own_agents or agents  # the plan's own profile first, if it has one
        if value is None and len(pool) == 1:
            value = next(iter(pool))
        names = value if isinstance(value, list) else [value]
        if value is None or not names or not all(isinstance(n, str) for n in names):
            self.problem("required: a profile name or a list of them", label, fld)
            return []
        known = ", ".join(sorted(agents)) or "none defined"
        for name in names:
            if name not in agents:
                self.problem(f"unknown agent {name!r} (known: {known})", label, fld)
        return [str(n) for n in names]

    def _prompt(self, raw: dict[str, Any], label: str) -> str:
        if "prompt" in raw and "prompt_file" in raw:
            self.problem("give prompt or prompt_file, not both", label, "prompt_file")
        if "prompt_file" in raw:
            name = self._str(raw["prompt_file"], "prompt_file", label)
            if name is None:
                return ""
            try:
                return (self.path.parent / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                self.problem(f"cannot read {name!r}: {exc}", label, "prompt_file")
                return ""
        prompt = raw.get("prompt", raw.get("title", ""))
        if not isinstance(prompt, str):
            self.problem("expected a string", label, "prompt")
            return ""
        return prompt

    # -- fields --------------------------------------------------------------------------

    def _unknown_keys(
        self, raw: Mapping[str, Any], allowed: set[str], where: str, task: str | None = None
    ) -> None:
        for key in sorted(set(raw) - allowed):
            fld = key if task is not None else f"{where}.{key}"
            self.problem(unknown_key(key, allowed), task, fld)

    def _checked(
        self, value: object, fld: str, task: str | None, check: Callable[[object], Any]
    ) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            self.problem(str(exc), task, fld)
            return None

    def _str(self, value: object, fld: str, task: str | None = None) -> str | None:
        return self._checked(value, fld, task, _expect_str)  # type: ignore[no-any-return]

    def _duration(self, value: object, fld: str, task: str | None = None) -> float | None:
        return self._checked(value, fld, task, parse_duration)  # type: ignore[no-any-return]

    def _positive_int(self, value: object, fld: str, task: str | None = None) -> int | None:
        return self._checked(value, fld, task, _expect_positive_int)  # type: ignore[no-any-return]

    def _money(self, value: object, fld: str, task: str | None = None) -> float | None:
        return self._checked(value, fld, task, _expect_positive_number)  # type: ignore[no-any-return]

    def _workdir(self, value: object, fld: str, task: str | None = None) -> str | None:
        """A relative path that stays inside the repository."""
        text = self._str(value, fld, task)
        if text is None:
            return None
        if os.path.isabs(text):
            self.problem("must be a path relative to the repository, not absolute", task, fld)
            return None
        normal = os.path.normpath(text)
        if normal == ".." or normal.startswith("../"):
            self.problem(f"{text!r} leaves the repository", task, fld)
            return None
        return text

    def _placeholders(self, command: str, task_id: str, fld: str, task: str) -> str:
        """Fill ``{task}`` as agent commands do; a placeholder only agents have is a problem."""
        import shlex

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in VERIFY_PLACEHOLDERS:
                return shlex.quote(task_id)
            self.problem(
                f"{{{name}}} is only filled in agent commands; verify and check commands "
                "get {task}",
                task,
                fld,
            )
            return match.group(0)

        return _PLACEHOLDER.sub(fill, command)

    def _select(self, value: object, fld: str, task: str | None = None) -> str | None:
        if value not in SELECT_RULES:
            self.problem(f"expected one of {', '.join(SELECT_RULES)}", task, fld)
            return None
        return str(value)

    def _count(self, value: object, fld: str, task: str | None = None) -> int:
        count: int = self._checked(value, fld, task, _expect_count) or 0
        return count

    def _str_list(self, value: object, fld: str, task: str | None = None) -> list[str]:
        items: list[str] = self._checked(value, fld, task, _expect_str_list) or []
        return items

    def _commands(self, value: object, fld: str, task: str | None = None) -> tuple[str, ...] | None:
        if value == "none":
            return ()
        if isinstance(value, str):
            value = [value]
        commands = self._checked(value, fld, task, _expect_str_list)
        if commands is None:
            return None
        if any(not c.strip() for c in commands):
            self.problem("commands must not be empty", task, fld)
        return tuple(commands)


def task_id_problem(task_id: str) -> str | None:
    """Why ``task_id`` cannot name a git ref and a folder, or None when it can."""
    if len(task_id) > MAX_TASK_ID:
        return f"at most {MAX_TASK_ID} characters (this one has {len(task_id)})"
    if task_id.startswith((".", "-")):
        return "must not start with '.' or '-' (git refuses such ref names)"
    if ".." in task_id:
        return "must not contain '..' (git refuses such ref names)"
    if task_id.endswith((".", ".lock")):
        return "must not end with '.' or '.lock' (git refuses such ref names)"
    return None


def _expect_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _expect_positive_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("expected a whole number ≥ 1")
    return value


def _expect_positive_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError("expected a positive number")
    if not math.isfinite(value):  # TOML and YAML can spell inf and nan
        raise ValueError("expected a finite number")
    return float(value)


def _expect_count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("expected a whole number ≥ 0")
    return value


def _expect_str_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a string or a list of strings")
    return list(value)
