"""Driving ``scan --fix``: the fix run, the scan of its branch, and what is fixed or open."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..plan.loading import load_plan
from ..specs import Plan
from . import fixcheck
from .engine import Scanner, ScanResult
from .findings import level_rank
from .fix import fix_folder, group_findings, verifiable_scanners, write_fix_plan
from .profiles import ScannerProfile
from .sarif import MergedFinding, render, write_whole

MAX_REASONS = 3  # lines of the fix check shown as a task's reason
MAX_REASON_CHARS = 300


class DriveRun(Protocol):
    """Drive a run to its end as ``orchardist run PLAN`` would (its defaults but for these
    options); the exit code. The command line passes its own: it imports this package."""

    def __call__(
        self, ws: Any, plan: Plan, run: Any, *, json: bool, max_parallel: int | None
    ) -> int: ...


def fix_findings(
    args: argparse.Namespace,
    plan: Plan,
    ws: Any,
    scanner: Scanner,
    profiles: Sequence[ScannerProfile],
    before: ScanResult,
    drive: DriveRun,
) -> int:
    """Run fix tasks for ``before``'s findings; report fixed and open; the exit code."""
    from ..runs.start import create_run

    out = sys.stderr if args.json else sys.stdout
    if _incomplete(before):
        return 1
    names = [p.name for p in profiles]
    verifiable = verifiable_scanners(plan, names)
    groups, unfixable = group_findings(before.merged, args.group, set(verifiable))
    run_doc: dict[str, Any] = {"run": None, "tasks": {}}
    after = before
    if groups:
        folder = fix_folder(ws.state_dir)
        plan_path = write_fix_plan(
            plan,
            groups,
            before.merged,
            verifiable,
            before.base_commit,
            args.agent,
            args.candidates,
            folder,
        )
        fix_plan = load_plan(plan_path)
        run = create_run(ws, fix_plan)
        print(
            f"fixing {len(before.merged) - len(unfixable)} finding(s) in {len(groups)} task(s): "
            f"run {run.id}, plan {plan_path}",
            file=out,
        )
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            drive(ws, fix_plan, run, json=args.json, max_parallel=args.max_parallel)
        run_doc = _run_doc(ws, run.id)
        after = scanner.scan(profiles, f"refs/heads/{run_doc['branch']}", plan.run.workdir)
    outcome = _outcome(before, after, groups, unfixable, run_doc)
    if args.output is not None:
        outcome |= _write_logs(args.output, args.format or "sarif", before, after, ws.repo.root)
    failing = [f for f in outcome["open"] if level_rank(f["level"]) >= level_rank(args.fail_on)]
    code = 1 if failing or after.failed or run_doc.get("state") not in (None, "done") else 0
    outcome["exit_code"] = code
    if args.json:
        print(json.dumps(outcome, indent=2))
    else:
        _print_outcome(outcome)
    return code


def _incomplete(before: ScanResult) -> bool:
    """Whether a scanner failed (said on stderr): its findings are incomplete, fix none."""
    for report in before.failed:
        print(f"  {report.name}: FAILED: {report.error}", file=sys.stderr)
    if before.failed:
        print("not fixing: a scanner failed, so the findings are incomplete", file=sys.stderr)
    return bool(before.failed)


def _run_doc(ws: Any, run_id: str) -> dict[str, Any]:
    """The fix run as it ended: id, branch, state and its tasks."""
    run = ws.resolve_run(run_id)
    tasks = {t.task_id: t for t in ws.store.tasks(run.id)}
    checks = {}
    for task_id in tasks:
        said = _check_says(ws.store.attempts(run.id, task_id))
        if said:
            checks[task_id] = said
    return {
        "run": run.id,
        "branch": run.branch,
        "state": run.state.value,
        "tasks": tasks,
        "checks": checks,
    }


def _check_says(attempts: Sequence[Any]) -> str | None:
    """What the fix check said about the latest attempt it judged (``still there: …``, ``new
    finding: …``, or ``could not check: …``), for a reason a user can act on; None if nothing."""
    kinds = (fixcheck.STILL_THERE, fixcheck.NEW_FINDING, fixcheck.COULD_NOT_CHECK)
    for attempt in reversed(attempts):
        try:
            text = Path(attempt.log_path).read_text(encoding="utf-8", errors="replace")
        except (OSError, TypeError):
            continue
        said = [
            line.removeprefix(fixcheck.PREFIX).strip()
            for line in text.splitlines()
            if line.startswith(fixcheck.PREFIX)
        ]
        lines = [_short(line) for line in said if line.startswith(kinds)]
        if lines:
            shown = "; ".join(lines[:MAX_REASONS])
            more = len(lines) - MAX_REASONS
            return shown + (f"; and {more} more" if more > 0 else "")
    return None


def _short(line: str) -> str:
    """``still there: inv/money.py:3 B404`` without the message (the finding has it); a line
    saying why the check could not run, whole (up to a limit)."""
    kind, _, rest = line.partition(": ")
    if kind == fixcheck.COULD_NOT_CHECK:
        return f"the check could not run: {rest[:MAX_REASON_CHARS]}"
    return f"{kind}: {' '.join(rest.split()[:2])}"


def _write_logs(
    output: Path, fmt: str, before: ScanResult, after: ScanResult, root: Path
) -> dict[str, str]:
    """The findings before the fixes next to ``output`` (``NAME.before.EXT``), those after in
    ``output``; where they went."""
    before_path = output.with_name(f"{output.stem}.before{output.suffix}")
    write_whole(before_path, render(before, fmt, root))
    write_whole(output, render(after, fmt, root))
    return {"before_log": str(before_path), "after_log": str(output)}


def _outcome(
    before: ScanResult,
    after: ScanResult,
    groups: Sequence[Any],
    unfixable: Sequence[tuple[MergedFinding, str]],
    run_doc: dict[str, Any],
) -> dict[str, Any]:
    """Which findings were fixed (and by which commit), which are open (and why)."""
    task_of = {m.fingerprint: g.task_id for g in groups for m in g.findings}
    why_not = {m.fingerprint: why for m, why in unfixable}
    tasks = run_doc["tasks"]
    remaining = {m.fingerprint for m in after.merged}
    fixed = []
    for m in before.merged:
        if m.fingerprint in remaining:
            continue
        task = tasks.get(task_of.get(m.fingerprint, ""))
        fixed.append(
            {
                **_brief(m),
                "task": task_of.get(m.fingerprint),
                "commit": task.commit if task is not None else None,
            }
        )
    known = {m.fingerprint for m in before.merged}
    still = []
    for m in after.merged:
        if m.fingerprint not in known:
            why = "new: appeared after the fixes"
        elif m.fingerprint in why_not:
            why = why_not[m.fingerprint]
        else:
            task = tasks.get(task_of.get(m.fingerprint, ""))
            if task is None:
                why = "no fix task ran"
            elif task.state.value == "done":
                why = f"{task.task_id} landed but the finding is still reported"
            else:
                said = run_doc.get("checks", {}).get(task.task_id)
                why = f"{task.task_id} {task.state.value}: " + (
                    said or task.reason or "no candidate passed"
                )
        still.append({**_brief(m), "task": task_of.get(m.fingerprint), "why": why})
    return {
        "run": run_doc.get("run"),
        "branch": run_doc.get("branch"),
        "state": run_doc.get("state"),
        "before": len(before.merged),
        "after": len(after.merged),
        "fixed": fixed,
        "open": still,
    }


def _brief(m: MergedFinding) -> dict[str, Any]:
    f = m.finding
    return {
        "fingerprint": m.fingerprint,
        "rule": f.rule,
        "path": f.path,
        "line": f.start_line,
        "level": f.level,
        "message": f.message,
    }


def _print_outcome(outcome: dict[str, Any]) -> None:
    head = f"fix run {outcome['run']} ({outcome['state']})" if outcome["run"] else "nothing to fix"
    print(
        f"{head}: {len(outcome['fixed'])} of {outcome['before']} finding(s) fixed, "
        f"{len(outcome['open'])} open"
    )
    for f in outcome["fixed"]:
        commit = (f["commit"] or "")[:12]
        print(f"  fixed  {f['path']}:{f['line']} {f['rule']}  by {f['task']} {commit}")
    for f in outcome["open"]:
        print(f"  open   {f['path']}:{f['line']} {f['rule']}  ({f['why']})")
    for key in ("before_log", "after_log"):
        if key in outcome:
            print(f"  {key.replace('_', ' ')}: {outcome[key]}")


__all__ = ["fix_findings"]
