"""The attempt's tree at the repository's own path (isolation.RepoView), bwrap alone: what a
confined process reads and writes there, whatever the tree's writability."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_isolation import sh, spec_in

from ns_support import require_namespaces
from orchardist.confine.spec import RepoView, Spec


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The user's checkout (``repo``: a file, an environment folder, a git directory), and
    the attempt's tree as ``w`` (the folder ``sh`` runs in)."""
    require_namespaces()
    repo = tmp_path / "repo"
    (repo / "env").mkdir(parents=True)
    (repo / "env" / "tool").write_text("the user's tool\n")
    (repo / "f").write_text("the user's file\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("the user's HEAD\n")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "f").write_text("the attempt's file\n")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "git").symlink_to(repo / ".git")
    return repo


def view_spec(tmp_path: Path, repo: Path, writable: bool) -> Spec:
    view = RepoView(
        repo,
        tmp_path / "w",
        environment=(repo / "env",),
        links=((tmp_path / "links" / "git", repo / ".git"),),
    )
    spec = spec_in(tmp_path, view=view)
    if writable:
        return spec
    return spec_in(tmp_path, view=view, writable=(), readonly=(*spec.readonly, tmp_path / "w"))


@pytest.mark.parametrize("writable", [True, False])
def test_the_repository_s_path_shows_the_attempt_s_tree_and_the_environment_read_only(
    tmp_path: Path, checkout: Path, writable: bool
) -> None:
    # Given: a process started in the tree, which reads and writes at the repository's path
    script = f"""
        pwd
        cat {checkout}/f {checkout}/env/tool {tmp_path}/links/git/HEAD
        echo new > {checkout}/new && echo wrote-new
        echo planted > {checkout}/env/tool && echo wrote-env
        exit 0
    """

    # When
    done = sh(tmp_path, script, view_spec(tmp_path, checkout, writable))

    # Then: it ran at the repository's path, read the attempt's file, the user's environment
    # and git directory (through the link); only a writable tree took the new file
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [str(checkout), "the attempt's file", "the user's tool", "the user's HEAD"]
    assert ("wrote-new" in lines) is writable
    assert (tmp_path / "w" / "new").exists() is writable
    assert "wrote-env" not in lines
    assert not (checkout / "new").exists()
    assert (checkout / "f").read_text() == "the user's file\n"
    assert (checkout / "env" / "tool").read_text() == "the user's tool\n"
