"""How orchardist runs git: the executable found once, and an environment in which nothing the
user or an agent configured runs, with the user's identity and a few settings carried over as
data. :class:`Plumbing` is what helpers outside :class:`gitrepo.Repo` need of one."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .fixed import FIXED_CONFIG
from .which import which

FALLBACK_NAME = "orchardist"
FALLBACK_EMAIL = "orchardist@localhost"

# Resolved once: a `git` an agent drops earlier on PATH later is never the one we run.
GIT = which("git") or "git"
# Data, not commands, kept from the user's global configuration: which files they ignore
# everywhere (a snapshot must not commit them), and repositories they trust though another
# user owns them.
CARRIED_CONFIG = r"core\.excludesfile|safe\.directory"
# The only settings by which git's author and committer identities differ in the environment
# orchardist asks them in (which has no ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` variable): asked
# with CARRIED_CONFIG, in the same process; where none is set, one ``git var`` tells both.
ROLE_CONFIG = r"(author|committer)\.(name|email)"
# Whether commits are to be signed, as orchardist's git reads it (the repository's own config:
# local and worktree scopes), asked in the same process too (see Repo._native).
SIGNING = "commit.gpgsign"
# what the one ``git config`` process of :func:`carried_config` asks
ASKED_CONFIG = rf"^({CARRIED_CONFIG}|{ROLE_CONFIG}|{re.escape(SIGNING)})$"
REPO_SCOPES = ("local", "worktree")


class Plumbing(Protocol):
    """The part of :class:`gitrepo.Repo` that snapshots and fingerprints use."""

    root: Path
    common_dir: Path

    def git(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        ok: Sequence[int] = (0,),
    ) -> str: ...

    def run_git(
        self,
        *args: str,
        cwd: Path | None = None,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]: ...

    def git_bytes(
        self, *args: str, cwd: Path, env: Mapping[str, str], stdin: bytes | None = None
    ) -> bytes: ...

    def tree_of(self, commit: str) -> str: ...

    def commit_tree(self, tree: str, parents: Sequence[str], message: str) -> str: ...

    def check_objects(self, oids: Sequence[str]) -> None: ...

    def read_objects(self, oids: Sequence[str]) -> dict[str, tuple[str, bytes]]: ...


def git_env(root: Path, identity: bool = True, carry: bool = True) -> dict[str, str]:
    """orchardist's own git: a fixed configuration in which nothing configured runs.

    No system or global configuration (an agent that could write ``~/.gitconfig.local``,
    pulled in by an ``[include]``, would otherwise plant an fsmonitor, a filter driver or
    a ``gpg.program`` that runs in the orchestrator, with its environment), no global
    attributes, no hooks, no fsmonitor. What orchardist needs from the user's own
    configuration is data, read once here: the identity and a few settings (FIXED_CONFIG,
    CARRIED_CONFIG). The repository's own config is still read: only the user writes it.
    ``identity=False`` leaves the identity out (one or two git processes fewer) for a caller
    that only reads: no commit, no ref moved. ``carry=False`` leaves CARRIED_CONFIG out (a
    process fewer), for a caller that lists no untracked file and asks again with it where git
    refuses the repository (see :class:`~orchardist.git.repo.Repo`).
    """
    return git_setup(root, identity, carry)[0]


def git_setup(
    root: Path, identity: bool = True, carry: bool = True
) -> tuple[dict[str, str], bool | None]:
    """:func:`git_env`, and whether commits are to be signed where the process that read the
    carried settings could tell (None: ask git). A pair, not a record: every command imports
    this module, and a dataclass costs a millisecond or two to make."""
    env = user_env()
    carried, same_roles, signing = carried_config(root, env) if carry else ([], False, None)
    who = identity_env(root, env, same_roles) if identity else {}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_ATTR_NOSYSTEM="1")
    env.update(config_env([*FIXED_CONFIG, *carried]))
    env.update(who)
    return env, signing


def user_env() -> dict[str, str]:
    """The user's environment without its ``GIT_*`` variables, quiet: what orchardist asks the
    user's own git configuration in (the identity, CARRIED_CONFIG)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return env


def identity_env(root: Path, env: Mapping[str, str], same_roles: bool = False) -> dict[str, str]:
    """Author and committer variables for commits: the identity the user's git has (read with
    the user's own configuration), or orchardist's where git has none.

    ``same_roles``: the user's configuration is known to set no ``author.*`` or
    ``committer.*`` name or email (:func:`carried_config` asked): then git computes both
    identities from the same settings, and one ``git var`` is asked for both (a process fewer).
    """
    out: dict[str, str] = {}
    for role in ("AUTHOR",) if same_roles else ("AUTHOR", "COMMITTER"):
        proc = subprocess.run(
            [GIT, "var", f"GIT_{role}_IDENT"],
            cwd=root,
            capture_output=True,
            text=True,
            env={**env, "GIT_TERMINAL_PROMPT": "0"},
            check=False,
        )
        name, _, email = proc.stdout.rsplit(" ", 2)[0].partition(" <")
        email = email.removesuffix(">")
        if proc.returncode != 0 or "@" not in email or "(none)" in email or not name.strip():
            name, email = FALLBACK_NAME, FALLBACK_EMAIL
        out[f"GIT_{role}_NAME"] = name.strip()
        out[f"GIT_{role}_EMAIL"] = email.strip()
    if same_roles:
        out["GIT_COMMITTER_NAME"], out["GIT_COMMITTER_EMAIL"] = name.strip(), email.strip()
    return out


def carried_config(
    root: Path, env: Mapping[str, str]
) -> tuple[list[tuple[str, str]], bool, bool | None]:
    """The settings of CARRIED_CONFIG as the user's git has them (system, global, includes);
    whether git answered and named no ROLE_CONFIG setting (see :func:`identity_env`); whether
    commits are to be signed (None: not told plainly). One git process."""
    proc = subprocess.run(
        [GIT, "config", "-z", "--includes", "--show-scope", "--get-regexp", ASKED_CONFIG],
        cwd=root,
        capture_output=True,
        text=True,
        errors="replace",
        env={**env, "GIT_TERMINAL_PROMPT": "0"},
        check=False,
    )
    told = proc.returncode in (0, 1)  # exit 1: no setting matched; else git could not tell
    carried, roles, signing = [], False, None if not told else False
    fields = proc.stdout.split("\0")
    for scope, record in zip(fields[0::2], fields[1::2], strict=False):
        key, valued, value = record.partition("\n")
        if re.fullmatch(ROLE_CONFIG, key):
            roles = True
        elif key == SIGNING:
            if scope in REPO_SCOPES and told:  # the last one wins, as git reads it
                signing = _plain_bool(value if valued else None)
        elif key:
            if key == "core.excludesfile":
                value = os.path.expanduser(value)
                if not _regular_file(value):  # a FIFO there would hang every ls-files
                    continue
            carried.append((key, value))
    return carried, told and not roles, signing


def _plain_bool(value: str | None) -> bool | None:
    """A boolean setting's value as git reads it, where it is spelled plainly; None for the
    rest (numbers with units, bad values: git is asked)."""
    if value is None:  # a key without ``=``
        return True
    spelled = value.strip().lower()
    if spelled in ("true", "yes", "on", "1"):
        return True
    if spelled in ("false", "no", "off", "0", ""):
        return False
    return None


def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def config_env(settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``GIT_CONFIG_COUNT``/``KEY``/``VALUE`` variables: command-line configuration, which
    outranks every configuration file."""
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for n, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return env
