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

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..confine.paths import repo_key, workdir_root
from ..confine.procs import CancelToken
from ..errors import UsageError
from ..git.repo import Repo
from ..state.agentrecords import AgentProfile
from .globs import compile_globs, select_files
from .keys import MAX_CACHE_ENTRIES, config_key, digest, encode_entry, read_entries
from .profiles import ScannerProfile, Scope
from .runner import run_scanner, scanner_env
from .trees import Check, export, ls_tree, remove, removing
from .waits import aside, once, result, until

if TYPE_CHECKING:  # imported where used: what reads the scanners' results is imported while
    # they run (Scanner._meanwhile), not before them; the store, where it is first opened
    from ..state.store import Store
    from .findings import Finding, ToolInfo
    from .sarif import MergedFinding, ScannerReport

MAX_BATCH_FILES = 256
# missed files are split into at most one batch per MIN_BATCH_FILES: a batch costs a
# sandboxed process start (the tool's own start, its cleanup's sweep of /proc), more than a
# linter's whole run over a hundred small files; splitting pays where files are many
MIN_BATCH_FILES = 128
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
        store: Store | Callable[[], Store],
        agents: Mapping[str, AgentProfile] | None = None,
        *,
        max_parallel: int | None = None,
        use_cache: bool = True,
        sandbox: bool = True,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        workspace: Path | None = None,
    ) -> None:
        self.repo, self._store, self.agents = repo, store, dict(agents or {})
        self.max_parallel = max_parallel or os.cpu_count() or 2
        self.use_cache, self.sandbox, self.clock = use_cache, sandbox, clock
        self.environ = dict(os.environ if environ is None else environ)
        self.cancel = CancelToken()
        self.workspace = workspace  # [run] workspace: the root of its scratch folders
        self.workdir = "."
        self._entries: Mapping[str, str] = {}
        self._folders: set[str] = set()  # the scanned commit's (its export makes them)
        # what a memo of the last scan stands for (scan.memo): the cache keys it used, and
        # whether every version it needed was stamped (else a later scan must ask it again)
        self.keys_used: list[str] = []
        self.stamped = True
        self._removing: list[Callable[[], None]] = []  # scan folders still being removed

    def settle(self) -> None:
        """Wait until the scan folders of scans made with ``settle=False`` are gone."""
        while self._removing:
            self._removing.pop()()

    @property
    def store(self) -> Store:
        """The store, opened at its first use when the scanner was given its opener: a scan
        without the cache needs it only to log its events, which it does while its scanners
        run (:meth:`_meanwhile`)."""
        if callable(self._store):
            self._store = self._store()
        return self._store

    def scan(
        self,
        profiles: Sequence[ScannerProfile],
        base: str,
        workdir: str = ".",
        *,
        commit: str | None = None,
        meanwhile: Callable[[], None] | None = None,
        settle: bool = True,
    ) -> ScanResult:
        """Scan ``base`` with ``profiles``; findings deduplicated across scanners.

        Scanners run in ``workdir`` (relative to the repository): their globs and the paths
        they are given are relative to it; reported paths are relative to the repository.
        ``commit``: the commit ``base`` names, when the caller has resolved it already;
        ``meanwhile``: the caller's work, done while the scanners run (or once none will);
        ``settle=False``: return while the scan folder is being removed; then :meth:`settle`.
        """
        commit = commit or self.repo.try_rev_parse(base)
        if commit is None:
            raise UsageError(f"--base {base!r} names no commit")
        prefix = "" if workdir.strip("/") in ("", ".") else workdir.strip("/") + "/"
        self.workdir = prefix.rstrip("/") or "."
        files, self._folders = ls_tree(self.repo, commit)
        self._entries = entries = {
            path[len(prefix) :]: blob for path, blob in files.items() if path.startswith(prefix)
        }
        self.keys_used, self.stamped = [], True
        tree = self.repo.tree_of(commit)
        scan_id = f"scan-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
        # made by the first that needs it (a version probe, an export): a scan answered
        # from the cache writes no folder at all
        work = scan_root(self.repo, self.workspace) / scan_id
        names = [p.name for p in profiles]
        # logged while the scanners run, or before the scan ends if none runs
        side = once(partial(self._meanwhile, scan_id, self.clock(), commit, names, meanwhile))
        try:
            tallies = {p.name: _Tally() for p in profiles}
            jobs: list[_Job] = []
            for profile in profiles:
                jobs += self._plan_jobs(profile, entries, tree, work, tallies[profile.name])
            self._run_jobs(jobs, commit, tree, work, tallies, side)
            side()
        except BaseException:
            remove(work)
            raise
        self._removing.append(removing(work))  # removed while the findings are merged, logged
        from .sarif import merge

        try:
            reports = tuple(self._report(p, tallies[p.name], prefix) for p in profiles)
            merged = tuple(merge(reports))
            self._finished(scan_id, reports, merged)
        except BaseException:
            self.settle()
            raise
        if settle:  # else the caller waits for it once it wrote the outputs too
            self.settle()
        return ScanResult(commit, reports, merged, scan_id)

    def _meanwhile(
        self,
        scan_id: str,
        at: float,
        commit: str,
        names: list[str],
        callers: Callable[[], None] | None,
    ) -> None:
        """What a scan does while its scanners run, off the path to their start: the caller's
        work; its start logged (at ``at``, when it started), the store opened if the cache has
        not opened it; what reading the scanners' results needs imported."""
        if callers is not None:
            callers()
        from ..state.eventlog import Event

        data = {"state": "started", "base": commit, "scanners": names}
        with self.store.transaction() as tx:  # under the scan's id (scan-…), not a run's
            tx.emit(Event(scan_id, "scan", at, data=data))
        # what reads, merges and renders the results (with findings), imported now
        from . import sarif  # noqa: F401

    def _finished(
        self, scan_id: str, reports: Sequence[ScannerReport], merged: Sequence[MergedFinding]
    ) -> None:
        """Each scanner's outcome and the scan's end, in one transaction."""
        from ..state.eventlog import Event

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
        config = config_key(self, profile, entries, work)
        if profile.scope is Scope.TREE:
            keys = [digest(config, "tree", tree)]
        else:
            keys = [digest(config, "file", path, entries[path]) for path in files]
        self.keys_used += keys
        cached: set[str] = set()
        if self.use_cache:
            found, tools, cached = read_entries(self.store, keys, self.clock())
            tally.findings, tally.tools, tally.hits = found, tools, len(cached)
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

    # -- running -------------------------------------------------------------------------

    def _run_jobs(
        self,
        jobs: Sequence[_Job],
        commit: str,
        tree: str,
        work: Path,
        tallies: Mapping[str, _Tally],
        meanwhile: Callable[[], None],
    ) -> None:
        """Export each scanner's tree, run the jobs (``meanwhile`` done once their processes
        started), check the exports, cache the results."""
        if not jobs:
            return
        exports = {j.profile.name: work / j.profile.name for j in jobs}
        exported = self._export_sets(jobs)
        for name, folder in exports.items():
            export(self.repo, commit, folder, exported[name], self._folders)
            (folder / "tree" / self.workdir).mkdir(parents=True, exist_ok=True)  # the cwd
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
                started = threading.Event()
                # its export's check starts as the scanner ends, beside the parse
                ended = checks[job.profile.name].start
                running = partial(self._run_job, job, cwd, folder, scratch, started.set, ended)
                side = partial(_once_started, [started], meanwhile)
                ran = aside(running, lambda: self.cancel.cancel("scan interrupted"), side)
                self._collect(job, ran, cwd, tallies)
            else:
                self._run_pooled(runs, tallies, meanwhile)
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
            from ..state import scancache

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
        self,
        runs: Sequence[tuple[_Job, Path, Path]],
        tallies: Mapping[str, _Tally],
        meanwhile: Callable[[], None],
    ) -> None:
        """Run jobs (each with its export's tree and its own folder) on a pool of
        ``max_parallel`` threads, ``meanwhile`` done once the first processes started; their
        results collected in order."""
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="scan")
        started = [threading.Event() for _ in runs]
        try:
            futures = [
                (
                    job,
                    scratch,
                    pool.submit(
                        self._run_job, job, scratch / self.workdir, folder, scratch, event.set
                    ),
                )
                for (job, scratch, folder), event in zip(runs, started, strict=True)
            ]
            _once_started(started[: self.max_parallel], meanwhile)
            for job, scratch, future in futures:
                self._collect(job, partial(result, future), scratch / self.workdir, tallies)
        except BaseException:  # the pool's shutdown waits for its jobs: end them first
            self.cancel.cancel("scan interrupted")
            raise
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
        from .findings import ScanJobError

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
            value = encode_entry(findings, tool)
            if value is not None:
                tally.fresh.append((key, value))

    def _run_job(
        self,
        job: _Job,
        tree: Path,
        folder: Path,
        scratch: Path,
        started: Callable[[], None],
        ended: Callable[[], object] | None = None,
    ) -> tuple[list[Finding], ToolInfo | None]:
        """Run one scanner process over its files in ``tree`` (inside its export, ``scratch``);
        its findings, with their source, and tool. ``started`` is called once its process
        runs, or it ended; ``ended``: when the process ended."""
        agent = self.agents[job.profile.agent] if job.profile.agent is not None else None
        try:
            return run_scanner(
                job.profile,
                job.files,
                tree,
                folder,
                scanner_env(job.profile, folder, self.environ, agent),
                self.cancel,
                self._writable(folder, scratch),
                agent,
                started=started,
                sourced=True,
                ended=ended,
            )
        finally:
            started()  # (a job that never started its process must not be waited for)

    def _writable(self, *folders: Path) -> tuple[Path, ...] | None:
        """What a scanner may write under the sandbox: its folders, and ``/dev/null`` (the
        tools' documented commands redirect to it; nothing else of ``/dev``)."""
        from ..confine import landlock as sandbox

        return (*folders, DEV_NULL) if self.sandbox and sandbox.available() else None

    def _report(self, profile: ScannerProfile, tally: _Tally, prefix: str) -> ScannerReport:
        from .sarif import ScannerReport

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


def _once_started(started: Sequence[threading.Event], work: Callable[[], None]) -> None:
    """``work`` once each of ``started`` is set: not while the scanners' processes are being
    started, whose threads would wait for the interpreter's lock while it ran."""
    until(*started)
    work()


__all__ = ["ScanResult", "Scanner", "compile_globs", "scan_root", "select_files"]
