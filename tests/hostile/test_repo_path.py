"""The attempt's tree at the repository's own path: whatever names the repository by absolute
path (an editable install, a ``.pth`` file) reads the attempt's files inside its namespace,
never the user's checkout (issue 28, finding 1).

Each case is checked by its outcome: what the run branch holds, what the user's checkout holds,
and marker files the agents leave in the ``sync`` folder to prove they ran.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from editable_support import EditableInstall, checkout, shared_editable_install
from ns_support import require_namespaces
from orchardist import RunState
from realtools import require
from support import Finished, git, make_repo, toml_str, write_plan

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    require_namespaces()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> EditableInstall:
    """The calc project installed editable, once for the test process (editable_support)."""
    return shared_editable_install(tmp_path_factory)


def test_a_breaking_change_is_refused_although_the_package_is_installed_editable(
    installed: EditableInstall,
    sync: Path,
    shell_scripts: Scripts,
    run_plan: RunPlan,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given: a package installed editable (its finder names the user's checkout) whose tests
    # pass, and an agent that breaks it (a + b -> a - b)
    repo = checkout(installed, "a + b", monkeypatch)
    command = shell_scripts(
        t="""
        sed -i 's/a + b/a - b/' src/calc/__init__.py
        touch "$SYNC/broke"
        """
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        isolation = "required"
        verify = ["python -m pytest -q -p no:cacheprovider tests"]

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        agent = "sh"
        prompt = "refactor add"
        retries = 0
        """,
    )

    # When: the run verifies the agent's change
    run = run_plan(plan)

    # Then: verify ran on the attempt's tree, failed, and the break did not reach the branch;
    # the user's checkout is untouched
    assert (sync / "broke").exists()
    assert run.states()["t"] == "failed", run.doc
    assert "a + b" in run.read("src/calc/__init__.py")
    assert "a + b" in (repo / "src/calc/__init__.py").read_text()


def test_a_real_fix_with_a_check_merges_although_the_package_is_installed_editable(
    installed: EditableInstall,
    sync: Path,
    shell_scripts: Scripts,
    run_plan: RunPlan,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given: an editable install of a package with a bug (a - b), a check that fails on it,
    # and an agent that fixes it
    repo = checkout(installed, "a - b", monkeypatch)
    command = shell_scripts(
        t="""
        sed -i 's/a - b/a + b/' src/calc/__init__.py
        touch "$SYNC/fixed"
        """
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        isolation = "required"
        verify = ["python -m pytest -q -p no:cacheprovider tests/test_import.py"]

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        agent = "sh"
        prompt = "fix add"
        check = "python -m pytest -q -p no:cacheprovider tests/test_add.py"
        retries = 0
        """,
    )

    # When
    run = run_plan(plan)

    # Then: the check failed on the base and passed on the fix, which merged
    assert (sync / "fixed").exists()
    assert run.state is RunState.DONE, run.doc
    assert run.states()["t"] == "done", run.doc
    assert "a + b" in run.read("src/calc/__init__.py")
    assert "a - b" in (repo / "src/calc/__init__.py").read_text()


def test_git_works_inside_an_attempt_whose_tree_is_at_the_repository_s_path(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: an agent that runs git status, diff and log in its tree, and records where it is
    command = shell_scripts(
        t="""
        echo changed >> README.md
        git status --porcelain > "$SYNC/status"
        git diff > "$SYNC/diff"
        git log --format=%s > "$SYNC/log"
        git cat-file -p HEAD:README.md > "$SYNC/blob"
        pwd > "$SYNC/pwd"
        """
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        isolation = "required"

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        agent = "sh"
        prompt = "change the README"
        """,
    )
    git(repo, "add", "plan.toml")
    git(repo, "commit", "-qm", "plan")

    # When
    run = run_plan(plan)

    # Then: git read the user's objects from inside, at the repository's own path
    assert run.states()["t"] == "done", run.doc
    assert (sync / "status").read_text() == " M README.md\n"
    assert "+changed" in (sync / "diff").read_text()
    assert (sync / "log").read_text().splitlines() == ["plan", "initial"]
    assert (sync / "blob").read_text() == "hello\n"
    assert (sync / "pwd").read_text().strip() == str(repo)


GREET = "module.exports = () => 'hello';\n"


def node_repo(path: Path) -> Path:
    """A Node project whose test needs the package ``greet`` from its ignored node_modules."""
    repo = make_repo(
        path,
        {
            "package.json": '{"name": "app", "version": "1.0.0", "private": true}\n',
            "test.js": "const assert = require('assert');\n"
            "assert.strictEqual(require('greet')(), 'hello');\n",
            ".gitignore": "node_modules/\nplan.toml\n",
        },
    )
    package = repo / "node_modules" / "greet"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "greet", "version": "1.0.0"}\n')
    (package / "index.js").write_text(GREET)
    return repo


def test_node_modules_declared_as_environment_are_seen_read_only_by_verify(
    tmp_path: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    require(shutil.which("node") is not None, "needs node (apt-get install nodejs)")
    # Given: a Node project whose test needs node_modules (ignored, in the user's checkout),
    # declared as environment; one agent makes an honest change, another rewrites the package
    # in node_modules (creating it where it is missing) to suit a test it changes
    repo = node_repo(tmp_path / "repo")
    command = shell_scripts(
        honest="""
        printf 'console.log("still hello");\\n' >> test.js
        touch "$SYNC/honest"
        """,
        plant="""
        sed -i 's/hello/bye/' test.js
        mkdir -p node_modules/greet 2>/dev/null || true
        if printf "module.exports = () => 'bye';\\n" > node_modules/greet/index.js 2>/dev/null
        then echo written > "$SYNC/plant"; else echo refused > "$SYNC/plant"; fi
        """,
    )
    plan = write_plan(
        repo,
        f"""
        [run]
        isolation = "required"
        verify = ["node test.js"]
        environment = ["node_modules"]

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "honest"
        agent = "sh"
        retries = 0

        [[task]]
        id = "plant"
        agent = "sh"
        retries = 0
        """,
    )

    # When
    run = run_plan(plan)

    # Then: the honest change verified against the user's node_modules and merged; the
    # planted package was not what verify saw, and the user's copy is unchanged
    assert (sync / "honest").exists()
    assert (sync / "plant").read_text() == "refused\n"
    assert run.states() == {"honest": "done", "plant": "failed"}, run.doc
    assert run.task("honest")["attempts"][-1]["verdict"] == "verified", run.doc
    assert "still hello" in run.read("test.js")
    assert (repo / "node_modules" / "greet" / "index.js").read_text() == GREET


def test_agent_and_verify_start_in_the_task_s_workdir_at_the_repository_s_path(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a task working in the folder pkg/ of the repository
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    git(repo, "add", "pkg")
    git(repo, "commit", "-qm", "pkg")
    command = shell_scripts(t='pwd > "$SYNC/agent-pwd"\necho "x = 2" > mod.py\n')
    plan = write_plan(
        repo,
        f"""
        [run]
        isolation = "required"
        verify = [{toml_str(f"pwd >> {sync}/verify-pwd")}]

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        agent = "sh"
        workdir = "pkg"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: both ran in pkg/ at the repository's own path, and the change merged
    assert run.states()["t"] == "done", run.doc
    assert (sync / "agent-pwd").read_text() == f"{repo / 'pkg'}\n"
    assert set((sync / "verify-pwd").read_text().splitlines()) == {str(repo / "pkg")}
    assert run.read("pkg/mod.py") == "x = 2"


def test_a_user_worktree_is_shown_at_its_own_path_with_git_working_inside(
    repo: Path, tmp_path: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: a worktree of the user's repository (its .git a file), where the plan runs
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    command = shell_scripts(t='pwd > "$SYNC/pwd"\ngit log --format=%s > "$SYNC/log"\necho x > a\n')
    plan = write_plan(
        worktree,
        f"""
        [run]
        isolation = "required"

        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        agent = "sh"
        """,
    )

    # When
    run = run_plan(plan)

    # Then: the agent ran at the worktree's path, git read the shared objects, and it merged
    assert run.states()["t"] == "done", run.doc
    assert (sync / "pwd").read_text() == f"{worktree}\n"
    assert (sync / "log").read_text() == "initial\n"
    assert run.read("a") == "x"
