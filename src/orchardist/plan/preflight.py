"""Checks of a valid plan against this machine and repository, before any run exists.

``validate`` and ``run`` both call :func:`preflight`, so ``validate`` never says ok where
``run`` then refuses. Problems stop a run (exit 2, nothing created); warnings are printed and
the run goes on. Only cheap, read-only checks: no agent or verify command is started.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..confine.isolation import Mode, choose
from ..errors import IsolationError, Problem
from ..git.repo import Repo
from ..git.which import which
from ..specs import DEFAULT_BRANCH, Plan

BASE = "run.base"
SAMPLE_RUN_ID = "20260101-000000-0000"  # stands for {run} when a branch pattern is checked


@dataclass(frozen=True)
class Preflight:
    """What the checks found: ``problems`` refuse the run, ``warnings`` only inform."""

    problems: tuple[Problem, ...]
    warnings: tuple[str, ...]


def preflight(
    plan: Plan, environ: Mapping[str, str] | None = None, repo: Repo | None = None
) -> Preflight:
    """Check the plan's repository, base, branch and agent CLIs; note what the user may miss.

    ``repo``: the plan's repository already set up with ``resolve=plan.run.base`` (where the
    plan's loader found it: ``validate`` checks with it, ``run`` then runs with it); else one
    is set up to read only.
    """
    if repo is None:
        # it only reads, lists no untracked file, and asks for the base with the repository's
        # facts: each git process is ~3 ms of validate's
        repo = Repo(plan.repo, identity=False, resolve=plan.run.base, untracked=False)
    # git status runs beside the checks (~3 ms of validate's otherwise), read where its
    # warning is said, and waited for whatever they raise
    with repo.start_git("status", "--porcelain", "--untracked-files=no") as status:
        problems, warnings = _checks(plan, environ, repo)
        changes = _dirty(status)
    if changes:
        warnings.append(
            f"your checkout has {changes} uncommitted change(s); the run starts from "
            f"{plan.run.base} and does not include them"
        )
    return Preflight(tuple(problems), tuple(warnings))


def _checks(
    plan: Plan, environ: Mapping[str, str] | None, repo: Repo
) -> tuple[list[Problem], list[str]]:
    """Every check but the checkout's changes: the problems and warnings found."""
    shown = str(plan.path)
    problems: list[Problem] = []
    warnings: list[str] = []
    base = repo.commit_of(plan.run.base)
    if base is None and plan.run.base == "HEAD":
        problems.append(Problem(shown, f"{repo.root} has no commits yet", None, BASE))
    elif base is None:
        problems.append(
            Problem(
                shown, f"{plan.run.base!r} does not name a commit in {repo.root}", None, "run.base"
            )
        )
    problems += _branch_problems(repo, plan, shown)
    problems += _missing_workdirs(repo, plan, base, shown, warnings)
    problems += _missing_clis(plan, shown, environ)
    problems += _unseen_commands(plan, repo, shown, environ, warnings)
    unverified = [
        t.id for t in plan.tasks if not t.verify and t.check is None and not t.auto_verify
    ]
    if len(unverified) == len(plan.tasks):
        warnings.append(
            "no task has a verify command or a check: whatever the agents produce is merged "
            "unchecked (set [run] verify)"
        )
    return problems, warnings


def _branch_problems(repo: Repo, plan: Plan, shown: str) -> list[Problem]:
    branch = plan.run.branch.replace("{run}", SAMPLE_RUN_ID)
    # the default pattern is a valid name whatever the run's id: git is asked of the others
    if plan.run.branch != DEFAULT_BRANCH and not _valid_branch(repo, branch):
        return [
            Problem(shown, f"{plan.run.branch!r} is not a valid branch name", None, "run.branch")
        ]
    if "{run}" not in plan.run.branch and repo.try_rev_parse(f"refs/heads/{branch}") is not None:
        return [Problem(shown, f"branch {branch!r} already exists", None, "run.branch")]
    return []


def _valid_branch(repo: Repo, name: str) -> bool:
    return repo.run_git("check-ref-format", "--branch", name).returncode == 0


def _missing_workdirs(
    repo: Repo, plan: Plan, base: str | None, shown: str, warnings: list[str]
) -> list[Problem]:
    """Workdirs that are no folder at the ``base`` commit: each attempt would fail in ``cd``. A
    problem for a task that depends on nothing; a warning for one whose dependencies may
    create it."""
    wanted = sorted({t.workdir for t in plan.tasks if os.path.normpath(t.workdir) != "."})
    if base is None or not wanted:
        return []
    lines = "".join(f"{base}:{os.path.normpath(w)}\n" for w in wanted)
    found = repo.run_git("cat-file", "--batch-check=%(objecttype)", input=lines).stdout.splitlines()
    missing = {w for w, kind in zip(wanted, found, strict=False) if kind != "tree"}
    problems: list[Problem] = []
    for where in sorted(missing):
        said = f"{where!r} is not a folder in {plan.run.base} of {repo.root}"
        tasks = [t for t in plan.tasks if t.workdir == where]
        if where == plan.run.workdir and not all(t.depends_on for t in tasks):
            problems.append(Problem(shown, said, None, "run.workdir"))
            continue
        for task in tasks:
            if task.depends_on:
                warnings.append(
                    f"task {task.id!r}: workdir: {said}; a task it depends on must create it"
                )
            else:
                problems.append(Problem(shown, said, task.id, "workdir"))
    return problems


def _missing_clis(plan: Plan, shown: str, environ: Mapping[str, str] | None) -> list[Problem]:
    """Profiles the plan uses whose executable is not on PATH (checked before paying anyone)."""
    from ..agents import agent_class

    path = None if environ is None else environ.get("PATH")
    used = {name for t in plan.tasks for name in (t.agent, *t.agents)}
    used |= {p.fallback for n, p in plan.agents.items() if n in used and p.fallback}
    problems = []
    for name in sorted(used):
        profile = plan.agents[name]
        cls: Any = agent_class(profile.kind)
        if not hasattr(cls, "needs"):
            continue
        executable = cls.needs(profile.options).executable
        if executable and which(executable, path=path) is None:
            problems.append(
                Problem(
                    shown,
                    f"`{executable}` not found on PATH (install it, or set command = ...; "
                    "`orchardist doctor` checks the rest)",
                    None,
                    f"agents.{name}",
                )
            )
    return problems


def _unseen_commands(
    plan: Plan, repo: Repo, shown: str, environ: Mapping[str, str] | None, warnings: list[str]
) -> list[Problem]:
    """Profiles whose command (or a file it names) attempts could not see in their isolation:
    each attempt would fail at once (see confine/exes.py); a warning for each file beneath
    /tmp a verify command names, which it would not find. Looked at as namespaces would show
    them; whether the run gets namespaces (a bwrap start) is asked only when something is
    found."""
    from ..agents import command_words
    from ..confine.confinement import for_plan
    from ..confine.exes import shell_words

    if plan.run.executor != "local":
        return []
    used = plan.used_agents()
    words = {name: command_words(p) for name, p in plan.agents.items() if name in used}
    verify = {(t.id, c): tuple(shell_words(c)) for t in plan.tasks for c in t.verify}
    confinement = for_plan(plan, environ, Mode.NAMESPACES, repo)
    if confinement is None:
        return []
    problems = [
        Problem(shown, message, None, f"agents.{name}.command")
        for name in sorted(words)
        for message in confinement.refusals(words[name])
    ]
    unseen = [
        (task, path) for (task, _), said in verify.items() for path in confinement.unseen(said)
    ]
    if not (problems or unseen) or not _namespaces(plan):
        return []
    warnings += [
        f"task {task!r}: verify: {path} is beneath /tmp, which verify commands do not see "
        "(their /tmp is their own): move it, or list its folder in ORCHARDIST_SHARE_READONLY"
        for task, path in unseen
    ]
    return problems


def _namespaces(plan: Plan) -> bool:
    """Whether a run of ``plan`` gets namespaces (False too where it would refuse to run)."""
    try:
        return choose(plan.run.isolation) is Mode.NAMESPACES
    except IsolationError:
        return False


def _dirty(status: subprocess.Popen[str]) -> int:
    """How many tracked paths differ from HEAD (untracked ones, often the plan, do not count),
    as the ``git status --porcelain`` that ``status`` runs tells."""
    out, _ = status.communicate()
    return len(out.splitlines()) if status.returncode == 0 else 0
