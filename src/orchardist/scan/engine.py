"""Running scanners: a scratch export of the base per scanner, cache first, jobs in parallel.

For each scanner: select its files (include/exclude), look every file (or the tree) up in the
cache, and run the scanner only on what missed, in batches spread over ``max_parallel``
processes. Each scanner gets its own export of the base tree, a throwaway copy: its folders are
writable (tools write caches where their documented commands put them: ``.ruff_cache``,
``.mypy_cache``) and all it writes is removed with it; its tracked files are read-only, and
afterwards the export is compared with the base tree, so a scanner that changed a tracked file
is caught and its results are neither used nor cached. Where Landlock exists, a scanner may
write only its export and its own folder. Processes run through :func:`procs.run_process`: own
session, timeout, cancellation, nothing left behind. One process is :mod:`.runner`'s, the
exports are :mod:`.trees`' and the file selection :mod:`.globs`'.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from ..confine.paths import repo_key, workdir_root
from ..confine.procs import CancelToken, ProcessRequest, run_process
from ..errors import UsageError
from ..git.repo import Repo
from ..state import scancache
from ..state.agentrecords import AgentProfile
from ..state.eventlog import Event
from ..state.store import Store
from .findings import Finding, ScanJobError, ToolInfo
from .globs import compile_globs, select_files
from .profiles import ScannerProfile, Scope
from .runner import run_scanner, scanner_env
from .sarif import MergedFinding, ScannerReport, merge
from .toolstamp import tool_stamp
from .trees import Check, export, ls_tree, remove, removing
from .waits import aside, result

CACHE_SCHEMA = 1  # bump when what a cache entry holds changes
MAX_CACHE_ENTRIES = 200_000
MAX_ENTRY_BYTES = 1 << 20  # a larger per-file result is not cached
MAX_BATCH_FILES = 256
# missed files are split into at most one batch per MIN_BATCH_FILES: a batch costs a
# sandboxed process start (the tool's own start, its cleanup's sweep of /proc), more than a
# linter's whole run over a hundred small files; splitting pays where files are many
MIN_BATCH_FILES = 128
VERSION_TIMEOUT_S = 60.0
DEV_NULL = Path("/dev/null")


@dataclass(frozen=True)
class ScanResult:
    """One scan: the base it looked at, each scanner's report, the deduplicated findings."""

    base_commit: str
    reports: tuple[ScannerReport, ...]
    merged: tuple[MergedFinding, ...]
    scan_id: str = ""  # its events are logged under this id

    @property
    def failed(self) -> list[ScannerReport]:
        """Reports of scanners that did not finish cleanly."""
        return [r for r in self.reports if r.error is not None]


class _Job(NamedTuple):
    """One scanner process: a batch of files (scope file) or the tree (scope tree).

    The scan's own bookkeeping, not a record: a named tuple and a plain class are made at
    import without the methods a dataclass compiles from source (~0.6 ms each)."""

    profile: ScannerProfile
    files: tuple[str, ...]
    keys: tuple[str, ...]  # file scope: one per file; tree scope: the tree's key


class _Tally:
    """What one scanner gathered during a scan."""

    __slots__ = ("errors", "findings", "fresh", "hits", "invocations", "misses", "tools")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.tools: list[ToolInfo] = []
        self.errors: list[str] = []
        self.hits = 0
        self.misses = 0
        self.invocations = 0
        self.fresh: list[tuple[str, str]] = []  # (key, value) to cache


def scan_root(repo: Repo, workspace: Path | None = None) -> Path:
    """Where scan exports live: outside the user's checkout and outside .git, in the same
    folder of the repository as its runs' attempts (one key, :func:`worktree.repo_key`)."""
    return workdir_root(workspace) / repo_key(repo.common_dir) / "scans"


class Scanner:
    """Runs a set of scanner profiles over one commit of a repository."""

    def __init__(
        self,
        repo: Repo,
        store: Store,
        agents: Mapping[str, AgentProfile] | None = None,
        *,
        max_parallel: int | None = None,
        use_cache: bool = True,
        sandbox: bool = True,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        workspace: Path | None = None,
    ) -> None:
        self.repo, self.store, self.agents = repo, store, dict(agents or {})
        self.max_parallel = max_parallel or os.cpu_count() or 2
        self.use_cache, self.sandbox, self.clock = use_cache, sandbox, clock
        self.environ = dict(os.environ if environ is None else environ)
        self.cancel = CancelToken()
        self.workspace = workspace  # [run] workspace: the root of its scratch folders
        self.workdir = "."
        self._entries: Mapping[str, str] = {}
        # what a memo of the last scan stands for (scan.memo): the cache keys it used, and
        # whether every version it needed was stamped (else a later scan must ask it again)
        self.keys_used: list[str] = []
        self.stamped = True
        self._removing: list[Callable[[], None]] = []  # scan folders still being removed

    def settle(self) -> None:
        """Wait until the scan folders of scans made with ``settle=False`` are gone."""
        while self._removing:
            self._removing.pop()()

    def scan(
        self,
        profiles: Sequence[ScannerProfile],
        base: str,
        workdir: str = ".",
        *,
        commit: str | None = None,
        settle: bool = True,
    ) -> ScanResult:
        """Scan ``base`` with ``profiles``; findings deduplicated across scanners.

        Scanners run in ``workdir`` (relative to the repository): their globs and the paths
        they are given are relative to it; reported paths are relative to the repository.
        ``commit``: the commit ``base`` names, when the caller has resolved it already.
        ``settle=False``: return while the scan folder is being removed; then :meth:`settle`.
        """
        commit = commit or self.repo.try_rev_parse(base)
        if commit is None:
            raise UsageError(f"--base {base!r} names no commit")
        prefix = "" if workdir.strip("/") in ("", ".") else workdir.strip("/") + "/"
        self.workdir = prefix.rstrip("/") or "."
        entries = {
            path[len(prefix) :]: blob
            for path, blob in ls_tree(self.repo, commit).items()
            if path.startswith(prefix)
        }
        self._entries = entries
        self.keys_used, self.stamped = [], True
        tree = self.repo.tree_of(commit)
        scan_id = f"scan-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
        # made by the first that needs it (a version probe, an export): a scan answered
        # from the cache writes no folder at all
        work = scan_root(self.repo, self.workspace) / scan_id
        names = [p.name for p in profiles]
        self._emit(scan_id, "scan", state="started", base=commit, scanners=names)
        try:
            tallies = {p.name: _Tally() for p in profiles}
            jobs: list[_Job] = []
            for profile in profiles:
                jobs += self._plan_jobs(profile, entries, tree, work, tallies[profile.name])
            self._run_jobs(jobs, commit, tree, work, tallies)
        except BaseException:
            remove(work)
            raise
        removed = removing(work)  # the scratch copy goes while the findings are merged, logged
        try:
            reports = tuple(self._report(p, tallies[p.name], prefix) for p in profiles)
            merged = tuple(merge(reports))
            self._finished(scan_id, reports, merged)
        except BaseException:
            removed()
            raise
        if settle:
            removed()
        else:  # and written: the caller waits for it (settle)
            self._removing.append(removed)
        return ScanResult(commit, reports, merged, scan_id)

    def _finished(
        self, scan_id: str, reports: Sequence[ScannerReport], merged: Sequence[MergedFinding]
    ) -> None:
        """Each scanner's outcome and the scan's end, in one transaction."""
        now = self.clock()
        with self.store.transaction() as tx:
            for r in reports:
                data = {
                    "state": "failed" if r.error else "done",
                    "hits": r.hits,
                    "misses": r.misses,
                    "invocations": r.invocations,
                    "reported": len(r.findings),
                    "error": r.error,
                }
                tx.emit(Event(scan_id, "scanner", now, task_id=r.name, data=data))
            end = {"state": "finished", "findings": len(merged)}
            tx.emit(Event(scan_id, "scan", now, data=end))

    def _emit(self, scan_id: str, kind: str, scanner: str | None = None, **data: Any) -> None:
        """One line of the event log, under the scan's id (``scan-…``) instead of a run's."""
        with self.store.transaction() as tx:
            tx.emit(Event(scan_id, kind, self.clock(), task_id=scanner, data=data))

    # -- cache lookups -------------------------------------------------------------------

    def _plan_jobs(
        self,
        profile: ScannerProfile,
        entries: Mapping[str, str],
        tree: str,
        work: Path,
        tally: _Tally,
    ) -> list[_Job]:
        """Use what the cache has; return jobs for what it has not."""
        files = select_files(entries, profile.include, profile.exclude)
        config = self._config_key(profile, entries, work)
        if profile.scope is Scope.TREE:
            keys = [_digest(config, "tree", tree)]
        else:
            keys = [_digest(config, "file", path, entries[path]) for path in files]
        self.keys_used += keys
        cached = scancache.get(self.store, keys, self.clock()) if self.use_cache else {}
        for value in cached.values():
            entry = json.loads(value)
            tally.findings += [Finding.from_json(f) for f in entry["findings"]]
            if entry.get("tool"):
                tally.tools.append(ToolInfo.from_json(entry["tool"]))
        tally.hits = len(cached)
        if profile.scope is Scope.TREE:
            return [] if cached else [_Job(profile, tuple(files), tuple(keys))]
        missed = [(path, key) for path, key in zip(files, keys, strict=True) if key not in cached]
        if not missed:
            return []
        batches = max(1, min(self.max_parallel, len(missed) // MIN_BATCH_FILES))
        size = min(MAX_BATCH_FILES, -(-len(missed) // batches))
        return [
            _Job(profile, tuple(p for p, _ in chunk), tuple(k for _, k in chunk))
            for chunk in (missed[i : i + size] for i in range(0, len(missed), size))
        ]

    def _config_key(self, profile: ScannerProfile, entries: Mapping[str, str], work: Path) -> str:
        """Everything but the scanned content that can change the results."""
        configs = select_files(entries, profile.config, ()) if profile.config else []
        identity: dict[str, Any] = {
            "schema": CACHE_SCHEMA,
            "workdir": self.workdir,
            "profile": profile.cache_identity(),
            "config": {path: entries[path] for path in configs},
            "env": {name: self.environ.get(name) for name in profile.env},
        }
        if profile.version and self.use_cache:  # without the cache no key is ever used
            identity["version"] = self._version(profile, work)
        if profile.agent is not None:
            agent = self.agents[profile.agent]
            identity["agent"] = json.dumps(agent.__dict__, sort_keys=True, default=str)
        return _digest(json.dumps(identity, sort_keys=True, default=str))

    def _version(self, profile: ScannerProfile, work: Path) -> str:
        """The output of the profile's version command (part of its cache key); remembered
        with the stamp of the tool's files, and asked again only when that changed."""
        assert profile.version is not None
        stamp = tool_stamp(profile.version, self.environ.get("PATH"))
        env = {name: self.environ.get(name) for name in ("PATH", *profile.env)}
        key = _digest("version", profile.version, json.dumps(env, sort_keys=True), stamp or "")
        self.keys_used.append(key)
        self.stamped = self.stamped and stamp is not None
        if stamp is not None and self.use_cache:
            known = scancache.get(self.store, [key], self.clock())
            if key in known:
                return known[key]
        folder = work / f"{profile.name}.version"
        folder.mkdir(parents=True)
        log = folder / "out"
        proc = run_process(
            ProcessRequest(
                argv=["/bin/sh", "-c", profile.version],
                cwd=folder,
                env=self._env(profile, folder),
                log=log,
                timeout_s=VERSION_TIMEOUT_S,
                cancel=self.cancel,
            )
        )
        version = f"{proc.exit_code}:{log.read_text(errors='replace')}"
        if stamp is not None and self.use_cache and proc.exit_code == 0:
            scancache.put(
                self.store, [(key, profile.name, version)], self.clock(), MAX_CACHE_ENTRIES
            )
        return version

    # -- running -------------------------------------------------------------------------

    def _run_jobs(
        self,
        jobs: Sequence[_Job],
        commit: str,
        tree: str,
        work: Path,
        tallies: Mapping[str, _Tally],
    ) -> None:
        if not jobs:
            return
        exports = {j.profile.name: work / j.profile.name for j in jobs}
        exported = self._export_sets(jobs)
        for name, folder in exports.items():
            (folder / "tree" / self.workdir).mkdir(parents=True)  # before it is made read-only
            paths = exported[name]
            export(self.repo, commit, folder, None if paths is None else sorted(paths))
        # tree scans first: they usually take longest
        ordered = sorted(jobs, key=lambda j: j.profile.scope is not Scope.TREE)
        runs = [
            (job, exports[job.profile.name] / "tree", work / f"job{n}")
            for n, job in enumerate(ordered)
        ]
        checks = {n: Check(self.repo, f, exported[n]) for n, f in exports.items()}
        try:
            if len(runs) == 1:  # no pool (nor its imports, logging's among them) for one job
                job, scratch, folder = runs[0]
                cwd = scratch / self.workdir
                # its export's check starts as the scanner ends, beside the parse
                ended = checks[job.profile.name].start
                running = partial(self._run_job, job, cwd, folder, scratch, ended)
                ran = aside(running, lambda: self.cancel.cancel("scan interrupted"))
                self._collect(job, ran, cwd, tallies)
            else:
                self._run_pooled(runs, tallies)
        except BaseException:
            self.cancel.cancel("scan interrupted")
            raise
        for name, check in checks.items():
            changed = check.changed()
            if changed:
                tally = tallies[name]
                shown = ", ".join(changed[:5]) + (" …" if len(changed) > 5 else "")
                tally.errors.append(f"the scanner changed tracked files of its tree: {shown}")
                tally.fresh.clear()  # nothing it reported is trusted
        rows = [
            (key, name, value)
            for name, tally in tallies.items()
            if not tally.errors
            for key, value in tally.fresh
        ]
        if rows and self.use_cache:
            scancache.put(self.store, rows, self.clock(), MAX_CACHE_ENTRIES)

    def _export_sets(self, jobs: Sequence[_Job]) -> dict[str, set[str] | None]:
        """What each scanner's export holds (repository paths): for a file-scoped scanner its
        files and its ``config`` files, all that its cache keys cover; else (None) everything."""
        prefix = "" if self.workdir == "." else self.workdir + "/"
        sets: dict[str, set[str] | None] = {}
        for job in jobs:
            profile = job.profile
            if profile.scope is not Scope.FILE:
                sets[profile.name] = None
                continue
            paths = sets.setdefault(profile.name, set())
            assert paths is not None
            paths.update(prefix + f for f in job.files)
            paths.update(prefix + f for f in select_files(self._entries, profile.config, ()))
        return sets

    def _run_pooled(
        self, runs: Sequence[tuple[_Job, Path, Path]], tallies: Mapping[str, _Tally]
    ) -> None:
        """Run jobs (each with its export's tree and its own folder) on a pool of
        ``max_parallel`` threads; their results collected in order."""
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="scan")
        try:
            futures = [
                (
                    job,
                    scratch,
                    pool.submit(self._run_job, job, scratch / self.workdir, folder, scratch),
                )
                for job, scratch, folder in runs
            ]
            for job, scratch, future in futures:
                self._collect(job, partial(result, future), scratch / self.workdir, tallies)
        finally:
            pool.shutdown(wait=True)

    def _collect(
        self,
        job: _Job,
        outcome: Callable[[], tuple[list[Finding], ToolInfo | None]],
        tree: Path,
        tallies: Mapping[str, _Tally],
    ) -> None:
        """Add a finished job's findings to its scanner's tally, and its cache entries."""
        tally = tallies[job.profile.name]
        tally.invocations += 1
        tally.misses += len(job.keys)
        try:
            found, tool = outcome()
        except ScanJobError as exc:
            tally.errors.append(str(exc))
            return
        if tool is not None:
            tally.tools.append(tool)
        if job.profile.scope is Scope.FILE:
            wanted = set(job.files)
            found = [f for f in found if f.path in wanted]  # outside its files: out of scope
            by_file: dict[str, list[Finding]] = {path: [] for path in job.files}
            for finding in found:
                by_file[finding.path].append(finding)
            entries = [(key, by_file[path]) for path, key in zip(job.files, job.keys, strict=True)]
        else:
            entries = [(job.keys[0], found)]
        tally.findings += found
        if not self.use_cache:  # nothing will be stored: no entry is encoded
            return
        for key, findings in entries:
            rules = {f.rule for f in findings}
            value = json.dumps(
                {
                    "findings": [f.to_json() for f in findings],
                    "tool": tool.only(rules).to_json() if tool is not None else None,
                }
            )
            if len(value) <= MAX_ENTRY_BYTES:
                tally.fresh.append((key, value))

    def _run_job(
        self,
        job: _Job,
        tree: Path,
        folder: Path,
        scratch: Path,
        ended: Callable[[], object] | None = None,
    ) -> tuple[list[Finding], ToolInfo | None]:
        """Run one scanner process over its files in ``tree`` (inside its export, ``scratch``);
        its findings, with their source, and tool. ``ended``: called when the process ended."""
        agent = self.agents[job.profile.agent] if job.profile.agent is not None else None
        return run_scanner(
            job.profile,
            job.files,
            tree,
            folder,
            scanner_env(job.profile, folder, self.environ, agent),
            self.cancel,
            self._writable(folder, scratch),
            agent,
            sourced=True,
            ended=ended,
        )

    def _writable(self, *folders: Path) -> tuple[Path, ...] | None:
        """What a scanner may write under the sandbox: its folders, and ``/dev/null`` (the
        tools' documented commands redirect to it; nothing else of ``/dev``)."""
        from ..confine import landlock as sandbox

        return (*folders, DEV_NULL) if self.sandbox and sandbox.available() else None

    def _env(self, profile: ScannerProfile, folder: Path) -> dict[str, str]:
        agent = self.agents[profile.agent] if profile.agent is not None else None
        return scanner_env(profile, folder, self.environ, agent)

    def _report(self, profile: ScannerProfile, tally: _Tally, prefix: str) -> ScannerReport:
        tool = None
        if tally.tools:
            rules: dict[str, Any] = {}
            for info in tally.tools:
                rules.update(info.rules)
            tool = replace(tally.tools[0], rules=rules)
        return ScannerReport(
            name=profile.name,
            findings=tuple(replace(f, path=prefix + f.path) for f in tally.findings)
            if prefix
            else tuple(tally.findings),
            tool=tool,
            error="; ".join(tally.errors) or None,
            hits=tally.hits,
            misses=tally.misses,
            invocations=tally.invocations,
        )


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


__all__ = ["ScanJobError", "ScanResult", "Scanner", "compile_globs", "scan_root", "select_files"]
