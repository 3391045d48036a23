"""The memo a full scan leaves for :mod:`.hit`: the scan as a cache hit would render it.

After a scan that used the cache and did not fail, the same scan of the same commit is
answered whole from the cache: every scanner's entries are there (those it just wrote). This
module renders that answer once, as the full scan would (its reports counted as hits: no miss,
no process), and stores it in the scan cache under :func:`.hit.where_key`, with what
:mod:`.hit` checks before trusting it. One memo per plan and options: the next scan of another
commit replaces it, so memos take no more room as commits go by.
"""

from __future__ import annotations

import hashlib
import io
import json
import marshal
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..config import CONFIG_NAME, tell_ignored, user_config
from ..git.repo import Repo
from ..specs import Plan
from ..state import scancache
from .engine import Scanner, ScanResult
from .findings import level_rank
from .hit import MEMO_SCHEMA, code_stamp, file_stamp, where_key
from .keys import MAX_CACHE_ENTRIES
from .profiles import ScannerProfile
from .sarif import Rendering, summary, summary_text

if TYPE_CHECKING:  # a plain scan's options are read without argparse (scan.cli.plain_scan)
    import argparse


def remember(
    args: argparse.Namespace,
    plan: Plan,
    repo: Repo,
    scanner: Scanner,
    profiles: Sequence[ScannerProfile],
    rendering: Rendering,
) -> None:
    """Store the memo of this scan (``rendering``'s result), when a later one can be answered
    by it."""
    result: ScanResult = rendering.result
    if not _memorable(args, scanner, profiles, result):
        return
    plan_bytes = plan.path.read_bytes()
    if hashlib.sha256(plan_bytes).hexdigest() != plan.digest:  # changed since it was read
        return
    hit = ScanResult(
        result.base_commit,
        tuple(replace(r, hits=r.hits + r.misses, misses=0, invocations=0) for r in result.reports),
        result.merged,
        result.scan_id,
    )
    base = args.base or plan.run.base
    same = (MEMO_SCHEMA, code_stamp(), plan_bytes, os.path.realpath(repo.root), base)
    config_files = (user_config(), plan.repo / CONFIG_NAME)
    memo: dict[str, Any] = {
        "same": (*same, hit.base_commit),
        "env": {name: os.environ.get(name) for name in _env_names(profiles)},
        "stamps": _stamps(profiles),
        "files": [[str(p), file_stamp(str(p))] for p in config_files],
        "keys": list(dict.fromkeys(scanner.keys_used)),
        "events": _events(hit),
        **_outputs(hit, plan, rendering),
    }
    key = where_key(str(plan.path), args.scanner, args.base)
    row = (key, "", marshal.dumps(memo))
    scancache.put(scanner.store, [row], scanner.clock(), MAX_CACHE_ENTRIES)


def _outputs(hit: ScanResult, plan: Plan, rendering: Rendering) -> dict[str, Any]:
    """What a scan answered from the cache prints and writes, rendered as the full scan does."""
    document = summary(hit, 0, None)
    ignored = io.StringIO()
    tell_ignored(plan.ignored, ignored)
    plain = summary_text(hit, False)
    levels = document["levels"]
    return {
        "findings": len(hit.merged),
        "ignored": ignored.getvalue(),
        "sarif": rendering.document("sarif", hit.reports),
        "table": rendering.document("table"),
        "results": rendering.findings(),
        "levels": _compact(levels),
        "scanners": _compact(document["scanners"]),
        "failing": {  # findings at or above each --fail-on
            fail_on: sum(
                n for level, n in levels.items() if level_rank(level) >= level_rank(fail_on)
            )
            for fail_on in ("error", "warning", "note")
        },
        "summary": plain,
        "stats": summary_text(hit, True)[len(plain) :],
    }


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _memorable(
    args: argparse.Namespace,
    scanner: Scanner,
    profiles: Sequence[ScannerProfile],
    result: ScanResult,
) -> bool:
    """Whether a later scan can be this one's: cached, complete, no agent, tools stamped."""
    plain = not (args.no_cache or args.fix or result.failed)
    return plain and scanner.stamped and all(p.agent is None for p in profiles)


def _env_names(profiles: Sequence[ScannerProfile]) -> list[str]:
    """The variables a scanner's cache keys read (its ``env``; ``PATH`` for its version)."""
    return list(dict.fromkeys(["PATH", *(name for p in profiles for name in p.env)]))


def _stamps(profiles: Sequence[ScannerProfile]) -> list[list[Any]]:
    """Each version command's words and its tool's stamp, as the scan saw them."""
    import shlex

    from .toolstamp import words_stat

    path = os.environ.get("PATH")
    stamps = []
    for profile in profiles:
        if profile.version is not None:
            words = shlex.split(profile.version)
            stamps.append([words, words_stat(words, path)])
    return stamps


def _events(hit: ScanResult) -> list[tuple[str, str | None, str]]:
    """The events the scan logs (kind, scanner, data), as Scanner.scan logs them."""
    names = [r.name for r in hit.reports]
    started = {"state": "started", "base": hit.base_commit, "scanners": names}
    events: list[tuple[str, str | None, str]] = [("scan", None, json.dumps(started))]
    for r in hit.reports:
        data = {
            "state": "done",
            "hits": r.hits,
            "misses": r.misses,
            "invocations": r.invocations,
            "reported": len(r.findings),
            "error": None,
        }
        events.append(("scanner", r.name, json.dumps(data)))
    finished = {"state": "finished", "findings": len(hit.merged)}
    return [*events, ("scan", None, json.dumps(finished))]
