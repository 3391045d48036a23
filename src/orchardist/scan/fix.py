"""``orchardist scan --fix``: findings become verified fix tasks of a new run.

Findings are grouped by file (default) or by rule; each group is one task, most severe first.
No two tasks edit one file at once: groups by file are disjoint, and a group by rule waits for
every earlier group that shares a file with it (``depends_on``). Each task's ``check`` is
:mod:`orchardist.scan.fixcheck` (its findings gone, no new finding in the files it touched);
its verify commands are the plan's, judged against the baseline like any task's. The run's
plan is written as a file (so ``resume`` works) next to the specs of its checks.

Only findings that a scanner with a command reported can be verified; findings that only an
agent reviewer reported are left open, and said so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..quoting import code_span, inline
from ..specs import Plan
from .findings import level_rank
from .fixcheck import profile_to_json
from .profiles import Format
from .sarif import MergedFinding

MAX_PROMPT_FINDINGS = 50


@dataclass(frozen=True)
class FixGroup:
    """The findings one fix task is asked to fix."""

    task_id: str
    key: str  # the file, or the rule
    findings: tuple[MergedFinding, ...]
    depends_on: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """The files its findings are in."""
        return tuple(sorted({m.finding.path for m in self.findings}))

    @property
    def severity(self) -> int:
        """The rank of its most severe finding."""
        return max(level_rank(m.finding.level) for m in self.findings)


def group_findings(
    merged: Sequence[MergedFinding], by: str, verifiable: set[str]
) -> tuple[list[FixGroup], list[tuple[MergedFinding, str]]]:
    """Fix groups, most severe first, and the findings no task can take (with why)."""
    unfixable = [
        (m, "reported only by an agent scanner: no scanner can verify a fix")
        for m in merged
        if not verifiable.intersection(m.reporters)
    ]
    fixable = [m for m in merged if verifiable.intersection(m.reporters)]
    buckets: dict[str, list[MergedFinding]] = {}
    for m in fixable:
        buckets.setdefault(m.finding.path if by == "file" else m.finding.rule, []).append(m)
    groups = [FixGroup(_task_id(by, key, set()), key, tuple(ms)) for key, ms in buckets.items()]
    groups.sort(key=lambda g: (-g.severity, g.key))
    taken: set[str] = set()
    ordered: list[FixGroup] = []
    for group in groups:
        task_id = _task_id(by, group.key, taken)
        taken.add(task_id)
        shares = tuple(g.task_id for g in ordered if set(g.files) & set(group.files))
        ordered.append(FixGroup(task_id, group.key, group.findings, shares))
    return ordered, unfixable


def _task_id(by: str, key: str, taken: set[str]) -> str:
    """``fix-<key>`` as a valid task id (a git ref name of 64 characters at most), unique."""
    from ..plan.tasks import task_id_problem
    from ..specs import MAX_TASK_ID

    slug = re.sub(r"\.\.+", ".", re.sub(r"[^A-Za-z0-9_.-]+", "-", key)).strip("-.")
    base = "fix-" + (slug or by)
    if len(base) > MAX_TASK_ID - 4 or task_id_problem(base) is not None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        base = f"{base[: MAX_TASK_ID - 13].rstrip('-.')}-{digest}"
    task_id, n = base, 2
    while task_id in taken:
        task_id, n = f"{base}-{n}", n + 1
    return task_id


def fix_prompt(group: FixGroup) -> str:
    """What the fixer is asked."""
    lines = [
        f"Fix these {len(group.findings)} finding(s) reported by static analysis in "
        f"{', '.join(group.files)}.",
        "Change only what is needed. Keep the behaviour and every public function: the tests "
        "must still pass. Do not silence a finding by deleting code, by disabling the rule or "
        "by adding ignore comments. Do not introduce new findings.",
        "",
    ]
    for m in group.findings[:MAX_PROMPT_FINDINGS]:
        # A scanner's words (an agent reviewer's among them) and the repository's lines: each
        # on its item's line, so that none can add a header or a block to the prompt.
        f = m.finding
        lines.append(f"- {inline(f.path)}:{f.start_line} [{inline(f.rule)}, {f.level}] ")
        lines[-1] += inline(f.message)
        if f.source:
            lines.append(f"    {code_span(f.source.splitlines()[0][:200])}")
    if len(group.findings) > MAX_PROMPT_FINDINGS:
        lines.append(f"- … and {len(group.findings) - MAX_PROMPT_FINDINGS} more of the same kind")
    return "\n".join(lines) + "\n"


def write_fix_plan(
    plan: Plan,
    groups: Sequence[FixGroup],
    merged: Sequence[MergedFinding],
    scanners: Sequence[str],
    base_commit: str,
    agent: str,
    candidates: int,
    folder: Path,
) -> Path:
    """The run's plan (YAML) and each task's check spec, written into ``folder``."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    raw = _raw_tables(plan.path)
    run_table = dict(raw.get("run") or {})
    run_table.update(repo=str(plan.repo), base=base_commit, workdir=plan.run.workdir)
    before = _counts([m for m in merged if set(scanners).intersection(m.reporters)])
    tasks = []
    for group in groups:
        spec = {
            "profiles": [profile_to_json(plan.scanners[n]) for n in scanners],
            "workdir": plan.run.workdir,
            "targets": _counts(group.findings),
            "before": before,
        }
        # kept beside the plan for the record; the check carries the spec itself (the state
        # folder lives in the repository's .git, where a confined check sees the attempt's tree)
        (folder / f"{group.task_id}.json").write_text(json.dumps(spec, indent=1), "utf-8")
        task: dict[str, Any] = {
            "id": group.task_id,
            "title": f"Fix {len(group.findings)} finding(s) in {group.key}",
            "prompt": fix_prompt(group),
            "agent": agent,
            "candidates": candidates,
            "check": f"{shlex.quote(sys.executable)} -m orchardist.scan.fixcheck "
            f"--spec {_b64(spec)}",
        }
        if group.depends_on:
            task["depends_on"] = list(group.depends_on)
        tasks.append(task)
    document = {"run": run_table, "agents": raw.get("agents") or {}, "task": tasks}
    path = folder / "plan.yaml"
    path.write_text(
        "# written by orchardist scan --fix\n" + yaml.safe_dump(document, sort_keys=False),
        encoding="utf-8",
    )
    return path


def _b64(spec: Mapping[str, Any]) -> str:
    """``spec`` as compact JSON in base64url: one shell word, no braces."""
    return base64.urlsafe_b64encode(json.dumps(spec, separators=(",", ":")).encode()).decode()


def verifiable_scanners(plan: Plan, names: Sequence[str]) -> list[str]:
    """The scanners (of ``names``) whose re-run can verify a fix: those with a command."""
    return [n for n in names if plan.scanners[n].format is not Format.AGENT]


def fix_folder(state_dir: Path) -> Path:
    """A new folder for one ``--fix`` run's plan and check specs."""
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 1_000_000:06d}"
    return state_dir / "fix" / stamp


def _counts(findings: Sequence[MergedFinding]) -> dict[str, dict[str, int]]:
    per_path: dict[str, dict[str, int]] = {}
    for m in findings:
        base = m.fingerprint.split(":")[0]
        per_path.setdefault(m.finding.path, {}).setdefault(base, 0)
        per_path[m.finding.path][base] += 1
    return per_path


def _raw_tables(path: Path) -> Mapping[str, Any]:
    """The plan file's tables as written (to copy ``[run]`` and ``[agents]``)."""
    import tomllib

    import yaml

    text = path.read_text(encoding="utf-8")
    yaml_file = path.suffix in (".yaml", ".yml")
    data = (yaml.safe_load(text) or {}) if yaml_file else tomllib.loads(text)
    return data if isinstance(data, dict) else {}
