"""How one process is confined (:class:`Spec`, with the repository's view :class:`RepoView`)
and the command line that confines it (:func:`wrap`): bubblewrap's namespaces, or Landlock.

Apart from which isolation a run gets (:mod:`.isolation`), which reading a plan needs: only
what starts confined processes makes these records (``validate`` makes none; each costs about
a millisecond to make).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import IsolationError
from .isolation import Mode, namespaces, probe


@dataclass(frozen=True)
class Spec:
    """How one process is confined: what it may write and see, and whether it has network."""

    writable: tuple[Path, ...]  # bound read-write at the same path
    readonly: tuple[Path, ...] = ()  # bound read-only at the same path (say, beneath /tmp)
    home: Path | None = None  # the private HOME (bound read-write, $HOME points to it)
    tmp: Path | None = None  # becomes /tmp ($TMPDIR=/tmp); None: an empty tmpfs
    network: bool = True  # False: a private network namespace with loopback only
    mode: Mode = Mode.NAMESPACES
    view: RepoView | None = None  # the attempt's tree shown at the repository's own path
    hidden: tuple[Path, ...] = ()  # shown empty (a tmpfs over each): the agent's own folders
    symlinks: tuple[tuple[str, Path], ...] = ()  # (text, where): host links made again inside


@dataclass(frozen=True)
class RepoView:
    """The attempt's tree shown at the repository's own path ``root``, so that whatever names
    the repository by absolute path (editable installs, ``.pth`` files, configs) reads the
    attempt's files, never the user's checkout (hidden beneath it).

    ``environment`` are folders of the user's checkout shown read-only at the same place
    inside (say ``root/.venv``); ``links`` are orchardist's symlinks ``(link, target)`` outside
    the repository, each shown inside as ``target`` bound read-only at ``link`` (a bind onto a
    symlink would follow it, into the hidden checkout): the attempts' git directories read the
    user's objects through one.
    """

    root: Path  # the repository's absolute path
    tree: Path  # the attempt's tree, shown there (writable when the spec's writable has it)
    environment: tuple[Path, ...] = ()  # beneath root, bound read-only from the real checkout
    links: tuple[tuple[Path, Path], ...] = ()

    def inside(self, path: Path) -> Path:
        """Where ``path`` (under the tree, say a task's workdir) is seen inside: under root."""
        path = Path(path).absolute()
        if path.is_relative_to(self.tree):
            return self.root / path.relative_to(self.tree)
        return path


def wrap(argv: Sequence[str], spec: Spec, cwd: Path | None = None) -> list[str]:
    """``argv`` run confined as ``spec`` says (unchanged when its mode is NONE)."""
    if spec.mode is Mode.NONE:
        return list(argv)
    writable = [*spec.writable, *(p for p in (spec.home, spec.tmp) if p is not None)]
    if spec.mode is Mode.LANDLOCK:
        from . import landlock as sandbox

        return sandbox.wrap(argv, writable)
    found = probe()
    if not found.usable or found.bwrap is None:
        raise IsolationError(f"namespaces are unavailable: {found.reason}")
    wrapped = namespaces(found.bwrap, spec.network, spec.tmp)
    wrapped += _binds(spec)
    if spec.view is not None and cwd is not None:
        cwd = spec.view.inside(cwd)
    if spec.home is not None:
        wrapped += ["--setenv", "HOME", str(spec.home)]
    if spec.tmp is not None:
        wrapped += ["--setenv", "TMPDIR", "/tmp"]
    if cwd is not None:
        # bwrap would silently start in $HOME when the directory is not visible inside
        wrapped += ["--chdir", str(cwd)]
    return [*wrapped, "--", *argv]


def writable_of(spec: Spec) -> tuple[Path, ...]:
    """Everything a spec lets its processes write (for agents that tell their CLI so)."""
    return (*spec.writable, *(p for p in (spec.home, spec.tmp) if p is not None))


def _binds(spec: Spec) -> list[str]:
    """Bind mounts for the spec's paths, outer ones first so inner ones end up on top.

    bwrap takes a bind's source from the host's root, so a source hidden inside by an earlier
    mount (the user's checkout beneath the attempt's tree) is still the host's."""
    mounts = [_mount(p, "--ro-bind-try", p) for p in spec.readonly]
    mounts += [_mount(p, "--bind", p) for p in spec.writable]
    if spec.home is not None:
        mounts.append(_mount(spec.home, "--bind", spec.home))
    if spec.view is not None:
        mounts += _view_mounts(spec.view, writable=spec.view.tree in spec.writable)
    mounts += [_mount(path, "--tmpfs", None) for path in spec.hidden]
    # a host symlink the private /tmp hides, made again with its own text (a relative one
    # must stay relative: its target is shown in turn)
    mounts += [(len(w.parts), ["--symlink", text, str(w)]) for text, w in spec.symlinks]
    argv: list[str] = []
    for _, mount in sorted(mounts, key=lambda m: m[0]):  # stable: a folder before its contents
        argv += mount
    return argv


def _mount(target: Path, flag: str, source: Path | None) -> tuple[int, list[str]]:
    """One mount, keyed by its target's depth; ``source`` None for a tmpfs."""
    where = Path(target).absolute()
    argv = [flag] if source is None else [flag, str(Path(source).absolute())]
    return len(where.parts), [*argv, str(where)]


def _view_mounts(view: RepoView, writable: bool) -> list[tuple[int, list[str]]]:
    """The mounts of a :class:`RepoView`: the tree at the root (made read-only after the
    environment's mount points are in it, when the spec does not let it be written), the
    environment above it, and each link's folder emptied, then given its target."""
    found = [_mount(view.root, "--bind", view.tree)]
    found += [_mount(path, "--ro-bind-try", path) for path in view.environment]
    if not writable:
        depth = 1 + max(len(Path(p).absolute().parts) for p in (view.root, *view.environment))
        found.append((depth, ["--remount-ro", str(view.root)]))
    for link, target in view.links:
        found += [_mount(link.parent, "--tmpfs", None), _mount(link, "--ro-bind", target)]
    return found
