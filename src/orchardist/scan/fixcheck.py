"""``python -m orchardist.scan.fixcheck SPEC``: did a fix remove its findings and add none?

The ``check`` of a fix task (see :mod:`orchardist.scan.fix`). It runs in the candidate's tree
(the task's workdir), re-runs the scanners that reported the task's findings on the files the
task is about and on every file the candidate changed, and compares with the scan of the base:

- each targeted finding must be gone (for identical findings: fewer by as many as targeted);
- no file it touched may have a finding the base did not have.

Exit 0 when both hold; 1, saying which finding is still there or new, otherwise. On the base
itself the targeted findings are there, so the check fails there and must pass on the
candidate, as every ``check`` does.

SPEC is a JSON file: ``plan`` (the plan file with the scanners), ``scanners`` (names),
``workdir``, ``targets`` and ``before`` (``{path: {fingerprint: count}}``, paths relative to the
repository; fingerprints without their occurrence suffix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..procs import CancelToken
from .findings import ScanJobError
from .globs import select_files
from .profiles import ScannerProfile, Scope
from .runner import run_scanner, scanner_env
from .sarif import MergedFinding, ScannerReport, merge
from .trees import with_source


def counts(merged: Sequence[MergedFinding]) -> dict[str, Counter[str]]:
    """Per path, how many deduplicated findings share each base fingerprint."""
    per_path: dict[str, Counter[str]] = {}
    for m in merged:
        per_path.setdefault(m.finding.path, Counter())[m.fingerprint.split(":")[0]] += 1
    return per_path


def changed_paths(root: Path) -> list[str]:
    """Paths (relative to ``root``) the candidate changed, added or removed against HEAD."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> list[str]:
        out = subprocess.run(
            ["git", *args], cwd=root, env=env, capture_output=True, check=True
        ).stdout
        return [p for p in out.decode(errors="surrogateescape").split("\0") if p]

    return sorted(
        {
            *git("diff", "--name-only", "-z", "HEAD"),
            *git("ls-files", "--others", "--exclude-standard", "-z"),
        }
    )


def rescan(
    profiles: Sequence[ScannerProfile], root: Path, workdir: str, paths: Sequence[str]
) -> list[MergedFinding]:
    """The deduplicated findings of ``profiles`` about ``paths`` (relative to the repository)."""
    prefix = "" if workdir.strip("/") in ("", ".") else workdir.strip("/") + "/"
    cwd = root / (prefix or ".")
    local = {p[len(prefix) :]: "" for p in paths if p.startswith(prefix) and (root / p).is_file()}
    reports: list[ScannerReport] = []
    with tempfile.TemporaryDirectory(prefix="fixcheck-") as tmp:
        for n, profile in enumerate(profiles):
            files = select_files(local, profile.include, profile.exclude)
            if profile.scope is Scope.FILE and not files:
                continue
            if profile.scope is Scope.TREE:
                files = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*") if p.is_file())
                files = select_files(dict.fromkeys(files, ""), profile.include, profile.exclude)
            folder = Path(tmp) / str(n)
            env = scanner_env(profile, folder, os.environ)
            results, _ = run_scanner(profile, files, cwd, folder, env, CancelToken(), None)
            found = [with_source(f, cwd) for f in results if f.path in local]
            found = [replace(f, path=prefix + f.path) for f in found]
            reports.append(ScannerReport(profile.name, tuple(found)))
    return merge(reports)


def judge(
    targets: Mapping[str, Mapping[str, int]],
    before: Mapping[str, Mapping[str, int]],
    after: Sequence[MergedFinding],
    touched: Sequence[str],
) -> list[str]:
    """Why the fix is not good, one line per problem; empty when it is."""
    now = counts(after)
    examples = {(m.finding.path, m.fingerprint.split(":")[0]): m.finding for m in after}
    problems = []
    for path, wanted in sorted(targets.items()):
        for fingerprint, n in sorted(wanted.items()):
            allowed = before.get(path, {}).get(fingerprint, n) - n
            left = now.get(path, Counter())[fingerprint]
            if left > allowed:
                f = examples[(path, fingerprint)]
                problems.append(f"still there: {path}:{f.start_line} {f.rule} {f.message}")
    for path in sorted(set(touched) | set(targets)):
        for fingerprint, n in sorted(now.get(path, Counter()).items()):
            if fingerprint in targets.get(path, {}):
                continue
            if n > before.get(path, {}).get(fingerprint, 0):
                f = examples[(path, fingerprint)]
                problems.append(f"new finding: {path}:{f.start_line} {f.rule} {f.message}")
    return problems


def main(argv: Sequence[str]) -> int:
    """Check the candidate in the current directory against the spec; the exit code."""
    from ..plan import load_plan

    if len(argv) != 1:
        print("usage: python -m orchardist.scan.fixcheck SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    plan = load_plan(spec["plan"], require_tasks=False)
    profiles = [plan.scanners[name] for name in spec["scanners"] if name in plan.scanners]
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    )
    root = Path(top.stdout.strip())
    touched = changed_paths(root)
    try:
        after = rescan(profiles, root, spec["workdir"], sorted({*touched, *spec["targets"]}))
    except ScanJobError as exc:
        print(f"fixcheck: a scanner failed: {exc}")
        return 1
    problems = judge(spec["targets"], spec["before"], after, touched)
    for line in problems:
        print(f"fixcheck: {line}")
    if not problems:
        total = sum(sum(v.values()) for v in spec["targets"].values())
        print(
            f"fixcheck: {total} finding(s) gone, no new finding in {len(touched)} changed file(s)"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
