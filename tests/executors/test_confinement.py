"""How an executor confines its attempts: the view each process gets (executors/confinement.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchardist.confine.isolation import Mode
from orchardist.confine.layout import Layout
from orchardist.errors import IsolationError
from orchardist.executors.confinement import Confinement
from orchardist.git.repo import Repo


def test_attempt_folders_inside_the_repository_are_refused_with_namespaces(repo: Path) -> None:
    # Given: attempt folders that would live inside the repository (its path shows each
    # attempt's tree, which would hide them)
    layout = Layout(Repo(repo), repo / ".cache" / "orchardist", repo / ".git" / "orchardist")

    # Then: refused, saying where and what to do
    with pytest.raises(IsolationError, match=r"inside the repository.*ORCHARDIST_WORKDIR_ROOT"):
        Confinement(Repo(repo), layout, Mode.NAMESPACES, None)
    # without namespaces nothing is shown at the repository's path: nothing to refuse
    Confinement(Repo(repo), layout, Mode.NONE, None)


def test_every_view_of_an_attempt_shows_its_tree_at_the_repository_and_the_environment(
    repo: Path, tmp_path: Path
) -> None:
    # Given: an executor's confinement with an environment folder, and two sets of attempt
    # folders (an agent's, and a fresh view made for verify)
    layout = Layout(Repo(repo), tmp_path / "attempts", repo / ".git" / "orchardist")
    confinement = Confinement(Repo(repo), layout, Mode.NAMESPACES, None, (".venv",))

    for paths in (layout.attempt("r1", "t.1"), layout.baseline("b")):
        # When
        spec = confinement.spec(paths, network=False)

        # Then: each shows its own tree at the repository's path, with the environment and the
        # link its git directory's alternates name
        assert spec is not None and spec.view is not None
        assert (spec.view.root, spec.view.tree) == (repo, paths.tree)
        assert spec.view.environment == (repo / ".venv",)
        assert spec.view.links == ((layout.user_git, (repo / ".git").resolve()),)
        assert not any(p.is_relative_to(repo) for p in (*spec.readonly, *spec.writable))
