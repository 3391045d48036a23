"""What the task page adds to the status document: the transcript and the tests of each
attempt, the winner first, and a reason a person can read (the finding, not the command line).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..safeio import read_tail
from ..state.store import Store
from ..verify.reports import load_reports
from .transcript import transcript

TRANSCRIPT_BYTES = 1024 * 1024  # the log's end: a transcript is read from it

# The reasons verify gives (verify/verifier.py, verify/oracle.py) name the command that found a
# failure; the command is an internal detail (a long line, a path under orchardist's folders),
# the failing tests are the finding:
#   [kind: ]verify command failed (N): COMMAND[: WHY]      WHY: "2 test(s) newly failing: a, b", ...
#   [kind: ]check failed (N): COMMAND
#   [kind: ]check: check still fails (exit N)[; failing: a, b]: COMMAND
_KIND = r"(?P<kind>[a-z_]+: )?"
_VERIFY = re.compile(
    _KIND + r"(?P<head>verify command (?:failed \(-?\d+\)|timed out)): (?P<rest>.*)$"
)
_WHY = re.compile(r": (?P<why>(?:\d+ test\(s\) |exit -?\d+|no test report).*)$")
_CHECK = re.compile(
    _KIND + r"(?P<head>check failed \(-?\d+\)|check: check (?:still fails \(exit -?\d+\)"
    r"(?:; failing: .+?)?|timed out|does not reproduce))(?:: |$)"
)


def finding(reason: str | None) -> str:
    """A task's reason as a person reads it: what failed and the failing tests verify named,
    without the command that found it."""
    text = reason or ""
    verify = _VERIFY.match(text)
    if verify is not None:
        why = _WHY.search(verify["rest"])
        found = f"{verify['head']}; {why['why']}" if why else verify["head"]
        return (verify["kind"] or "") + found
    check = _CHECK.match(text)
    if check is not None:
        return (check["kind"] or "") + check["head"]
    return text


def winner_first(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The merged attempt (the winner) before the others, the others by number."""
    return sorted(attempts, key=lambda a: (a["state"] != "merged", a["n"]))


def attempt_extras(log_path: str | None) -> dict[str, Any]:
    """An attempt's transcript (from its log) and per-test verify results."""
    if not log_path:
        return {"transcript": [], "tests": []}
    tail = read_tail(Path(log_path), 0, TRANSCRIPT_BYTES, last=True)
    text = tail.text() if tail.found else ""
    return {"transcript": transcript(text), "tests": load_reports(Path(log_path))}


def review_history(store: Store, run_id: str, task_id: str) -> list[dict[str, Any]]:
    """The task's review decisions, oldest first: who decided what on which attempt, and
    whether the run has acted on it yet (until then the page says it waits for the run)."""
    return [
        {
            "attempt": d.attempt,
            "verdict": d.decision.verdict.value,
            "text": d.decision.text,
            "lines": [{"path": c.path, "line": c.line, "text": c.text} for c in d.decision.lines],
            "who": d.decision.who,
            "decided_at": d.decided_at,
            "applied_at": d.applied_at,
        }
        for d in store.decisions(run_id, task_id)
    ]
