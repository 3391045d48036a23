"""Without namespaces, ``run`` and ``doctor`` say what names the checkout by absolute path
(an editable install, a .pth file, PYTHONPATH): verify would test the user's code through it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from editable_support import EditableInstall, calc_repo, checkout, shared_editable_install
from ns_support import require_namespaces
from orchardist.confine.checkoutrefs import references, unseen_path_entries
from run_support import orchardist
from support import make_repo, toml_str, write_plan

TASK = """
[agents.bot]
kind = "shell"
command = {command}

[[task]]
id = "t"
agent = "bot"
prompt = "add a file"
"""


def plan_with(repo: Path, isolation: str) -> Path:
    body = TASK.format(command=toml_str("echo x > new.txt"))
    return write_plan(repo, f'[run]\nisolation = "{isolation}"\n' + body)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> EditableInstall:
    """The calc project installed editable, once for the test process (editable_support)."""
    return shared_editable_install(tmp_path_factory)


def test_an_editable_install_and_pythonpath_into_the_checkout_are_found(
    installed: EditableInstall, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: the project installed editable by pip, and PYTHONPATH naming its src folder
    repo = checkout(installed, "a + b", monkeypatch)
    env = {**os.environ, "PYTHONPATH": f"/nowhere{os.pathsep}{repo / 'src'}"}

    # When
    found = references(repo, env)

    # Then: the .pth pip wrote, its direct_url.json and the variable, each naming the checkout
    named = {(Path(ref.where).name, ref.names) for ref in found}
    assert named == {
        ("PYTHONPATH", str(repo / "src")),
        ("__editable__.calc-0.1.pth", str(repo / "src")),
        ("direct_url.json", str(repo)),
    }


def test_nothing_is_found_when_nothing_names_the_checkout(
    installed: EditableInstall, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: an editable install of another project, whose path starts like this one's
    other = checkout(installed, "a + b", monkeypatch)
    repo = calc_repo(other.with_name("repo"), "a + b")
    assert str(other).startswith(str(repo))  # .../repo-editable: a sibling, alike in name

    # Then
    assert references(repo, {**os.environ, "PYTHONPATH": str(other)}) == []


@pytest.mark.parametrize("command", ["run", "doctor"])
def test_run_and_doctor_say_what_verify_tests_with_isolation_off_only(
    installed: EditableInstall, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # Given: an editable install of the repository on PATH, and a plan with isolation off
    repo = checkout(installed, "a + b", monkeypatch)

    # When
    done = orchardist(repo, command, str(plan_with(repo, "off")))

    # Then: the warning names the checkout and the file pip wrote
    said = done.stdout + done.stderr
    assert "verify and check import your checkout" in said, said
    assert str(repo) in said
    assert "__editable__.calc-0.1.pth" in said

    # And: with namespaces (each attempt's tree at the repository's path) it says nothing
    require_namespaces()
    done = orchardist(repo, command, str(plan_with(repo, "required")))
    assert "import your checkout" not in done.stdout + done.stderr


def test_with_namespaces_folders_on_path_inside_the_repository_are_named_unless_declared(
    tmp_path: Path,
) -> None:
    # Given: PATH naming an ignored .venv/bin and a tracked tools/ folder of the repository
    repo = make_repo(tmp_path / "repo", {".gitignore": ".venv/\n", "tools/run": "echo\n"})
    (repo / ".venv" / "bin").mkdir(parents=True)
    env = {"PATH": os.pathsep.join([str(repo / ".venv" / "bin"), str(repo / "tools"), "/usr/bin"])}

    # When / Then: the ignored one is named, with the declaration that shows it
    said = unseen_path_entries(repo, (), env)
    assert str(repo / ".venv" / "bin") in said
    assert 'environment = [".venv"]' in said
    assert str(repo / "tools") not in said  # the attempt's tree has it
    # declared, nothing is said
    assert unseen_path_entries(repo, (".venv",), env) == ""
