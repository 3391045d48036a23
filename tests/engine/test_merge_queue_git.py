"""The merge queue on a real git branch: merged = verified, where each patch alone passes and
their combination does not. Verifications are run here on each job's exact tree (read with git),
so what lands is judged by the trees git made, not by what the train says of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchardist.engine.integrators import GitIntegrator
from orchardist.engine.merge import (
    Bisected,
    Conflict,
    Merged,
    MergeStep,
    MergeTrain,
    NeedsVerify,
    VerifyFailed,
)
from orchardist.executors import AttemptJob, Outcome, VerifyJob
from orchardist.git.repo import Repo
from orchardist.state.records import AttemptState
from support import make_repo


class Branch:
    """A repository with a run branch, winners' patches made on its base, and a train on it."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
        self.repo = Repo(self.root)
        self.base = self.repo.rev_parse("HEAD")
        subprocess.run(["git", "branch", "run", self.base], cwd=self.root, check=True)
        self.index = tmp_path / "index"
        self.train = MergeTrain(
            GitIntegrator(self.repo, "run"), "run", lambda c, j: None, lambda r, t: None, ways=2
        )
        self.train.tip = self.base
        self.verified: list[tuple[list[str], bool]] = []  # each verified tree's files, passed?

    def git(self, *args: str, stdin: str | None = None) -> str:
        env = {**os.environ, "GIT_INDEX_FILE": str(self.index)}
        done = subprocess.run(
            ["git", *args], cwd=self.root, env=env, input=stdin, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def won(self, task: str, files: dict[str, str]) -> Outcome:
        """A winner whose patch, made on the base, writes ``files``."""
        self.git("read-tree", self.base)
        for name, text in files.items():
            blob = self.git("hash-object", "-w", "--stdin", stdin=text)
            self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
        patch = self.git("commit-tree", self.git("write-tree"), "-p", self.base, "-m", task)
        job = AttemptJob(f"{task}.1", "r", task, 1, 0, self.base, task, "", None, ("check",),
                         ".", 60.0, f"{task}\n", "m")  # fmt: skip
        return Outcome(job, AttemptState.PASSED, 0.0, 1.0, patch_commit=patch)

    def files(self, commit: str) -> list[str]:
        return self.git("ls-tree", "-r", "--name-only", commit).split()

    def check(self, job: VerifyJob) -> None:
        """The verify command, on the job's tree: a.txt and b.txt must not stand together."""
        files = self.files(job.base_commit)
        passes = not {"a.txt", "b.txt"} <= set(files)
        self.verified.append((files, passes))
        state = AttemptState.PASSED if passes else AttemptState.FAILED
        self.train.verified(Outcome(job, state, 0.0, 1.0, detail="a and b together"))

    def drain(self) -> list[MergeStep]:
        """Run the train to its end with two slots, verifying the oldest job when it waits."""
        steps: list[MergeStep] = []
        out: list[VerifyJob] = []
        while self.train.busy:
            step = self.train.next(lambda task: True, 2 - len(out))
            if step is None:
                self.check(out.pop(0))
                continue
            steps.append(step)
            if isinstance(step, NeedsVerify):
                out.append(step.job)
        return steps


def test_patches_that_pass_alone_but_fail_together_never_share_a_landed_tree(
    tmp_path: Path,
) -> None:
    # Given: a landed; b, c and d wait, made on the base; a and b each pass alone
    branch = Branch(tmp_path)
    for task in "abcd":
        branch.train.enqueue(branch.won(task, {f"{task}.txt": f"{task}\n"}))
    # When: the train runs, verifying each merged tree as git made it
    steps = branch.drain()
    # Then: b is blamed alone, after its batch failed on a tree holding a.txt and b.txt
    assert [s.outcome.job.task_id for s in steps if isinstance(s, VerifyFailed)] == ["b"]
    assert [s.sizes for s in steps if isinstance(s, Bisected)] == [(2, 1), (1, 1)]
    assert any({"a.txt", "b.txt"} <= set(files) and not ok for files, ok in branch.verified)
    # And: the others landed in order, and no commit of the branch holds a.txt and b.txt
    assert [s.outcome.job.task_id for s in steps if isinstance(s, Merged)] == ["a", "c", "d"]
    landed = branch.repo.first_parents(branch.base, branch.train.tip)
    assert len(landed) == 3
    for commit in landed:
        assert not {"a.txt", "b.txt"} <= set(branch.files(commit))
    # And: every landed commit's tree passed, itself or as the ancestor of one that did
    passed = [sorted(files) for files, ok in branch.verified if ok]
    assert sorted(branch.files(branch.train.tip)) in passed
    assert branch.repo.rev_parse("run") == branch.train.tip


def test_a_patch_conflicting_with_a_batch_ahead_waits_for_it_instead_of_being_blamed(
    tmp_path: Path,
) -> None:
    # Given: a landed; b (which fails verification with a) and c both write shared.txt
    branch = Branch(tmp_path)
    branch.train.enqueue(branch.won("a", {"a.txt": "a\n"}))
    branch.train.enqueue(branch.won("b", {"b.txt": "b\n", "shared.txt": "from b\n"}))
    assert isinstance(branch.train.next(lambda task: True, 2), Merged)
    first = branch.train.next(lambda task: True, 2)
    assert isinstance(first, NeedsVerify)
    branch.train.enqueue(branch.won("c", {"shared.txt": "from c\n"}))
    # When: c's turn to stack comes while b is still being verified
    # Then: c waits (it conflicts only with b, which may not land)
    assert branch.train.next(lambda task: True, 2) is None
    # When: b fails; Then: c is verified on the tip without b, and lands: no conflict
    branch.check(first.job)
    steps = branch.drain()
    assert not any(isinstance(s, Conflict) for s in steps)
    assert [s.outcome.job.task_id for s in steps if isinstance(s, Merged)] == ["c"]
    assert branch.git("show", f"{branch.train.tip}:shared.txt") == "from c"
