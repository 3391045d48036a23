"""The ``[run]`` table of a plan: each key it may hold, checked, and the defaults for the others.

A mix-in of the plan validator (:mod:`.loading`), as :mod:`.tasks` is for the task tables: the
checks of single values are :class:`.fields.Fields`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..confine.isolation import Policy
from ..confine.runenv import FIELD, environment_problems
from ..placeholders import fill, placeholder_problems
from ..specs import Reverify, RunConfig
from .fields import Fields

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
    "reverify",
    "max_patch_mb",
    "guard_checkout",
    "sandbox",
    "isolation",
    "network",
    "workspace",
    "executor",
    "ray_address",
    "environment",
    "notify",
    "notify_timeout",
    "review",
}


class RunChecks(Fields):
    """The checks of ``[run]``."""

    def _run(self, raw: dict[str, Any], repo: Path | None) -> RunConfig:
        """``[run]``: each key given checked, the defaults for the others."""
        self._unknown_keys(raw, RUN_KEYS, "run")
        default_workdir = "."
        if repo is not None and self.path.parent.is_relative_to(repo):
            default_workdir = self.path.parent.relative_to(repo).as_posix() or "."
        cfg = RunConfig(workdir=default_workdir)
        values = {
            **self._run_limits(raw),
            **self._run_regression(raw),
            **self._run_where(raw, repo),
        }
        values = {k: v for k, v in values.items() if v is not None}
        return RunConfig(**{**cfg.__dict__, **values})

    def _run_limits(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``[run]``'s branch, parallelism, verify commands, budgets and candidates."""
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
        if "notify" in raw:
            values["notify"] = self._notify(raw["notify"], "run.notify")
        if "notify_timeout" in raw:
            values["notify_timeout_s"] = self._duration(raw["notify_timeout"], "run.notify_timeout")
        if "review" in raw:
            values["review"] = self._review(raw["review"], "run.review")
        return values

    def _run_regression(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``[run] regression`` commands (no placeholders: they run for no one task)."""
        values: dict[str, Any] = {}
        if "regression" in raw:
            regression = self._commands(raw["regression"], "run.regression") or ()
            filled = []
            for command in regression:  # they run on the run branch, for no one task
                problems = placeholder_problems(command, (), "regression")
                for message in problems:
                    self.problem(message, fld="run.regression")
                filled.append(command if problems else fill(command, {}))
            values["regression"] = tuple(filled)
        if "regression_every" in raw:
            every = self._positive_int(raw["regression_every"], "run.regression_every")
            values["regression_every"] = every
        if "reverify" in raw:
            values["reverify"] = self._reverify(raw["reverify"])
        return values

    def _reverify(self, raw: object) -> Reverify | None:
        """``[run] reverify``: "always" or "overlap"."""
        if isinstance(raw, str) and raw in {r.value for r in Reverify}:
            return Reverify(raw)
        names = ", ".join(f'"{r.value}"' for r in Reverify)
        self.problem(f"expected one of {names}", fld="run.reverify")
        return None

    def _run_where(self, raw: dict[str, Any], repo: Path | None) -> dict[str, Any]:
        """Where and how ``[run]``'s attempts run: workspace, executor, isolation, flags."""
        values: dict[str, Any] = {}
        if "max_patch_mb" in raw:
            values["max_patch_mb"] = self._money(raw["max_patch_mb"], "run.max_patch_mb")
        if "workspace" in raw:
            values["workspace"] = self._workspace(raw["workspace"], repo)
        if "environment" in raw:
            names = self._str_list(raw["environment"], FIELD)
            values["environment"], problems = environment_problems(names, repo)
            for message in problems:
                self.problem(message, fld=FIELD)
        if "executor" in raw:
            values["executor"] = self._executor(raw["executor"])
        if "ray_address" in raw:
            values["ray_address"] = self._ray_address(raw["ray_address"])
        if "isolation" in raw:
            values["isolation"] = self._isolation(raw["isolation"])
        elif raw.get("sandbox") is False:
            values["isolation"] = Policy.OFF
        for flag in ("guard_checkout", "sandbox", "network"):
            if flag in raw:
                values[flag] = self._flag(raw[flag], None, f"run.{flag}")
        return values

    def _ray_address(self, raw: object) -> str | None:
        """``[run] ray_address``: host:port or auto."""
        address = self._str(raw, "run.ray_address")
        if address is not None and not address.strip():
            self.problem(
                "must not be empty (auto finds a cluster started here)", fld="run.ray_address"
            )
        return address.strip() if address else None

    def _executor(self, raw: object) -> str | None:
        """``[run] executor``: a name in the executor table, imported only for a plan that names
        one (a plan that does not, the most, is validated without the executors' seam)."""
        from ..executors import EXECUTORS

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
