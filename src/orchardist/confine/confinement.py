"""How the processes of an attempt are confined on this machine, in the executor's isolation
mode: which folders they may write, and what beneath the host's /tmp they must still read."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import IsolationError
from ..git.repo import Repo
from . import userlink
from .exes import Reach, Scope, path_reach, private_files, reach
from .homes import tool_homes
from .isolation import Mode, choose, hidden_by_tmp
from .layout import Layout
from .paths import workdir_root

if TYPE_CHECKING:  # (a plan's fields are read, the module is not needed)
    from ..specs import Plan
    from .attemptpaths import AttemptPaths
    from .spec import Spec

# Folders (separated like PATH) shown to every confined process although the private /tmp would
# hide them, read-only or writable: for test harnesses, and caches the user means to share.
SHARE_READONLY_VAR = "ORCHARDIST_SHARE_READONLY"
SHARE_WRITABLE_VAR = "ORCHARDIST_SHARE_WRITABLE"


class Confinement:
    """The confinement of every attempt of one executor (what it looks up, it looks up once)."""

    def __init__(
        self,
        repo: Repo,
        layout: Layout,
        mode: Mode,
        environ: Mapping[str, str] | None,
        environment: tuple[str, ...] = (),
    ) -> None:
        self.repo, self.layout, self.mode, self.environ = repo, layout, mode, environ
        self.root = Path(repo.root).absolute()
        self.environment = tuple(self.root / name for name in environment)
        self._theirs: list[Path] | None = None
        self._hidden: tuple[Path, ...] | None = None
        self._reached: dict[tuple[str, ...], Reach] = {}
        self._identity: dict[str, str] | None = None
        if mode is Mode.NAMESPACES and layout.folder.absolute().is_relative_to(self.root):
            raise IsolationError(
                f"the attempt folders ({layout.folder}) are inside the repository {self.root}: "
                "each attempt's tree is shown at the repository's path, which would hide them; "
                "set $ORCHARDIST_WORKDIR_ROOT or [run] workspace to a folder outside it"
            )

    def source_env(self) -> Mapping[str, str]:
        """The environment attempts' environments are made from."""
        return os.environ if self.environ is None else self.environ

    def real_home(self) -> Path:
        """The user's own home (attempts get homes of their own)."""
        return Path(self.source_env().get("HOME") or Path.home())

    def private_env(self, paths: AttemptPaths) -> dict[str, str]:
        """HOME and TMPDIR of the attempt's own: what its tools write stays in the attempt
        (and /tmp may be off limits, when the repository lives there). Toolchains installed in
        the real home are named by their variables, so they are still found; commits inside
        are the user's."""
        if self._identity is None:  # the user's ~/.gitconfig is out of sight in the private HOME
            name, email = self.layout.identity()
            self._identity = {
                f"GIT_{role}_{key}": value
                for role in ("AUTHOR", "COMMITTER")
                for key, value in (("NAME", name), ("EMAIL", email))
            }
        tools = tool_homes(self.source_env(), self.real_home())
        return {**tools, **self._identity, "HOME": str(paths.home), "TMPDIR": str(paths.tmp)}

    def spec(
        self,
        paths: AttemptPaths,
        network: bool,
        hidden: tuple[Path, ...] = (),
        words: tuple[str, ...] = (),
        user_git: bool = True,
    ) -> Spec | None:
        """How a process of the attempt at ``paths`` is confined, in the executor's mode.

        With namespaces: writable only the attempt's tree, git directory, io folder, home and
        tmp (which becomes /tmp); the rest of the host read-only. The tree is seen both at its
        own path and at the repository's, which hides the user's checkout (see
        :class:`~.spec.RepoView`): the user's git directory is read at the layout's link to it (the
        private git directory reads its objects through alternates naming that link), and the
        ``[run] environment`` folders of the checkout read-only in their places. ``network``
        False leaves loopback only; ``hidden`` folders are shown empty. What the command line
        ``words`` and the tools on PATH need beneath the host's /tmp is shown read-only (see
        exes.py; what cannot be, :meth:`refusals` names). ``user_git`` False: a tree with a
        git directory of its own (doctor's probe) needs no link to the user's.
        """
        from .spec import RepoView, Spec  # (only where processes start: not for validate)

        if self.mode is Mode.NONE:
            return None
        if self.mode is Mode.LANDLOCK:
            return Spec(self._landlock_writable(paths), mode=Mode.LANDLOCK)
        shared = self._outside(self._shared(SHARE_WRITABLE_VAR))
        links = ((self._user_git(), self.repo.common_dir.resolve()),) if user_git else ()
        view = RepoView(self.root, paths.tree, self.environment, links=links)
        tools = self.reach(words)
        return Spec(
            writable=(paths.tree, paths.git, paths.io, *shared),
            readonly=tuple(dict.fromkeys((*self._hidden_needs(), *tools.binds))),
            home=paths.home,
            tmp=paths.tmp,
            network=network,
            view=view,
            hidden=hidden,
            symlinks=tools.symlinks,
        )

    def scope(self) -> Scope:
        """What attempts see at the repository's path, and the folders they must not see."""
        return Scope(self.root, self.environment, (self.layout.folder.absolute(),), self._tracked)

    def _tracked(self, path: Path) -> bool:
        """Whether git tracks ``path`` in the checkout (so each attempt's tree has it)."""
        rel = os.path.relpath(path, self.root)
        return self.repo.run_git("ls-files", "--error-unmatch", "--", rel).returncode == 0

    def reach(self, words: tuple[str, ...] = ()) -> Reach:
        """What the command line ``words`` and the tools on PATH need to see (looked up once
        per command line)."""
        if words not in self._reached:
            path_env = self.source_env().get("PATH", os.defpath)
            if words:
                found = self.reach() + reach(words, path_env, self.scope())
            else:
                found = path_reach(path_env, self.scope())
            self._reached[words] = found
        return self._reached[words]

    def unseen(self, words: tuple[str, ...]) -> list[Path]:
        """The files beneath the host's /tmp that the command line ``words`` names and that
        confined processes other than the agent (verify commands, checks) do not see."""
        if self.mode is not Mode.NAMESPACES:
            return []
        shown = (*self._hidden_needs(), *self.reach().binds)
        return [
            path
            for path in private_files(words)
            if not any(p.is_relative_to(s) for s in shown for p in (path, path.resolve()))
        ]

    def refusals(self, words: tuple[str, ...]) -> list[str]:
        """Why the command line ``words`` cannot run confined (empty when it can): only with
        namespaces, where attempts see a view of the host."""
        if self.mode is not Mode.NAMESPACES or not words:
            return []
        shown = " ".join(words[:1])
        return [r.message(f"`{shown}`") for r in self.reach(words).refused]

    def _user_git(self) -> Path:
        """The layout's link to the user's git directory, made again if another orchestrator's
        tidy removed it since this attempt's git directory named it (see userlink.py)."""
        return userlink.ensure(self.layout.folder, self.repo.common_dir).parent

    def _outside(self, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        """Those of ``paths`` outside the repository: inside it, only the attempt's tree and
        the declared environment are seen."""
        return tuple(p for p in paths if not Path(p).absolute().is_relative_to(self.root))

    def _hidden_needs(self) -> tuple[Path, ...]:
        """What confined processes must still read beneath the host's /tmp (looked up once):
        the user's git directory when it is not in the checkout (a worktree's), the alternates
        of its objects, this interpreter and orchardist itself, the folders on PATH and the
        toolchain roots; never anything inside the repository, where the attempt's tree is."""
        if self._hidden is None:
            objects = self.repo.common_dir / "objects"
            needs: list[Path | str] = [self.repo.common_dir, objects]
            needs += [sys.prefix, sys.base_prefix]
            with contextlib.suppress(OSError):
                alternates = (objects / "info" / "alternates").read_text().splitlines()
                needs += [objects / line for line in alternates if line.strip()]
            needs.append(Path(__file__).resolve().parents[2])  # orchardist's own source
            env = self.source_env()
            needs += env.get("PATH", os.defpath).split(os.pathsep)
            needs += tool_homes(env, self.real_home()).values()
            needs += self._shared(SHARE_READONLY_VAR)
            found = hidden_by_tmp(p for p in needs if p and Path(p).exists())
            self._hidden = self._outside(found)
        return self._hidden

    def _shared(self, var: str) -> tuple[Path, ...]:
        """The existing folders the user lists in ``var`` (absolute, separated like PATH)."""
        listed = self.source_env().get(var, "").split(os.pathsep)
        return tuple(Path(p) for p in listed if p and Path(p).is_absolute() and Path(p).is_dir())

    def _landlock_writable(self, paths: AttemptPaths) -> tuple[Path, ...]:
        """Where a job's processes may write under Landlock.

        The attempt's own folders (tree, private git directory, home, tmp, io), /dev, and the
        temporary folders and the caller's home except what must stay read-only: the
        repository, its git directory, the user's other worktrees, every other attempt's
        folders, and the files that would run code in the user's shell or git (shell profiles,
        ~/.gitconfig, ~/.ssh, ~/.local/bin, ...).
        """
        import tempfile  # (and random): for Landlock alone, not for validate's checks

        from . import landlock as sandbox

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


def for_plan(
    plan: Plan,
    environ: Mapping[str, str] | None = None,
    mode: Mode | None = None,
    repo: Repo | None = None,
) -> Confinement | None:
    """The confinement a local run of ``plan`` gives its attempts, for the checks made before
    one (validation, doctor), in ``mode`` (None: the one the run gets); None where none can
    be made (the run itself says why). ``repo``: the plan's, when the caller has it open."""
    repo = Repo(plan.repo) if repo is None else repo
    root = workdir_root(plan.run.workspace, environ)
    try:
        mode = choose(plan.run.isolation) if mode is None else mode
        layout = Layout(repo, root, repo.common_dir / "orchardist")
        return Confinement(repo, layout, mode, environ, plan.run.environment)
    except IsolationError:
        return None


def without(spec: Spec, path: Path) -> Spec:
    """``spec`` with ``path`` read-only (a stage that must not change its tree)."""
    kept = tuple(p for p in spec.writable if p != path)
    return replace(spec, writable=kept, readonly=(*spec.readonly, path))
