"""What an attempt's commands need to see, wherever they are installed.

Attempts get a private ``/tmp`` (see isolation.py): a tool installed there is hidden, and so
is the target of a symlink that points there (npm's ``.bin/claude ->
../@anthropic-ai/claude-code/bin/claude.exe``). :func:`reach` follows the agent's command,
every absolute file its command line names (``python /tmp/x.py``), the interpreter of a
script's ``#!`` line, and every folder and link on ``PATH``, through each of their symlinks,
hop by hop as the kernel does, and says what to show read-only inside:

- a path inside a ``node_modules`` folder: the outermost such folder (the package and the
  dependencies npm hoisted beside it);
- a path inside a Python virtual environment (a folder with ``pyvenv.cfg``): that folder;
- any other symlink: the link itself, made again inside (its target is followed in turn);
- any other file: the file itself.

What cannot be shown safely is refused, with the path, the reason and the fix: a command in
the repository (attempts see their own tree there, not the checkout's files) or in orchardist's
attempt folders, or one whose package folder would show either. Folders on ``PATH`` are never
refused: one that cannot be shown stays hidden, as before.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..git.which import which

if TYPE_CHECKING:
    from .refusal import Refusal

PRIVATE = (Path("/tmp"),)  # hidden from confined processes (each attempt's /tmp is its own)
MAX_HOPS = 40  # symlinks followed for one path (the kernel's own limit)
MAX_LINKS_PER_FOLDER = 500  # symlinks looked at in one folder on PATH
SHEBANG_BYTES = 256


def _untracked(path: Path) -> bool:
    return False


def _refusal(path: Path, reason: str, fix: str) -> Refusal:
    """What cannot be shown and why, its record made only here (see :mod:`.refusal`)."""
    from .refusal import Refusal

    return Refusal(path, reason, fix)


@dataclass(frozen=True)
class Scope:
    """Where an attempt's processes run: what they see at the repository's path, and the
    folders they must never see."""

    repo: Path  # the repository's path: attempts see their own tree there
    environment: tuple[Path, ...] = ()  # folders of the checkout shown read-only in it
    forbidden: tuple[Path, ...] = ()  # orchardist's attempt folders
    tracked: Callable[[Path], bool] = _untracked  # whether git tracks a file of the checkout

    def refused(self, path: Path) -> Refusal | None:
        """Why ``path`` cannot be shown as it is on the host, or None (a file of the
        repository that git tracks is in each attempt's tree: not refused)."""
        if (
            path.is_relative_to(self.repo)
            and not any(path.is_relative_to(env) for env in self.environment)
            and not self.tracked(path)
        ):
            return _refusal(
                path,
                f"it is inside the repository {self.repo}, where attempts see their own tree "
                "and not your checkout's files",
                "install it outside the repository, or list its folder in [run] environment",
            )
        for folder in self.forbidden:
            if path.is_relative_to(folder):
                return _refusal(
                    path,
                    f"it is inside orchardist's attempt folders {folder}, which attempts "
                    "must not see",
                    "install it elsewhere",
                )
        return None

    def holds_private(self, folder: Path) -> str | None:
        """What ``folder`` holds that attempts must not see through a bind of it, or None."""
        for name, inner in (
            ("the repository", self.repo),
            *[("attempt folders", f) for f in self.forbidden],
        ):
            if inner.is_relative_to(folder):
                return f"{name} {inner}"
        return None


@dataclass(frozen=True)
class Reach:
    """What to show read-only inside, and what cannot be."""

    binds: tuple[Path, ...] = ()  # bound read-only at the same path
    symlinks: tuple[tuple[str, Path], ...] = ()  # (its text, where): links made again inside
    refused: tuple[Refusal, ...] = ()

    def __add__(self, other: Reach) -> Reach:
        return _tidy(
            (*self.binds, *other.binds),
            (*self.symlinks, *other.symlinks),
            (*self.refused, *other.refused),
        )


def trace(path: Path, seen: dict[str, str | None] | None = None) -> tuple[list[Path], Path]:
    """The symlinks met on the way to ``path`` (each where it lies) and where it ends, hop by
    hop as the kernel resolves it; a loop stops after :data:`MAX_HOPS`. ``seen`` keeps what
    was read of each path (its link text, None for no link) across calls: one lookup costs
    tens of microseconds on some file systems, and a PATH shares most of its prefixes."""
    seen = {} if seen is None else seen
    links: list[Path] = []
    given = os.fspath(path)  # not abspath: ".." after a link climbs from where the link leads
    pending = (given if given.startswith("/") else f"{os.getcwd()}/{given}").split("/")
    current = ""
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.rsplit("/", 1)[0]  # "" is the root
            continue
        step = f"{current}/{part}"
        text = seen[step] if step in seen else seen.setdefault(step, _link_text(step))
        if text is None or len(links) >= MAX_HOPS:
            current = step
            continue
        links.append(Path(step))
        if text.startswith("/"):
            current = ""
        pending[:0] = text.split("/")
    return links, Path(current or "/")


def _link_text(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # no link, or no file
        return None


def reach(words: Iterable[str], path_env: str, scope: Scope) -> Reach:
    """What the command line ``words`` needs to see: its command (found on ``path_env``), the
    interpreter of its ``#!`` line, and the absolute files it names; refusals for what cannot
    be shown."""
    words = list(words)
    if not words:
        return Reach()
    found = _which(words[0], path_env)
    entries = [found] if found is not None else []
    if found is not None:
        interpreter = _interpreter(found, path_env)
        entries += [interpreter] if interpreter is not None else []
    entries += [Path(w) for w in words[1:] if os.path.isabs(w) and os.path.isfile(w)]
    return _tidy(*_placed(entries, scope, strict=True))


def path_reach(path_env: str, scope: Scope) -> Reach:
    """What the folders on ``path_env`` need to see, and the symlinks in those of them that
    are private (npm's ``.bin``); nothing is refused (a folder on PATH that cannot be shown
    stays hidden). A link from a folder the attempts see (``/usr/bin``) into ``/tmp`` is not
    looked for: thousands of lookups for every run, for what only the agent's own command
    does (:func:`reach` follows that one wherever it lies)."""
    entries: list[Path] = []
    seen: dict[str, str | None] = {}
    for folder in dict.fromkeys(path_env.split(os.pathsep)):
        if not folder or not os.path.isabs(folder):
            continue
        links, end = trace(Path(folder), seen)
        entries.append(Path(folder))
        if _private(end) or any(_private(link) for link in links):
            entries += _links_in(end)
    return _tidy(*_placed(entries, scope, strict=False, seen=seen))


def private_files(words: Iterable[str]) -> list[Path]:
    """The absolute files among ``words`` that lie (or whose target lies) beneath a private
    folder: confined processes do not see them unless something shows them."""
    files = [Path(w) for w in words if os.path.isabs(w) and os.path.isfile(w)]
    return [p for p in files if _private(p) or _private(Path(os.path.realpath(p)))]


def shell_words(command: str) -> list[str]:
    """The words of a shell command line (its first command's, roughly): enough to find the
    program and the files it names; [] when it cannot be split."""
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return []


def _which(word: str, path_env: str) -> Path | None:
    if "/" in word:
        return Path(word) if os.path.isabs(word) and os.path.isfile(word) else None
    found = which(word, path=path_env)
    return Path(found) if found is not None and os.path.isabs(found) else None


def _interpreter(script: Path, path_env: str) -> Path | None:
    """The program a ``#!`` line names (through ``env``), or None."""
    try:
        with open(script, "rb") as f:
            head = f.read(SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return _which(words[0], path_env) if words else None


def _links_in(folder: Path) -> Iterator[Path]:
    """The symlinks in ``folder`` (at most :data:`MAX_LINKS_PER_FOLDER`)."""
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(e for e in entries if e.is_symlink()):
                if count >= MAX_LINKS_PER_FOLDER:
                    return
                yield Path(entry.path)
    except OSError:
        return


def _placed(
    entries: Iterable[Path],
    scope: Scope,
    strict: bool,
    seen: dict[str, str | None] | None = None,
) -> tuple[list[Path], list[tuple[str, Path]], list[Refusal]]:
    """Where each entry's way leads (binds, links made again) and what is refused;
    ``strict`` False: nothing is (a folder that cannot be shown stays hidden)."""
    seen = {} if seen is None else seen
    binds: list[Path] = []
    symlinks: list[tuple[str, Path]] = []
    refused: list[Refusal] = []
    for entry in entries:
        links, end = trace(entry, seen)
        for path in (*links, end):
            refusal = scope.refused(path)
            if refusal is not None:
                refused += [refusal] if strict else []
                continue
            if not _private(path) or path.is_relative_to(scope.repo):
                continue  # seen anyway, or in the attempt's own tree
            root = _package(path)
            holds = scope.holds_private(root)
            if holds is not None:
                reason = f"showing {root} would show {holds}"
                fix = "install it in a folder of its own"
                refused += [_refusal(path, reason, fix)] if strict else []
            elif root == path and path in links:
                symlinks.append((seen[str(path)] or "", path))
            else:
                binds.append(root)
    return binds, symlinks, refused


def _private(path: Path) -> bool:
    return any(path.is_relative_to(p) and path != p for p in PRIVATE)


def _package(path: Path) -> Path:
    """The folder to show for ``path``: its outermost ``node_modules``, else its virtual
    environment, else the path itself."""
    for parent in reversed(path.parents):
        if parent.name == "node_modules" and _private(parent):
            return parent
    for parent in path.parents:
        if not _private(parent):
            break
        if (parent / "pyvenv.cfg").is_file():
            return parent
    return path


def _tidy(
    binds: Iterable[Path], symlinks: Iterable[tuple[str, Path]], refused: Iterable[Refusal]
) -> Reach:
    """Without duplicates, nor anything beneath a folder already bound."""
    kept = sorted(set(binds), key=lambda p: len(p.parts))
    folders: list[Path] = []
    for path in kept:
        if not any(path.is_relative_to(f) for f in folders):
            folders.append(path)
    links = [
        (t, p) for t, p in dict.fromkeys(symlinks) if not any(p.is_relative_to(f) for f in folders)
    ]
    return Reach(tuple(folders), tuple(links), tuple(dict.fromkeys(refused)))
