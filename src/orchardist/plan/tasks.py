"""The ``[[task]]`` tables of a plan: each task's fields, its agents and stages, the task ids
unique and their dependencies known and without cycles."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import unknown_key
from ..specs import (
    DEFAULT_TASK_TIMEOUT_S,
    MAX_DURATION_S,
    MAX_TASK_ID,
    RunConfig,
    TaskSpec,
)
from ..state.agentrecords import AgentProfile
from .cycles import find_cycles
from .fields import Fields

if TYPE_CHECKING:
    from ..pipelines.overrides import StageSpec

TASK_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
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
    "review",
}
PIPELINES = ("debug", "fix")  # pipeline = "debug" | "fix": a task run as stages (pipeline.py)
STAGE_NAMES = ("reproduce", "audit", "localize", "fix")  # stages.NAME tables, in run order
STAGE_KEYS = {"agent", "timeout", "retries", "candidates"}


class TaskChecks(Fields):
    """The checks of the task tables (and of the stages and agents a task names)."""

    def __init__(self, shown: str, path: Path, data: dict[str, Any], require_tasks: bool) -> None:
        super().__init__(shown, path, data)
        self.require_tasks = require_tasks
        self.own_agents: dict[str, AgentProfile] = {}

    def _tasks(self, run: RunConfig, agents: Mapping[str, AgentProfile]) -> tuple[TaskSpec, ...]:
        """Every task table, then the graph: ids unique, dependencies known, no cycle."""
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
        """One task table; None when it cannot make a task (its problems are recorded)."""
        self._unknown_keys(raw, TASK_KEYS, "task", label)
        task_id = self._task_id(raw, label)
        prompt = self._prompt(raw, label)
        agent_list = self._agent_list(raw.get("agent"), agents, label)
        candidates, select = self._choice(raw, label, run, agent_list)
        check = self._check(raw, label)
        max_cost = None
        if "max_cost_usd" in raw:
            max_cost = self._money(raw["max_cost_usd"], "max_cost_usd", label)
        deps = self._str_list(raw.get("depends_on", []), "depends_on", label)
        verify, auto_verify = self._verify(raw, label, run)
        limits = self._limits(raw, label)
        placement = self._placement(raw, label, run)
        pipeline = self._pipeline(raw, label)
        stages, audit = self._stages(raw, label, agents)
        review = self._review(raw["review"], "review", label) if "review" in raw else None
        if "stages" in raw and "pipeline" not in raw:
            self.problem('stages need pipeline = "debug" or "fix"', label, "stages")
        if task_id is None or not agent_list:
            return None
        self._prompt_needed(raw, prompt, [agents[n] for n in agent_list if n in agents], label)
        return TaskSpec(
            id=task_id,
            title=self._title(raw, task_id, label),
            prompt=prompt,
            agent=agent_list[0],
            index=index,
            depends_on=tuple(dict.fromkeys(deps)),
            verify=verify,
            candidates=candidates,
            agents=tuple(agent_list) if len(agent_list) > 1 else (),
            select=select,
            check=check,
            auto_verify=auto_verify,
            max_cost_usd=max_cost,
            pipeline=pipeline,
            stages=stages,
            audit=audit,
            review=review or run.review,
            **limits,
            **placement,
        )

    def _task_id(self, raw: dict[str, Any], label: str) -> str | None:
        """The task's id, if it can name a git ref and a folder."""
        task_id = raw.get("id")
        if not isinstance(task_id, str) or not TASK_ID.match(task_id):
            self.problem("required, and must match [A-Za-z0-9_.-]+", label, "id")
            return None
        if (why := task_id_problem(task_id)) is not None:
            self.problem(why, label, "id")
            return None
        return task_id

    def _choice(
        self, raw: dict[str, Any], label: str, run: RunConfig, agent_list: list[str]
    ) -> tuple[int, str]:
        """How many candidates the task runs, and how the winner is selected."""
        candidates = run.candidates
        if "candidates" in raw:
            candidates = self._positive_int(raw["candidates"], "candidates", label) or 1
        elif len(agent_list) > 1:
            candidates = len(agent_list)
        select = run.select
        if "select" in raw:
            select = self._select(raw["select"], "select", label) or select
        return candidates, select

    def _check(self, raw: dict[str, Any], label: str) -> str | None:
        """The task's ``check`` command, ``{task}`` filled (also for an id found wrong)."""
        check = self._str(raw["check"], "check", label) if "check" in raw else None
        if check is not None and isinstance(raw.get("id"), str):
            check = self._placeholders(check, raw["id"], "check", label)
        return check

    def _verify(
        self, raw: dict[str, Any], label: str, run: RunConfig
    ) -> tuple[tuple[str, ...], bool]:
        """The task's verify commands (the run's unless it has its own), ``{task}`` filled,
        and whether they are ``"auto"``."""
        verify = run.verify
        auto_verify = raw.get("verify") == "auto"
        if "verify" in raw and not auto_verify:
            verify = self._commands(raw["verify"], "verify", label) or ()
        if isinstance(raw.get("id"), str):
            fld = "verify" if "verify" in raw else "run.verify"
            verify = tuple(self._placeholders(c, raw["id"], fld, label) for c in verify)
        return verify, auto_verify

    def _limits(self, raw: dict[str, Any], label: str) -> dict[str, Any]:
        """``retries``, ``timeout``, ``priority`` and ``estimate``, as TaskSpec fields."""
        retries = self._retries(raw.get("retries", 0), "retries", label)
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
        return {
            "retries": retries,
            "timeout_s": timeout,
            "priority": priority,
            "estimate": float(estimate),
        }

    def _placement(self, raw: dict[str, Any], label: str, run: RunConfig) -> dict[str, Any]:
        """``workdir``, ``network`` and ``allow_empty``, as TaskSpec fields."""
        workdir = run.workdir
        if "workdir" in raw:
            workdir = self._workdir(raw["workdir"], "workdir", label) or "."
        network = self._flag(raw.get("network", run.network), run.network, "network", label)
        allow_empty = self._flag(raw.get("allow_empty", False), False, "allow_empty", label)
        return {"workdir": workdir, "network": network, "allow_empty": allow_empty}

    def _pipeline(self, raw: dict[str, Any], label: str) -> str | None:
        """``pipeline``: one of PIPELINES, or None for a plain task."""
        pipeline = raw.get("pipeline")
        if "pipeline" in raw and pipeline not in PIPELINES:
            names = ", ".join(f'"{p}"' for p in PIPELINES)
            self.problem(f"expected one of {names}", label, "pipeline")
            return None
        return pipeline

    def _title(self, raw: dict[str, Any], task_id: str, label: str) -> str:
        """The task's title (its id when it has none)."""
        title = raw.get("title", task_id)
        if not isinstance(title, str):
            self.problem("expected a string", label, "title")
            title = task_id
        return title.strip() or task_id

    def _stages(
        self, raw: dict[str, Any], label: str, agents: Mapping[str, AgentProfile]
    ) -> tuple[dict[str, StageSpec], bool]:
        """``stages.NAME.{agent,timeout,retries,candidates}`` and ``stages.audit = false``."""
        table = self._table(raw.get("stages", {}), "stages", label)
        if not table:  # most plans: StageSpec is made only for one that has stages
            return {}, True
        from ..pipelines.overrides import StageSpec

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
                retries = self._retries(value["retries"], f"{where}.retries", label)
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

    def _prompt_needed(
        self, raw: dict[str, Any], prompt: str, profiles: list[AgentProfile], label: str
    ) -> None:
        """A task whose agents read a prompt needs one: without prompt, prompt_file or title
        its agent would be asked nothing. Shell commands that do not read {prompt_file} and
        scripted agents do without."""
        if prompt.strip() or "prompt_file" in raw:
            return
        for profile in profiles:
            command = str(profile.options.get("command", ""))
            if profile.kind not in ("shell", "scripted") or "{prompt_file}" in command:
                self.problem(
                    f"required: give prompt, prompt_file or title (agent {profile.name!r} "
                    "would be sent an empty prompt)",
                    label,
                    "prompt",
                )
                return

    def _prompt(self, raw: dict[str, Any], label: str) -> str:
        """The task's prompt: ``prompt``, the file ``prompt_file`` names, or its title."""
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
