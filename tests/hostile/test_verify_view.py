"""Verify sees exactly the tree that merges: nothing an agent leaves beside its patch (files git
ignores or excludes, its TMPDIR) reaches the commands that decide whether the patch merges.

A hostile agent plants a ``.pyc`` compiled from correct code beside a broken source (the cache
is git-ignored, so the snapshot leaves it out); a benign one leaves an ignored generated module
its change imports. Both would pass verify in the agent's own tree and merge broken code. Each
runs with and without overlays (the two ways a view is made)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchardist import RunState
from orchardist.confine import isolation
from orchardist.confine.mounts import OVERLAY_VAR
from orchardist.confine.paths import ROOT_VAR
from realtools import require
from run_support import leftovers
from support import Finished, git, make_repo, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]

CORRECT = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a - b\n"  # the same size: the .pyc's header still fits
IMPORT_APP = "import sys; sys.path.insert(0, 'src'); import app; assert app.add(2, 3) == 5"
VERIFY_APP = f'{sys.executable} -c "{IMPORT_APP}"'  # passes only where app adds

# Compiles the correct source, then writes the broken one with the same size and mtime: the
# planted .pyc's header (source mtime and size) matches it, so Python loads the .pyc.
PLANT = f"""\
$PY - "$SYNC" <<'EOF'
import os, py_compile, shutil, sys
correct, broken = {CORRECT!r}, {BROKEN!r}
open("src/app.py", "w").write(correct)
os.utime("src/app.py", (1_700_000_000, 1_700_000_000))
pyc = py_compile.compile("src/app.py", doraise=True)
open("src/app.py", "w").write(broken)
os.utime("src/app.py", (1_700_000_000, 1_700_000_000))
shutil.copy(pyc, os.path.join(sys.argv[1], "planted.pyc"))
EOF
echo planted > "$SYNC/planted"
"""


@pytest.fixture(params=["overlay", "checkout"])
def views(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a view is made: an overlay of the pristine checkout, or a checkout of its own."""
    if request.param == "checkout":
        monkeypatch.setenv(OVERLAY_VAR, "0")
    return str(request.param)


def test_a_planted_pyc_of_correct_code_does_not_let_a_broken_source_merge(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan, views: str
) -> None:
    # Given: src/app.py adds correctly on the base; verify imports it and checks 2 + 3 == 5;
    # an agent breaks it and plants src/__pycache__/app.*.pyc compiled from the correct code
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text(CORRECT)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "app")
    plan = one_task_plan(repo, shell_scripts(t=PLANT), VERIFY_APP)
    ground = user_ground(repo)

    # When
    run = run_plan(plan)

    # Then: the trap was really set (the planted .pyc is the correct code's, and its header
    # fits the broken source, so Python in the agent's tree would have loaded it) ...
    assert (sync / "planted").is_file()
    assert _header_fits((sync / "planted.pyc").read_bytes(), BROKEN)
    # ... and verify ran on the patch's tree alone: the task failed, the broken code did not merge
    assert run.states() == {"t": "failed"}, run.doc
    assert run.read("src/app.py") == CORRECT.rstrip()
    assert run.state is RunState.FAILED
    assert_untouched(repo, ground)
    assert leftovers(repo, run.run.id) == []  # the view went with its attempt


def test_an_ignored_generated_module_the_change_imports_fails_verify(
    tmp_path: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan, views: str
) -> None:
    # Given: a repository that ignores generated.py; an agent (not hostile, only careless) makes
    # src/app.py import a module it generates there, which the merge will not contain
    repo = make_repo(
        tmp_path / "gen",
        {".gitignore": "__pycache__/\ngenerated.py\n", "src/app.py": CORRECT},
    )
    agent = """\
    printf 'VALUE = 5\\n' > src/generated.py
    printf 'from generated import VALUE\\n\\ndef add(a, b):\\n    return VALUE\\n' > src/app.py
    echo generated > "$SYNC/generated"
    """
    plan = one_task_plan(repo, shell_scripts(t=agent), VERIFY_APP)

    # When
    run = run_plan(plan)

    # Then: the agent ran, its patch is only app.py, and verify failed on it (no generated.py)
    assert (sync / "generated").is_file()
    assert run.states() == {"t": "failed"}, run.doc
    (attempt,) = run.ws.store.attempts(run.run.id)
    assert attempt.patch_commit
    changed = git(repo, "diff", "--name-only", attempt.base_commit, attempt.patch_commit)
    assert changed.split() == ["src/app.py"]
    assert "ModuleNotFoundError" in Path(attempt.log_path).read_text(errors="replace")
    assert run.read("src/app.py") == CORRECT.rstrip()


def test_verify_sees_exactly_the_snapshots_files_and_a_tmpdir_of_its_own(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan, views: str
) -> None:
    # Given: the user's info/exclude names local.cfg; an agent changes a file, deletes one,
    # adds one, and also leaves local.cfg (excluded), a __pycache__ (ignored) and a file in its
    # TMPDIR; verify lists every file it can see in its tree and its TMPDIR
    (repo / "gone.txt").write_text("bye\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "gone")
    (repo / ".git" / "info" / "exclude").write_text("local.cfg\n")
    agent = """\
    echo changed > README.md; rm gone.txt; mkdir -p new; echo new > new/file.txt
    echo secret > local.cfg; mkdir -p __pycache__; echo x > __pycache__/mod.pyc
    echo left > "$TMPDIR/left-by-agent"
    echo ran > "$SYNC/agent"
    """
    listing = (
        f"find . -path ./.git -prune -o \\( -type f -o -type l \\) -print | sort > {sync}/seen; "
        f'ls -A "$TMPDIR" > {sync}/tmp'
    )
    plan = one_task_plan(repo, shell_scripts(t=agent), listing)

    # When
    run = run_plan(plan)

    # Then: the agent ran; verify saw the patch's files, no other, and not the agent's TMPDIR
    assert (sync / "agent").is_file()
    assert run.states() == {"t": "done"}, run.doc
    (attempt,) = run.ws.store.attempts(run.run.id)
    files = git(repo, "ls-tree", "-r", "--name-only", attempt.patch_commit).split()
    seen = [line.removeprefix("./") for line in (sync / "seen").read_text().split()]
    assert sorted(seen) == sorted(files)
    assert "new/file.txt" in seen and "gone.txt" not in seen
    # (confined, TMPDIR is /tmp, where what the host's /tmp hides is shown read-only)
    assert "left-by-agent" not in (sync / "tmp").read_text().split()
    assert leftovers(repo, run.run.id) == []


def _header_fits(pyc: bytes, source: str) -> bool:
    """Whether a timestamp-based .pyc's header names a source of ``source``'s size, and its
    magic is this Python's (so it would be loaded in place of that source)."""
    magic, flags = pyc[:4], int.from_bytes(pyc[4:8], "little")
    size = int.from_bytes(pyc[12:16], "little")
    return magic == importlib.util.MAGIC_NUMBER and flags == 0 and size == len(source.encode())


@pytest.fixture
def visible_workdirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Attempt folders where a confined process could see them, as under the default
    ~/.cache/orchardist: outside /tmp, which the namespaces replace with a private one."""
    root = Path(tempfile.mkdtemp(prefix="orchardist-test-", dir="/var/tmp"))
    monkeypatch.setenv(ROOT_VAR, str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_verify_cannot_read_the_agents_own_tree_by_its_absolute_path(
    tmp_path: Path,
    sync: Path,
    shell_scripts: Scripts,
    run_plan: RunPlan,
    views: str,
    visible_workdirs: Path,
) -> None:
    require(isolation.probe().usable, "needs bubblewrap's namespaces")
    # Given: an agent that leaves the correct code in an ignored folder of its own tree and makes
    # src/app.py import it from there by the tree's absolute path (which the merge cannot hold)
    repo = make_repo(tmp_path / "abs", {".gitignore": "stash/\n", "src/app.py": CORRECT})
    agent = """\
    mkdir -p stash
    printf 'def add(a, b):\\n    return a + b\\n' > stash/impl.py
    printf 'import sys\\nsys.path.insert(0, "%s/stash")\\nfrom impl import add\\n' \\
        "$ORCHARDIST_WORKTREE" > src/app.py
    ls "$ORCHARDIST_WORKTREE/stash/impl.py" > "$SYNC/planted"
    """
    plan = one_task_plan(repo, shell_scripts(t=agent), VERIFY_APP)

    # When
    run = run_plan(plan)

    # Then: the agent's folder really was outside /tmp and the trap set, yet verify could not
    # reach it: the import failed, and the run branch keeps the correct code
    planted = Path((sync / "planted").read_text().strip())
    assert planted.is_relative_to(visible_workdirs)
    assert run.states() == {"t": "failed"}, run.doc
    (attempt,) = run.ws.store.attempts(run.run.id)
    assert "ModuleNotFoundError" in Path(attempt.log_path).read_text(errors="replace")
    assert run.read("src/app.py") == CORRECT.rstrip()


def one_task_plan(repo: Path, command: str, verify: str) -> Path:
    """A plan of one task ``t`` (no retries) whose shell agent runs ``command``."""
    return write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "t"
        retries = 0
        verify = {toml_str(verify)}
        """,
    )
