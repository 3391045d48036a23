"""How an executor confines its attempts: the view each process gets (confine/confinement.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exes_support import FIXER, npm_install
from orchardist.confine.confinement import Confinement
from orchardist.confine.isolation import Mode
from orchardist.confine.layout import Layout
from orchardist.errors import IsolationError
from orchardist.git.repo import Repo
from support import git


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


def test_a_command_in_the_repository_is_refused_only_where_attempts_see_a_view(
    repo: Path, tmp_path: Path
) -> None:
    # Given an agent script in the repository's ignored folder
    tool = repo / "tools" / "agent.sh"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    layout = Layout(Repo(repo), tmp_path / "attempts", repo / ".git" / "orchardist")
    # Then with namespaces (the tree shown at the repository's path) it is refused, naming it
    (said,) = Confinement(Repo(repo), layout, Mode.NAMESPACES, None).refusals((str(tool),))
    assert str(tool) in said and "inside the repository" in said
    # and under Landlock, where the agent runs in the checkout's own files, it is not
    assert Confinement(Repo(repo), layout, Mode.LANDLOCK, None).refusals((str(tool),)) == []
    # nor once git tracks it: each attempt's tree has it
    git(repo, "add", "tools/agent.sh")
    assert Confinement(Repo(repo), layout, Mode.NAMESPACES, None).refusals((str(tool),)) == []


def test_the_agent_spec_shows_its_npm_package_and_a_verify_spec_the_tools_on_path(
    repo: Path, tmp_path: Path
) -> None:
    # Given a tool under /tmp behind npm's link, on PATH
    bin_dir = npm_install(tmp_path / "tools", "fixer", FIXER)
    layout = Layout(Repo(repo), tmp_path / "attempts", repo / ".git" / "orchardist")
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    confinement = Confinement(Repo(repo), layout, Mode.NAMESPACES, environ)
    paths = layout.attempt("r1", "t.1")
    # When the agent's and a verify command's specs are made
    agent = confinement.spec(paths, network=True, words=("fixer",))
    verify = confinement.spec(paths, network=False)
    # Then both show the node_modules folder that holds it, read-only
    assert agent is not None and verify is not None
    for spec in (agent, verify):
        assert tmp_path / "tools" / "node_modules" in spec.readonly
        assert tmp_path / "tools" / "node_modules" not in spec.writable
