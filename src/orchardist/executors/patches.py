"""An attempt's work taken as a patch: a commit of its worktree, or a refusal.

The agent's worktree is the agent's: before anything of it is kept, its ``.git`` file must be
the one it was given, the checkout guard must have nothing against it, git must be able to
read it, and the patch must pass the repository's patch rules. Any of these failing is
:class:`Contained`: the attempt fails with that reason and nothing of its work is kept."""

from __future__ import annotations

from pathlib import Path

from ..confine.attemptpaths import AttemptPaths
from ..confine.layout import Layout
from ..errors import GitError
from ..git.repo import Repo
from ..safeio import read_capped
from . import AttemptJob, Job
from .guard import CheckoutGuard

NO_CHANGES = "the agent changed no file"
NO_CHANGES_FEEDBACK = (
    "The previous attempt ended without changing any file in the working tree, so there was "
    "nothing to verify. Make the change in the files themselves; edits that were refused, "
    "only described, or written outside the working tree do not count."
)
GIT_FILE_MAX_BYTES = 4096  # the worktree's .git file: one "gitdir: ..." line


class Contained(Exception):
    """The agent did something an attempt may not do; the attempt fails with this reason."""


def git_file(paths: AttemptPaths) -> str:
    """The worktree's ``.git`` file as given, read before the agent runs (it could rewrite
    the file to point anywhere)."""
    # Never a plain open: a FIFO left there would block an open for good.
    return (read_capped(paths.tree / ".git", GIT_FILE_MAX_BYTES) or b"").decode(errors="replace")


def take_patch(
    repo: Repo,
    layout: Layout,
    guard: CheckoutGuard,
    job: AttemptJob,
    paths: AttemptPaths,
    gitfile: str,
    log: Path,
) -> str:
    """Snapshot the agent's work (its commit, kept under the run's refs), refusing what it
    must not do or produce; :class:`Contained` with the reason."""
    worktree = paths.tree
    # Never a plain open: the agent may have left a FIFO there (an open would block for good).
    if read_capped(worktree / ".git", GIT_FILE_MAX_BYTES) != gitfile.encode():
        raise Contained("the agent deleted or damaged its worktree")
    reason = guard.suspect(job.id, log)
    if reason is not None:
        raise Contained(reason)
    try:
        checkout = layout.checkout(paths, job.run_id)
        patch = repo.snapshot(worktree, job.start, job.message, checkout)
        if job.start != job.base_commit:  # what the worktree started with is part of the patch
            patch = repo.commit_tree(repo.tree_of(patch), [job.base_commit], job.message)
    except GitError as exc:
        raise Contained(f"the agent left a worktree git cannot read: {exc}") from exc
    problems = repo.patch_problems(job.base_commit, patch, job.max_patch_bytes)
    if problems:
        raise Contained("patch refused: " + "; ".join(problems))
    repo.set_ref(f"refs/orchardist/runs/{job.run_id}/{job.id}", patch)
    return patch


def unchanged(repo: Repo, job: Job, patch: str) -> bool:
    """Whether the patch's tree is the one the worktree started from."""
    return repo.tree_of(patch) == repo.tree_of(job.start)
