"""Run jobs as local processes, one thread and one attempt folder (see worktree.py) per job."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import mounts, sandbox
from ..agents import Agent, AgentContext, AgentResult, agent_class, make_agent, scrubbed_env
from ..discover import auto_commands, discover_tests
from ..errors import GitError, OrchardistError
from ..gitrepo import Repo
from ..isolation import Mode, Policy, Spec, choose, hidden_by_tmp
from ..oracle import CommandOutcome, baseline_key
from ..procs import CancelToken
from ..records import UNFINISHED, AgentProfile, AttemptState, Failure, Usage
from ..safeio import flocked, read_capped
from ..specs import RunConfig
from ..stages import JUDGED_STAGES, READ_ONLY_STAGES, StageRun, judge_stage
from ..store import Store
from ..verify import CommandVerifier, run_one, tail_of
from ..worktree import AttemptPaths, Layout, empty_home, fill_home, tool_homes, workdir_root
from . import Job, Notify, Outcome, Phase

NO_CHANGES = "the agent changed no file"
NO_CHANGES_FEEDBACK = (
    "The previous attempt ended without changing any file in the working tree, so there was "
    "nothing to verify. Make the change in the files themselves; edits that were refused, "
    "only described, or written outside the working tree do not count."
)
MAX_ENV_PROMPT_BYTES = 64 * 1024  # larger prompts are only in the prompt file (exec limits)
GIT_FILE_MAX_BYTES = 4096  # the worktree's .git file: one "gitdir: ..." line
# Folders (separated like PATH) shown to every confined process although the private /tmp would
# hide them, read-only or writable: for test harnesses, and caches the user means to share.
SHARE_READONLY_VAR = "ORCHARDIST_SHARE_READONLY"
SHARE_WRITABLE_VAR = "ORCHARDIST_SHARE_WRITABLE"


class LocalExecutor:
    """Each job gets its own tree and private git directory at its base commit, outside the
    user's git directory, removed when the job ends."""

    def __init__(
        self,
        repo: Repo,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        store: Store | None = None,
        guard_checkout: bool = True,
        sandbox: bool = True,
        workspace: Path | None = None,
        isolation: Policy | None = None,
        overlays: bool = True,
    ) -> None:
        self.repo = repo
        self.layout = Layout(repo, workdir_root(workspace), Path(state_dir))
        # The user's git identity (their ~/.gitconfig is out of sight in the private HOME).
        name, email = self.layout.identity()
        self._identity = {
            f"GIT_{role}_{key}": value
            for role in ("AUTHOR", "COMMITTER")
            for key, value in (("NAME", name), ("EMAIL", email))
        }
        self.log_root = Path(state_dir) / "logs"
        self.clock = clock
        self.environ = environ
        self._lock = threading.Lock()
        self._cancels: dict[str, CancelToken] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._agents: dict[str, Agent] = {}
        baselines = None if store is None else LocalBaselines(self, store)
        self.verifier = CommandVerifier(baselines)
        self.store = store
        # ``sandbox = False`` is the older spelling of isolation "off".
        self.policy = isolation or (Policy.AUTO if sandbox else Policy.OFF)
        self.mode = choose(self.policy)  # IsolationError when "required" cannot be met
        # An unconfined agent could write the pristine checkout its neighbours' overlays share.
        self.layout.overlays = overlays and self.mode is not Mode.NONE and mounts.enter(environ)
        # Confined agents cannot write to the user's checkout or git directory: whatever
        # changes there is the user's own doing, so the guard has nothing to look for.
        self._guard = guard_checkout and self.mode is Mode.NONE
        self._theirs: list[Path] | None = None
        self._hidden: tuple[Path, ...] | None = None
        # The checkout guard's own lock: its look at the checkout reads the store, so it must not
        # be ``_lock``, which the scheduler takes (cancel) while it holds a store transaction.
        self._guard_lock = threading.Lock()
        self._checkout = self._fingerprint() if guard_checkout else {}
        self._changed = ""
        self._in_agent: set[str] = set()  # jobs whose agent is running or just ended
        self._suspects: set[str] = set()  # jobs running when the checkout changed

    @classmethod
    def for_run(
        cls,
        repo: Repo,
        state_dir: Path,
        store: Store,
        settings: RunConfig,
        clock: Callable[[], float],
        overlays: bool = True,
    ) -> LocalExecutor:
        """The executor ``[run] executor = "local"`` asks for (``overlays``: see worktree.py)."""
        return cls(
            repo,
            state_dir,
            clock=clock,
            store=store,
            guard_checkout=settings.guard_checkout,
            sandbox=settings.sandbox,
            workspace=settings.workspace,
            isolation=settings.isolation,
            overlays=overlays,
        )

    def submit(self, job: Job, notify: Notify) -> None:
        """Start the job on its own thread."""
        token = CancelToken()
        thread = threading.Thread(
            target=self._main, args=(job, notify, token), name=f"job-{job.id}", daemon=True
        )
        with self._lock:
            self._cancels[job.id] = token
            self._threads[job.id] = thread
        thread.start()

    def cancel(self, job_id: str, reason: str) -> None:
        """Cancel a running job; unknown or finished jobs are ignored."""
        with self._lock:
            token = self._cancels.get(job_id)
        if token is not None:
            token.cancel(reason)

    def close(self) -> None:
        """Wait for the threads of all submitted jobs."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join()
        self.layout.tidy()

    def log_path(self, run_id: str, job_id: str) -> Path:
        """Where a job's output goes."""
        return self.log_root / run_id / f"{job_id}.log"

    # -- one job -------------------------------------------------------------------------

    def _main(self, job: Job, notify: Notify, token: CancelToken) -> None:
        started = self.clock()
        log = self.log_path(job.run_id, job.id)
        paths = self.layout.attempt(job.run_id, job.id)
        try:
            outcome = self._run(job, notify, token, started, log, paths)
        except Exception as exc:  # the scheduler must hear back whatever happens
            outcome = Outcome(
                job,
                AttemptState.FAILED,
                started,
                self.clock(),
                Failure.INFRA_ERROR,
                f"{type(exc).__name__}: {exc}",
                log_path=str(log),
            )
        finally:
            with self._lock:
                self._cancels.pop(job.id, None)
            token.close()
            self.layout.retire(paths)
        try:
            notify(outcome)
        finally:
            # Off the critical path: the scheduler already has the outcome; close() still
            # waits for this thread, so no folder outlives the executor.
            try:
                self.layout.remove(paths)
            finally:
                with self._lock:
                    self._threads.pop(job.id, None)

    def _run(
        self,
        job: Job,
        notify: Notify,
        token: CancelToken,
        started: float,
        log: Path,
        paths: AttemptPaths,
    ) -> Outcome:
        deadline = time.monotonic() + job.timeout_s
        worktree = paths.tree
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")

        def end(state: AttemptState, failure: Failure | None = None, **kw: Any) -> Outcome:
            return Outcome(job, state, started, self.clock(), failure, log_path=str(log), **kw)

        try:
            self.layout.create(paths, job.start_commit or job.base_commit, job.run_id)
        except (OrchardistError, OSError) as exc:
            return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=str(exc))
        try:
            cwd = worktree / job.workdir
            if not cwd.is_dir():
                detail = f"workdir {job.workdir!r} does not exist at {job.base_commit[:10]}"
                return end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=detail)
            # Decided before the agent runs: it could rewrite its .git file to point anywhere.
            agent_spec = self._confinement(paths, network=True)
            if job.stage in READ_ONLY_STAGES and agent_spec is not None:
                agent_spec = _without(agent_spec, paths.tree)
            gitfile = (read_capped(worktree / ".git", GIT_FILE_MAX_BYTES) or b"").decode(
                errors="replace"
            )
            env = self._env(job, paths)
            patch, changed, usage, summary = job.base_commit, 0, Usage(), ""
            if job.profile is not None:
                kind = agent_class(job.profile.kind)
                fill_home(paths, self._real_home(), kind.home_files, kind.home_state)
                ctx = self._context(job, paths, cwd, env, log, deadline, token, agent_spec)
                with self._guard_lock:
                    self._in_agent.add(job.id)  # until its own look at the checkout
                result = self._agent(job.profile).run(ctx)
                usage = result.usage
                result = _note_ending(job, result, log, token.reason)
                if result.cancelled or token.cancelled:
                    return end(
                        AttemptState.CANCELLED,
                        detail=token.reason or "cancelled",
                        usage=usage,
                        exit_code=result.exit_code,
                    )
                if result.failure is not None:
                    return end(
                        AttemptState.FAILED,
                        result.failure,
                        detail=result.detail,
                        exit_code=result.exit_code,
                        usage=usage,
                        feedback=tail_of(log),
                        retry_after_s=result.retry_after_s,
                    )
                summary = result.detail
                try:
                    patch = self._take_patch(job, paths, gitfile)
                except _Contained as exc:
                    return end(
                        AttemptState.FAILED, Failure.AGENT_ERROR, usage=usage, detail=str(exc)
                    )
                changed = self.repo.changed_lines(job.base_commit, patch)
                if not job.allow_empty and self._unchanged(job, patch):
                    # Verify would judge the base itself: "already failing on the base" would
                    # merge an empty commit as verified.
                    return end(
                        AttemptState.FAILED,
                        Failure.NO_CHANGES,
                        detail=NO_CHANGES + (f"; it said: {summary}" if summary else ""),
                        exit_code=result.exit_code,
                        usage=usage,
                        summary=summary,
                        feedback=NO_CHANGES_FEEDBACK,
                    )
            empty_home(paths)  # verify runs the agent's code: no credentials copied for it
            if job.stage in JUDGED_STAGES:
                notify(Phase(job, "verifying"))
                env = {**self._verify_env(job, paths), "ORCHARDIST_PHASE": "verify"}
                spec = self._confinement(paths, network=job.network)
                writable = None if spec is None else _writable_of(spec)
                judged = judge_stage(
                    job,
                    StageRun(
                        worktree, cwd, paths.output_file, env, log, deadline, token, writable, spec
                    ),
                    unchanged=self._unchanged(job, patch),
                )
                done: dict[str, Any] = {
                    "patch_commit": patch,
                    "changed_lines": changed,
                    "usage": usage,
                }
                if token.cancelled:
                    return end(AttemptState.CANCELLED, detail=token.reason or "cancelled", **done)
                if judged.failure:
                    return end(
                        AttemptState.FAILED,
                        Failure.VERIFY_FAILED,
                        detail=judged.failure,
                        feedback=judged.feedback,
                        flag=judged.flag,
                        verdict="failed",
                        **done,
                    )
                return end(
                    AttemptState.PASSED,
                    detail=judged.detail,
                    exit_code=0,
                    summary=summary,
                    handoff=judged.handoff,
                    **done,
                )
            notify(Phase(job, "verifying"))
            commands, note = self._commands(job, worktree, patch)
            if note:
                with log.open("a", encoding="utf-8") as fh:
                    fh.write(f"orchardist: {note}\n")
            verdict = self.verifier.verify(
                commands,
                check=job.check,
                baseline=job.baseline,
                check_baseline=job.check_baseline,
                workdir=job.workdir,
                cwd=cwd,
                env={**self._verify_env(job, paths), "ORCHARDIST_PHASE": "verify"},
                log=log,
                scratch=paths.junit_dir,
                deadline=deadline,
                timeout_s=job.timeout_s,
                cancel=token,
                marker=job.marker,
                confine=self._confinement(paths, network=job.network),
                network=job.network,
            )
            common: dict[str, Any] = {
                "patch_commit": patch,
                "changed_lines": changed,
                "usage": usage,
                "summary": summary,
                "verify_commands": commands,
            }
            if verdict.verdict == "cancelled" or token.cancelled:
                return end(AttemptState.CANCELLED, detail=token.reason or "cancelled", **common)
            if not verdict.passed:
                failure = Failure.TIMEOUT if verdict.timed_out else Failure.VERIFY_FAILED
                return end(
                    AttemptState.FAILED,
                    failure,
                    detail=verdict.detail,
                    exit_code=verdict.exit_code,
                    feedback=verdict.feedback,
                    verdict=verdict.verdict,
                    flag=verdict.flag,
                    **common,
                )
            return end(
                AttemptState.PASSED,
                detail=verdict.detail,
                exit_code=0,
                verdict=verdict.verdict,
                **common,
            )
        finally:
            with self._guard_lock:
                self._in_agent.discard(job.id)
                self._suspects.discard(job.id)

    def _take_patch(self, job: Job, paths: AttemptPaths, gitfile: str) -> str:
        """Snapshot the agent's work, refusing what it must not do or produce."""
        worktree = paths.tree
        # Never a plain open: the agent may have left a FIFO there (an open would block for good).
        intact = read_capped(worktree / ".git", GIT_FILE_MAX_BYTES) == gitfile.encode()
        if not intact:
            raise _Contained("the agent deleted or damaged its worktree")
        if self._guard:
            # Nothing tells which agent wrote: every agent running since the last clean look
            # is suspect, and none of their patches is kept. The sandbox prevents this instead.
            with self._guard_lock:
                now = self._fingerprint()
                changed = sorted(
                    k for k in {*now, *self._checkout} if now.get(k) != self._checkout.get(k)
                )
                theirs = [part for part in changed if part in USERS_OWN]
                if theirs:  # the user's own ground: edited files, a checked-out branch
                    self._checkout = {**self._checkout, **{p: now[p] for p in theirs}}
                    _note_checkout(self.log_path(job.run_id, job.id), theirs)
                changed = [part for part in changed if part not in USERS_OWN]
                if changed:
                    self._checkout = now
                    self._changed = ", ".join(changed)
                    self._suspects |= self._in_agent | {job.id}
                suspect = job.id in self._suspects
                self._suspects.discard(job.id)
                self._in_agent.discard(job.id)
            if suspect:
                raise _Contained(
                    f"the user's checkout changed while the agent ran ({self._changed}): it "
                    "wrote outside its worktree? Set guard_checkout = false in [run] if you "
                    "edit the checkout during runs"
                )
        try:
            checkout = self.layout.checkout(paths, job.run_id)
            start = job.start_commit or job.base_commit
            patch = self.repo.snapshot(worktree, start, job.message, checkout)
            if start != job.base_commit:  # what the worktree started with is part of the patch
                patch = self.repo.commit_tree(
                    self.repo.tree_of(patch), [job.base_commit], job.message
                )
        except GitError as exc:
            raise _Contained(f"the agent left a worktree git cannot read: {exc}") from exc
        problems = self.repo.patch_problems(job.base_commit, patch, job.max_patch_bytes)
        if problems:
            raise _Contained("patch refused: " + "; ".join(problems))
        self.repo.set_ref(f"refs/orchardist/runs/{job.run_id}/{job.id}", patch)
        return patch

    def _unchanged(self, job: Job, patch: str) -> bool:
        """Whether the patch's tree is the one the worktree started from."""
        return self.repo.tree_of(patch) == self.repo.tree_of(job.start_commit or job.base_commit)

    def _fingerprint(self) -> dict[str, str]:
        ignore = ["refs/heads/orchardist/"]
        watch = []
        if self.store is not None:
            runs = self.store.runs()
            ignore += [f"refs/heads/{r.branch} " for r in runs]
            watch = [f"refs/heads/{r.branch}" for r in runs if r.state in UNFINISHED]
        return self.repo.checkout_fingerprint(ignore, watch)

    def _commands(self, job: Job, worktree: Path, patch: str) -> tuple[tuple[str, ...], str]:
        """The verify commands; with ``auto_verify``, tests found for the changed files."""
        if not job.auto_verify:
            return job.verify, ""
        prefix = "" if job.workdir in ("", ".") else job.workdir.rstrip("/") + "/"
        changed = self.repo.changed_files(job.base_commit, patch)
        tests = [
            t[len(prefix) :] for t in discover_tests(changed, worktree) if t.startswith(prefix)
        ]
        return auto_commands(tests, job.verify)

    def _verify_env(self, job: Job, paths: AttemptPaths) -> dict[str, str]:
        """Verify commands run the agent's code: they get no agent credentials at all."""
        return self._env(replace(job, profile=None), paths)

    def _agent(self, profile: AgentProfile) -> Agent:
        with self._lock:
            if profile.name not in self._agents:
                self._agents[profile.name] = make_agent(profile)
            return self._agents[profile.name]

    def _env(self, job: Job, paths: AttemptPaths) -> dict[str, str]:
        allow: tuple[str, ...] = ()
        if job.profile is not None:
            allow = (*job.profile.env, *agent_class(job.profile.kind).env_keys)
        env = scrubbed_env(allow, self.environ)
        env.update(
            ORCHARDIST_RUN=job.run_id,
            ORCHARDIST_TASK=job.task_id,
            ORCHARDIST_ATTEMPT=str(job.attempt),
            ORCHARDIST_CANDIDATE=str(job.candidate),
            ORCHARDIST_WORKTREE=str(paths.tree),
        )
        return {**env, **self._private_env(paths)}

    def _private_env(self, paths: AttemptPaths) -> dict[str, str]:
        """HOME and TMPDIR of the attempt's own: what its tools write stays in the attempt
        (and /tmp may be off limits, when the repository lives there). Toolchains installed in
        the real home are named by their variables, so they are still found."""
        home = {"HOME": str(paths.home), "TMPDIR": str(paths.tmp)}
        return {**tool_homes(self._source_env(), self._real_home()), **self._identity, **home}

    def _source_env(self) -> Mapping[str, str]:
        return os.environ if self.environ is None else self.environ

    def _real_home(self) -> Path:
        return Path(self._source_env().get("HOME") or Path.home())

    def _context(
        self,
        job: Job,
        paths: AttemptPaths,
        cwd: Path,
        env: dict[str, str],
        log: Path,
        deadline: float,
        token: CancelToken,
        confine: Spec | None,
    ) -> AgentContext:
        assert job.profile is not None
        prompt_file = log.with_suffix(".prompt.md")
        output_file = paths.output_file
        prompt_file.write_text(job.prompt, encoding="utf-8")
        output_file.unlink(missing_ok=True)
        agent_env = {
            **env,
            "ORCHARDIST_PROMPT": _clip(job.prompt, MAX_ENV_PROMPT_BYTES),
            "ORCHARDIST_PROMPT_FILE": str(prompt_file),
            "ORCHARDIST_OUTPUT": str(output_file),
        }
        if job.stage:
            inputs_file = log.with_suffix(".inputs.json")
            inputs_file.write_text(job.inputs or "{}", encoding="utf-8")
            agent_env.update(ORCHARDIST_STAGE=job.stage, ORCHARDIST_INPUTS=str(inputs_file))
        left = max(0.01, deadline - time.monotonic())
        timeout = min(left, job.profile.timeout_s) if job.profile.timeout_s else left
        return AgentContext(
            run_id=job.run_id,
            task_id=job.task_id,
            attempt=job.attempt,
            candidate=job.candidate,
            title=job.title,
            prompt=job.prompt,
            worktree=paths.tree,
            cwd=cwd,
            prompt_file=prompt_file,
            output_file=output_file,
            log=log,
            env=agent_env,
            timeout_s=timeout,
            cancel=token,
            marker=job.marker,
            writable=None if confine is None else _writable_of(confine),
            confine=confine,
            paths=paths,
            max_cost_usd=job.max_cost_usd,
        )

    def _confinement(self, paths: AttemptPaths, network: bool) -> Spec | None:
        """How a process of the attempt at ``paths`` is confined, in the executor's mode.

        With namespaces: writable only the attempt's tree, git directory, io folder, home and
        tmp (which becomes /tmp); the rest of the host read-only, the user's object store
        included (the private git directory reads it through alternates). ``network`` False
        leaves loopback only.
        """
        if self.mode is Mode.NONE:
            return None
        if self.mode is Mode.LANDLOCK:
            return Spec(self._landlock_writable(paths), mode=Mode.LANDLOCK)
        return Spec(
            writable=(paths.tree, paths.git, paths.io, *self._shared(SHARE_WRITABLE_VAR)),
            readonly=self._hidden_needs(),
            home=paths.home,
            tmp=paths.tmp,
            network=network,
        )

    def _hidden_needs(self) -> tuple[Path, ...]:
        """What confined processes must still read beneath the host's /tmp (looked up once):
        the user's repository (as elsewhere on the host, read-only: the attempts' git
        directories read its objects, the agents their prompt files among its logs), the
        alternates of its objects, this interpreter and orchardist itself, the folders on PATH
        and the toolchain roots."""
        if self._hidden is None:
            objects = self.repo.common_dir / "objects"
            needs: list[Path | str] = [self.repo.root, self.repo.common_dir, objects]
            needs += [sys.prefix, sys.base_prefix]
            with contextlib.suppress(OSError):
                alternates = (objects / "info" / "alternates").read_text().splitlines()
                needs += [objects / line for line in alternates if line.strip()]
            needs.append(Path(__file__).resolve().parents[2])  # orchardist's own source
            env = self._source_env()
            needs += env.get("PATH", os.defpath).split(os.pathsep)
            needs += tool_homes(env, self._real_home()).values()
            needs += self._shared(SHARE_READONLY_VAR)
            self._hidden = hidden_by_tmp(p for p in needs if Path(p).exists())
        return self._hidden

    def _shared(self, var: str) -> tuple[Path, ...]:
        """The existing folders the user lists in ``var`` (absolute, separated like PATH)."""
        listed = self._source_env().get(var, "").split(os.pathsep)
        return tuple(Path(p) for p in listed if p and Path(p).is_absolute() and Path(p).is_dir())

    def _landlock_writable(self, paths: AttemptPaths) -> tuple[Path, ...]:
        """Where a job's processes may write under Landlock.

        The attempt's own folders (tree, private git directory, home, tmp, io), /dev, and the
        temporary folders and the caller's home except what must stay read-only: the
        repository, its git directory, the user's other worktrees, every other attempt's
        folders, and the files that would run code in the user's shell or git (shell profiles,
        ~/.gitconfig, ~/.ssh, ~/.local/bin, ...).
        """
        writable = [*paths.writable, Path("/dev")]
        home = Path((self.environ or os.environ).get("HOME", "/nonexistent"))
        protected = [self.repo.root, self.repo.common_dir, self.layout.folder]
        protected += [*self._user_worktrees(), *(home / name for name in _HOME_PROTECTED)]
        for top in {Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), home}:
            if top.is_dir():
                writable += sandbox.beside(top, protected)
        return tuple(dict.fromkeys(writable))

    def _user_worktrees(self) -> list[Path]:
        """The repository's worktrees (looked up once); orchardist's attempts are not among
        them, they have git directories of their own."""
        if self._theirs is None:
            self._theirs = self.repo.worktrees()
        return self._theirs


# Files in $HOME that run code in the user's shell or git: never writable from the sandbox.
_HOME_PROTECTED = (
    ".gitconfig",
    ".config/git",
    ".ssh",
    ".gnupg",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".local/bin",
    ".local/lib",
    ".pythonrc.py",
    ".config/systemd",
    ".config/autostart",
    ".pam_environment",
)


def _without(spec: Spec, path: Path) -> Spec:
    """``spec`` with ``path`` read-only (a stage that must not change its tree)."""
    kept = tuple(p for p in spec.writable if p != path)
    return replace(spec, writable=kept, readonly=(*spec.readonly, path))


def _writable_of(spec: Spec) -> tuple[Path, ...]:
    """Everything a spec lets its processes write (for agents that tell their CLI so)."""
    return (*spec.writable, *(p for p in (spec.home, spec.tmp) if p is not None))


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")


class _Contained(Exception):
    """The agent did something an attempt may not do; the attempt fails with this reason."""


class LocalBaselines:
    """Runs a command once per (base commit, workdir, command), in its own worktree, and keeps
    the outcome in the store for every later candidate and task on the same base."""

    def __init__(self, executor: LocalExecutor, store: Store) -> None:
        self.executor = executor
        self.store = store
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    def outcome(
        self,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str = "",
        cancel: CancelToken | None = None,
        network: bool = False,
    ) -> CommandOutcome:
        """The cached outcome, or run it now (concurrent callers for one key wait for one run).

        With ``network`` the base is run with network, as the commands it is compared with
        were: a base failing for want of network must not excuse a failure of the change.
        """
        key = self.key(commit, command, workdir, network)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # Across processes too: two orchestrators on one repository run a baseline once.
        with key_lock, flocked(self.executor.log_root.parent / "locks" / f"baseline-{key}.lock"):
            cached = self.store.baseline(key)
            if cached is not None:
                return cached
            outcome, cancelled = self.run(
                key, commit, command, workdir, timeout_s, run_id, cancel, network
            )
            if not cancelled:  # a cut-short run says nothing about the base
                with self.store.transaction() as tx:
                    tx.put_baseline(key, commit, outcome, self.executor.clock())
            return outcome

    @staticmethod
    def key(commit: str, command: str, workdir: str, network: bool) -> str:
        """The store's key for ``command``'s outcome on ``commit`` in ``workdir``."""
        scope = f"[{workdir}]" + (" [network]" if network else "")
        return baseline_key(commit, f"{scope} {command}")

    def run(
        self,
        key: str,
        commit: str,
        command: str,
        workdir: str,
        timeout_s: float,
        run_id: str,
        cancel: CancelToken | None,
        network: bool,
    ) -> tuple[CommandOutcome, bool]:
        """Run the command on ``commit`` in a worktree of its own, now; the outcome, and
        whether it was cancelled (then it says nothing about the base)."""
        ex = self.executor
        name = f"baseline-{key[:16]}"
        paths = ex.layout.baseline(f"{name}.{secrets.token_hex(3)}")  # other orchestrators' differ
        log = ex.log_root / "baselines" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        ex.layout.create(paths, commit)
        try:
            env = scrubbed_env((), ex.environ)
            env.update(ORCHARDIST_PHASE="baseline", ORCHARDIST_RUN=run_id)
            env.update(ex._private_env(paths))
            result, report, _ = run_one(
                command,
                cwd=paths.tree / workdir,
                env=env,
                log=log,
                deadline=time.monotonic() + timeout_s,
                junit=paths.io / "junit.xml",
                confine=ex._confinement(paths, network=network),
                cancel=cancel,
            )
        finally:
            ex.layout.remove(paths)
        outcome = CommandOutcome(command, result.exit_code, result.timed_out, report)
        return outcome, result.cancelled


# Parts of the checkout fingerprint a person changes in normal use during a run (editing files,
# checking out a branch, the run branch included): without a sandbox orchardist cannot tell who
# changed them, and does not fail attempts for it (see README, "What the checkout guard does").
USERS_OWN = frozenset({"files or index", "HEAD"})


def _note_checkout(log: Path, parts: list[str]) -> None:
    """Say in the attempt's log that the user's checkout changed while its agent ran."""
    line = (
        f"orchardist: the user's checkout changed while this agent ran ({', '.join(parts)}); "
        "without the sandbox nobody can tell whose edit it was, so the attempt is kept"
    )
    with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
        fh.write(f"{line}\n")


def _note_ending(job: Job, result: AgentResult, log: Path, reason: str | None) -> AgentResult:
    """End the log of a killed agent with a line saying so, why, and after how long.

    A timeout is told in the configured value (``timed out after 5s``), not in what was left
    of the attempt's time when the agent started.
    """
    took = f"{result.duration_s:.1f}s"
    if result.failure is Failure.TIMEOUT:
        profile_s = job.profile.timeout_s if job.profile is not None else None
        limit = min(job.timeout_s, profile_s) if profile_s else job.timeout_s
        result = replace(result, detail=f"agent timed out after {limit:g}s")
        line = f"orchardist: killed the agent after {took}: it timed out (limit {limit:g}s)"
    elif result.cancelled:
        line = f"orchardist: stopped the agent after {took}: {reason or 'cancelled'}"
    else:
        return result
    with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n{line}\n")
    return result
