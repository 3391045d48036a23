"""``python -m orchardist.scan.fixcheck SPEC``: did a fix remove its findings and add none?

The ``check`` of a fix task (see :mod:`orchardist.scan.fix`). It runs in the candidate's tree
(the task's workdir), re-runs the scanners that reported the task's findings on the files the
task is about and on every file the candidate changed, and compares with the scan of the base:

- each targeted finding must be gone (for identical findings: fewer by as many as targeted);
- no file it touched may have a finding the base did not have.

Exit 0 when both hold; 1, saying which finding is still there or new (``fixcheck: still
there: inv/money.py:3 B404 …``), otherwise; 2 (``fixcheck: could not check: …``) when the check
itself could not run (a scanner failed, the spec is unreadable), which is no verdict on the fix.
On the base itself the targeted findings are there, so the check fails there and must pass on
the candidate, as every ``check`` does.

The scanners run in a throwaway copy of the candidate's files, so their caches never reach the
candidate's tree. The check runs where the candidate's commands run (inside the sandbox): it
reads nothing but the spec and the tree, so the spec carries the scanner profiles themselves.

SPEC is a JSON file: ``profiles`` (the scanner profiles, :func:`profile_to_json`),
``workdir``, ``targets`` and ``before`` (``{path: {fingerprint: count}}``, paths relative to the
repository; fingerprints without their occurrence suffix).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..confine.procs import CancelToken
from .findings import ScanJobError
from .globs import select_files
from .profiles import Format, ScannerProfile, Scope
from .runner import run_scanner, scanner_env
from .sarif import MergedFinding, ScannerReport, merge
from .trees import with_sources

FAILED, CANNOT_CHECK = 1, 2  # exit codes: the fix is not good; the check could not run
PREFIX = "fixcheck: "  # every line the check prints for a reader starts so
STILL_THERE, NEW_FINDING, COULD_NOT_CHECK = "still there", "new finding", "could not check"


def profile_to_json(profile: ScannerProfile) -> dict[str, Any]:
    """A profile as the spec holds it (all :func:`profile_from_json` needs)."""
    return {**profile.cache_identity(), "name": profile.name, "timeout_s": profile.timeout_s}


def profile_from_json(data: Mapping[str, Any]) -> ScannerProfile:
    """The profile :func:`profile_to_json` wrote."""
    return ScannerProfile(
        name=data["name"],
        format=Format(data["format"]),
        scope=Scope(data["scope"]),
        command=data["command"],
        include=tuple(data["include"]),
        exclude=tuple(data["exclude"]),
        config=tuple(data["config"]),
        version=data["version"],
        timeout_s=float(data["timeout_s"]),
        env=tuple(data["env"]),
        fields=dict(data["fields"]),
        agent=data["agent"],
        prompt=data["prompt"],
    )


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
    """The deduplicated findings of ``profiles`` about ``paths`` (relative to the repository),
    each scanner run in its own scratch copy of what it reads (as in a scan: a file-scoped
    scanner's files and ``config`` files, else the whole tree)."""
    prefix = "" if workdir.strip("/") in ("", ".") else workdir.strip("/") + "/"
    local = {p[len(prefix) :]: "" for p in paths if p.startswith(prefix) and (root / p).is_file()}
    present = {p[len(prefix) :]: "" for p in _candidate_files(root) if p.startswith(prefix)}
    reports: list[ScannerReport] = []
    with tempfile.TemporaryDirectory(prefix="fixcheck-") as tmp:
        for n, profile in enumerate(profiles):
            files = select_files(local, profile.include, profile.exclude)
            if profile.scope is Scope.TREE:
                needed = list(present)
                files = select_files(present, profile.include, profile.exclude)
            elif files:
                needed = [*files, *select_files(present, profile.config, ())]
            else:
                continue
            cwd = _copy(root / (prefix or "."), needed, Path(tmp) / f"{n}.tree")
            folder = Path(tmp) / str(n)
            env = scanner_env(profile, folder, os.environ)
            results, _ = run_scanner(profile, files, cwd, folder, env, CancelToken(), None)
            found = with_sources((f for f in results if f.path in local), cwd)
            found = [replace(f, path=prefix + f.path) for f in found]
            reports.append(ScannerReport(profile.name, tuple(found)))
    return merge(reports)


def _candidate_files(root: Path) -> list[str]:
    """The candidate's files (tracked, and new ones not ignored), relative to ``root``."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        capture_output=True,
        check=True,
    ).stdout
    names = {p for p in out.decode(errors="surrogateescape").split("\0") if p}
    return sorted(p for p in names if (root / p).is_symlink() or (root / p).is_file())


def _copy(source: Path, paths: Sequence[str], to: Path) -> Path:
    """A scratch copy of ``paths`` of ``source`` at ``to`` (its writes go nowhere)."""
    to.mkdir(parents=True, exist_ok=True)
    for rel in paths:
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, to / rel, follow_symlinks=False)
    return to


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
                problems.append(f"{STILL_THERE}: {path}:{f.start_line} {f.rule} {f.message}")
    for path in sorted(set(touched) | set(targets)):
        for fingerprint, n in sorted(now.get(path, Counter()).items()):
            if fingerprint in targets.get(path, {}):
                continue
            if n > before.get(path, {}).get(fingerprint, 0):
                f = examples[(path, fingerprint)]
                problems.append(f"{NEW_FINDING}: {path}:{f.start_line} {f.rule} {f.message}")
    return problems


def main(argv: Sequence[str]) -> int:
    """Check the candidate in the current directory against the spec; the exit code.

    The spec is a file, or the JSON itself, base64url, after ``--spec`` (no braces for a
    placeholder to read): inside the namespaces the repository's own path shows the attempt's
    tree, so a spec in the state folder under its ``.git`` cannot be read there.
    """
    if len(argv) == 2 and argv[0] == "--spec":
        text = base64.urlsafe_b64decode(argv[1]).decode("utf-8")
    elif len(argv) == 1:
        text = ""
    else:
        print("usage: python -m orchardist.scan.fixcheck SPEC.json | --spec B64", file=sys.stderr)
        return CANNOT_CHECK
    try:
        return _check(json.loads(text or Path(argv[0]).read_text(encoding="utf-8")))
    except ScanJobError as exc:
        print(f"{PREFIX}{COULD_NOT_CHECK}: a scanner failed: {exc}")
    except (OSError, ValueError, KeyError, TypeError, subprocess.CalledProcessError) as exc:
        print(f"{PREFIX}{COULD_NOT_CHECK}: {type(exc).__name__}: {exc}")
    return CANNOT_CHECK


def _check(spec: dict[str, Any]) -> int:
    """The check proper: re-scan, judge, say why; 0 or FAILED."""
    profiles = [profile_from_json(p) for p in spec["profiles"]]
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    )
    root = Path(top.stdout.strip())
    touched = changed_paths(root)
    after = rescan(profiles, root, spec["workdir"], sorted({*touched, *spec["targets"]}))
    problems = judge(spec["targets"], spec["before"], after, touched)
    for line in problems:
        print(f"{PREFIX}{line}")
    if not problems:
        total = sum(sum(v.values()) for v in spec["targets"].values())
        print(f"{PREFIX}{total} finding(s) gone, no new finding in {len(touched)} changed file(s)")
    return FAILED if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
