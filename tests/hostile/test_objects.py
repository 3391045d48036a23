"""Hostile agents against the objects orchardist merges: planted objects and symlink chains.

Outcomes are read from the repository itself (trees, blobs, ``git fsck``), never from what
orchardist says about the run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from support import Finished, git, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]

# Writes a loose object holding BODY under ID into every object folder the worktree's git
# uses (its own and its alternates), replacing what is there: a forged object.
PLANT = r"""
plant() {  # plant ID BODY
  "$PY" - "$1" "$2" <<'PYEOF'
import os, subprocess, sys, zlib
oid, body = sys.argv[1], sys.argv[2].encode()
common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                        capture_output=True, text=True).stdout.strip()
folders = [os.path.join(common, "objects")]
alternates = os.path.join(folders[0], "info", "alternates")
if os.path.exists(alternates):
    folders += [line.strip() for line in open(alternates) if line.strip()]
for folder in folders:
    path = os.path.join(folder, oid[:2], oid[2:])
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".planted"
        with open(tmp, "wb") as fh:
            fh.write(zlib.compress(b"blob %d\0" % len(body) + body))
        os.replace(tmp, path)
    except OSError as exc:
        print("could not plant in", folder, exc, file=sys.stderr)
PYEOF
}
"""


def test_a_planted_object_under_the_verified_file_s_id_changes_nothing_that_is_merged(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that writes a good app.py (the one verify passes), then plants a loose
    # object with other code under that file's blob id, and rewrites the objects of the user's
    # committed README.md and of the run branch's tip commit
    readme_id = git(repo, "rev-parse", "HEAD:README.md")
    base_id = git(repo, "rev-parse", "HEAD")
    command = shell_scripts(
        plant=PLANT
        + f"""
        mkdir -p src
        echo "print('good')" > src/app.py
        plant "$(git hash-object src/app.py)" "print('evil')"
        plant {readme_id} "evil readme"
        plant {base_id} "evil tip"
        """
    )
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "plant"
        verify = "grep -q good src/app.py"
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the branch holds the verified code, read by git from the user's store
    assert run.state is RunState.DONE
    assert run.read("src/app.py") == "print('good')"
    # and the user's README object is intact, and git finds no damaged object at all
    assert git(repo, "cat-file", "blob", readme_id) == "hello"
    assert git(repo, "cat-file", "-t", base_id) == "commit"
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict"], cwd=repo, capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "mismatch" not in fsck.stdout + fsck.stderr
    assert_untouched(repo, ground)


def test_symlink_chains_that_leave_the_tree_through_other_links_are_refused(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: links each staying inside on their own as written (sub/f -> .. is the root),
    # chained so that the kernel leaves the tree: x -> sub/f/../etc/hostname is /../etc/hostname
    command = shell_scripts(
        chain="""
        mkdir -p sub deep/er
        ln -s .. sub/f
        ln -s sub/f/../etc/hostname x
        ln -s ../.. deep/er/up
        ln -s deep/er/up/../../../etc/passwd y
        echo mine > mine.txt
        """,
        fine="""
        mkdir -p sub
        echo fine > fine.txt
        ln -s .. sub/f
        ln -s sub/f/fine.txt z
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}
        circuit_breaker = 100

        [[task]]
        id = "chain"

        [[task]]
        id = "fine"
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the chained links are refused, by name, and nothing of that attempt is merged
    (only,) = run.task("chain")["attempts"]
    assert only["failure"] == "agent_error"
    assert "x is a symlink pointing outside" in only["detail"]
    assert "y is a symlink pointing outside" in only["detail"]
    assert "mine.txt" not in run.tree()
    # while links whose chain stays inside are merged
    assert {"fine.txt", "sub/f", "z"} <= run.tree()
    assert_untouched(repo, ground)


def test_paths_naming_a_git_folder_on_some_file_system_never_reach_a_tree(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that leaves a hook under .GIT (the .git folder on macOS and Windows), an
    # NTFS short name of .git, and an ordinary file; and a well-behaved agent beside it
    command = shell_scripts(
        hooker="""
        mkdir -p .GIT/hooks git~1
        printf '#!/bin/sh\\necho owned\\n' > .GIT/hooks/post-checkout
        echo x > git~1/config
        echo mine > mine.txt
        """,
        fine="echo fine > fine.txt\n",
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}
        circuit_breaker = 100

        [[task]]
        id = "hooker"

        [[task]]
        id = "fine"
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the attempt is refused, naming the paths, and nothing of it is merged
    (only,) = run.task("hooker")["attempts"]
    assert only["failure"] == "agent_error"
    assert ".GIT/hooks/post-checkout" in only["detail"] and "git~1/config" in only["detail"]
    assert run.tree() == {"README.md", ".gitignore", "fine.txt"}
    # and no tree naming them was ever written: git finds none anywhere in the store
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict", "--unreachable", "--dangling"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "hasDotgit" not in fsck.stdout + fsck.stderr
    assert_untouched(repo, ground)
