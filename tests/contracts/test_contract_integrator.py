"""The Integrator seam's contract, run against the git integrator and the in-memory one."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path
from typing import Protocol

import pytest

from orchardist.engine.integrators import GitIntegrator, MemoryIntegrator
from orchardist.git.repo import Repo
from orchardist.seams import Integrator
from support import make_repo


class Harness(Protocol):
    integrator: Integrator
    base: str

    def patch(self, on: str, name: str) -> str:
        """A commit on ``on`` that adds the file ``name``: an attempt's patch."""
        ...

    def delete_branch(self) -> None:
        """Delete the run branch behind the integrator's back."""
        ...


class GitHarness:
    def __init__(self, tmp_path: Path) -> None:
        self.root = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
        self.base = Repo(self.root).rev_parse("HEAD")
        subprocess.run(["git", "branch", "run", self.base], cwd=self.root, check=True)
        self.integrator = GitIntegrator(Repo(self.root), "run")
        self.index = tmp_path / "index"

    def _git(self, *args: str, stdin: str | None = None) -> str:
        env = {**os.environ, "GIT_INDEX_FILE": str(self.index)}
        done = subprocess.run(
            ["git", *args], cwd=self.root, env=env, input=stdin, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def patch(self, on: str, name: str) -> str:
        self._git("read-tree", on)
        blob = self._git("hash-object", "-w", "--stdin", stdin=f"{name}\n")
        self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
        return self._git("commit-tree", self._git("write-tree"), "-p", on, "-m", name)

    def delete_branch(self) -> None:
        self._git("branch", "-D", "run")


class MemoryHarness:
    def __init__(self, tmp_path: Path) -> None:
        self.base = "b" * 40
        self.integrator = MemoryIntegrator(self.base)
        self._ids = itertools.count(1)

    def patch(self, on: str, name: str) -> str:
        return f"patch-{next(self._ids)}-{name}"

    def delete_branch(self) -> None:
        assert isinstance(self.integrator, MemoryIntegrator)
        self.integrator.delete()


@pytest.fixture(params=["git", "memory"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return GitHarness(tmp_path) if request.param == "git" else MemoryHarness(tmp_path)


def test_a_patch_on_the_unmoved_tip_lands_without_verifying_again(harness: Harness) -> None:
    # Given: a patch made on the branch's tip
    integ = harness.integrator
    assert integ.tip() == harness.base
    patch = harness.patch(harness.base, "a.txt")
    # When: it is prepared and the branch advanced onto it
    prepared = integ.prepare(harness.base, patch, "task a\n")
    assert prepared.commit is not None and prepared.tip == harness.base
    assert not prepared.needs_verify and prepared.conflicts == ()
    assert integ.advance(prepared)
    # Then: the branch is at the new commit, whose first parent is the old tip
    assert integ.tip() == prepared.commit
    assert integ.parent(prepared.commit) == harness.base


def test_advance_is_a_compare_and_swap(harness: Harness) -> None:
    # Given: two patches prepared against the same tip
    integ = harness.integrator
    first = integ.prepare(harness.base, harness.patch(harness.base, "a.txt"), "a\n")
    second = integ.prepare(harness.base, harness.patch(harness.base, "b.txt"), "b\n")
    # When: the first lands
    assert integ.advance(first)
    # Then: the second cannot, and the branch stays where the first put it
    assert not integ.advance(second)
    assert integ.tip() == first.commit


def test_a_patch_on_a_moved_tip_lands_on_top_and_needs_verifying(harness: Harness) -> None:
    # Given: two patches made on the base; the first has landed
    integ = harness.integrator
    patch_a = harness.patch(harness.base, "a.txt")
    patch_b = harness.patch(harness.base, "b.txt")
    first = integ.prepare(harness.base, patch_a, "a\n")
    assert integ.advance(first)
    # When: the second is prepared
    second = integ.prepare(harness.base, patch_b, "b\n")
    # Then: its commit sits on the new tip and must be verified before it lands
    assert second.commit is not None and second.tip == first.commit and second.needs_verify
    assert integ.advance(second)
    assert integ.parent(second.commit) == first.commit


def test_first_parent_commits_lists_what_landed_oldest_first(harness: Harness) -> None:
    integ = harness.integrator
    landed = []
    for name in ("a.txt", "b.txt", "c.txt"):
        tip = integ.tip()
        prepared = integ.prepare(tip, harness.patch(tip, name), f"{name}\n")
        assert integ.advance(prepared)
        landed.append(prepared.commit)
    assert integ.first_parent_commits(harness.base, integ.tip()) == landed
    assert integ.first_parent_commits(landed[0], integ.tip()) == landed[1:]


def test_reset_moves_the_branch_back_only_from_where_it_is(harness: Harness) -> None:
    # Given: one landed commit
    integ = harness.integrator
    prepared = integ.prepare(harness.base, harness.patch(harness.base, "a.txt"), "a\n")
    assert integ.advance(prepared) and prepared.commit is not None
    # When/Then: a reset from a tip the branch is not at fails; from the real tip it rewinds
    assert not integ.reset(harness.base, harness.base)
    assert integ.tip() == prepared.commit
    assert integ.reset(harness.base, prepared.commit)
    assert integ.tip() == harness.base


def test_a_deleted_branch_reads_as_gone_and_is_made_again_once(harness: Harness) -> None:
    # Given: a run branch with one landed commit
    integ = harness.integrator
    prepared = integ.prepare(harness.base, harness.patch(harness.base, "a.txt"), "a\n")
    assert integ.advance(prepared) and prepared.commit is not None
    assert integ.current() == prepared.commit
    # When: it is deleted under the run
    harness.delete_branch()
    # Then: it reads as gone; it is made again where asked, and only once
    assert integ.current() is None
    assert integ.recreate(prepared.commit)
    assert integ.current() == integ.tip() == prepared.commit
    assert not integ.recreate(harness.base)
    assert integ.tip() == prepared.commit
