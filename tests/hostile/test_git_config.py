"""A hostile agent plants commands in its git configuration: a clean filter for every file, an
fsmonitor hook and a post-commit hook. None may ever run in orchardist's own git."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from run_support import ORCHARDIST, only_run, status
from support import Finished, git, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
# Runs the orchestrator and prints its exit code and the peak resident size (KiB) of it and
# its children.
PEAK = (
    "import resource, subprocess, sys\n"
    "proc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)\n"
    "print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)
Scripts = Callable[..., str]


def test_filters_fsmonitor_and_hooks_an_agent_configures_never_run_in_orchardist_s_git(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that configures its git (wherever that git keeps its config) to run a
    # marker-dropping command for filters, fsmonitor and hooks, and commits to prove they work
    command = shell_scripts(
        plant=f"""
        git config filter.evil.clean "touch {sync}/filter-ran; cat"
        git config core.fsmonitor "touch {sync}/fsmonitor-ran; true"
        hooks=$(git rev-parse --git-path hooks)
        mkdir -p "$hooks"
        printf '#!/bin/sh\\ntouch {sync}/hook-ran\\n' > "$hooks/post-commit"
        chmod +x "$hooks/post-commit"
        echo '* filter=evil' > .gitattributes
        echo code > code.txt
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
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the work is merged, and no planted command ran (the markers are absent)
    assert run.state is RunState.DONE
    assert {"code.txt", ".gitattributes"} <= run.tree()
    assert sorted(p.name for p in sync.iterdir()) == []
    assert_untouched(repo, ground)


def test_commands_in_the_users_global_git_config_never_run_in_orchardist_s_git(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: the user's ~/.gitconfig includes ~/.gitconfig.local, where a hostile agent of an
    # earlier run planted commands: an fsmonitor, hooks, filter, textconv and merge drivers for
    # every file (through a global attributes file) and commit signing by a program of its own
    home = Path.home()
    hooks = sync.parent / "evil-hooks"
    hooks.mkdir()
    for hook in ("reference-transaction", "post-checkout", "post-commit", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {sync}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    gpg = sync.parent / "evil-gpg"
    gpg.write_text(f"#!/bin/sh\ntouch {sync}/gpg-ran\nexit 1\n")
    gpg.chmod(0o755)
    attributes = sync.parent / "evil-attributes"
    attributes.write_text("* filter=evil diff=evil merge=evil\n")
    with (home / ".gitconfig").open("a") as fh:
        fh.write("[include]\n\tpath = ~/.gitconfig.local\n")
    (home / ".gitconfig.local").write_text(
        f"""[core]
\tfsmonitor = "touch {sync}/fsmonitor-ran; false"
\thooksPath = {hooks}
\tattributesFile = {attributes}
[filter "evil"]
\tclean = "touch {sync}/clean-ran; cat"
\tsmudge = "touch {sync}/smudge-ran; cat"
[diff "evil"]
\ttextconv = "touch {sync}/textconv-ran; cat"
[merge "evil"]
\tdriver = "touch {sync}/merge-ran; false"
[commit]
\tgpgSign = true
[gpg]
\tprogram = {gpg}
"""
    )
    # and two tasks editing distant lines of one file at once, so the second merges three ways
    (repo / "README.md").write_text("".join(f"line {n}\n" for n in range(1, 10)))
    git(repo, "-c", "commit.gpgSign=false", "commit", "-qam", "nine lines")
    for marker in sync.iterdir():  # the user's own git ran them, as it may: start from none
        marker.unlink()
    command = shell_scripts(
        first="sed -i 's/line 1$/line one/' README.md\n",
        ninth="sed -i 's/line 9$/line nine/' README.md\n",
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        max_parallel = 2

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "first"

        [[task]]
        id = "ninth"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: none of the planted commands ran (the markers are absent)
    assert sorted(p.name for p in sync.iterdir()) == []
    # and both edits are merged into one file, by git's own merge
    assert run.state is RunState.DONE, run.doc
    assert run.read("README.md").splitlines()[::8] == ["line one", "line nine"]


def test_without_the_sandbox_a_filter_planted_in_the_users_repository_never_runs_in_the_guard(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: no sandbox, and an agent that plants a clean filter (and a filter process) for
    # every file in the user's .git/config and info/attributes, then touches the user's files
    # so that `git status` would have to run the filter to compare them
    planter = f"""
        user_git=$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")
        git --git-dir="$user_git" config filter.evil.clean "touch {sync}/clean-ran; cat"
        git --git-dir="$user_git" config filter.evil.process "touch {sync}/process-ran; false"
        mkdir -p "$user_git/info"
        echo '* filter=evil' >> "$user_git/info/attributes"
        touch "$(dirname "$user_git")/README.md" "$(dirname "$user_git")/.gitignore"
        echo planted > planted.txt
        """
    command = shell_scripts(planter=planter, later="echo later > later.txt\n")
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "planter"

        [[task]]
        id = "later"
        """,
    )

    # When
    run = run_plan(plan, max_parallel=1)

    # Then: the checkout guard caught the planter (the repository's config changed), and no
    # git of orchardist's ran the filter, neither then nor for the task after it
    assert sorted(p.name for p in sync.iterdir()) == []
    (planted,) = run.task("planter")["attempts"]
    assert planted["failure"] == "agent_error", planted
    assert "planted.txt" not in run.tree()
    assert "later.txt" in run.tree()


def test_without_the_sandbox_traps_planted_in_the_git_directory_neither_hang_nor_bloat_the_guard(
    repo: Path, tmp_path: Path
) -> None:
    # Given: no sandbox, and an agent that leaves in the user's .git/hooks a FIFO nobody
    # writes, a link to /dev/zero and a link to a (sparse) file of 300 MB
    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.truncate(300 * 1024 * 1024)
    script = f"""
        user_git=$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")
        mkdir -p "$user_git/hooks"
        mkfifo "$user_git/hooks/fifo"
        ln -s /dev/zero "$user_git/hooks/zero"
        ln -s {big} "$user_git/hooks/big"
        echo mine > mine.txt
        """
    plan = write_plan(
        repo,
        f"""
        [run]
        sandbox = false

        [agents.sh]
        kind = "shell"
        command = {toml_str(script)}

        [[task]]
        id = "trap"
        """,
    )

    # When: the orchestrator runs it as a process of its own
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *ORCHARDIST, "run", str(plan)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then: it ended, the guard having caught the change to the hooks (nothing merged)
    exit_code, peak_kib = (int(v) for v in done.stdout.split())
    assert exit_code == 1
    trap = status(repo, only_run(repo))["tasks"][0]
    assert trap["state"] == "failed"
    assert "git config, hooks or info" in trap["attempts"][0]["detail"]
    # and it never held anything like the 300 MB file (or /dev/zero) in memory
    assert peak_kib < 250 * 1024, f"peak resident size {peak_kib} KiB"
