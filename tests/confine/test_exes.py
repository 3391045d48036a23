"""What an attempt's commands need to see, wherever they are installed (confine/exes.py)."""

from __future__ import annotations

from pathlib import Path

from exes_support import FIXER, executable, npm_install
from orchardist.confine.exes import Scope, path_reach, reach, trace

# -- what is shown ---------------------------------------------------------------------------


def test_trace_names_every_link_met_on_the_way(tmp_path: Path) -> None:
    # Given a folder link and a relative file link inside what it points to
    (tmp_path / "real" / "bin").mkdir(parents=True)
    executable(tmp_path / "real" / "lib" / "tool.js", "")
    (tmp_path / "real" / "bin" / "tool").symlink_to("../lib/tool.js")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    # When traced
    links, end = trace(tmp_path / "via" / "bin" / "tool")
    # Then both links are named where they lie, and the end is the file
    assert links == [tmp_path / "via", tmp_path / "real" / "bin" / "tool"]
    assert end == tmp_path / "real" / "lib" / "tool.js"


def test_trace_climbs_from_where_a_link_leads_and_stops_at_the_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "up").symlink_to(tmp_path / "a" / "b")
    assert trace(tmp_path / "up" / ".." / "b") == ([tmp_path / "up"], tmp_path / "a" / "b")
    assert trace(Path("/../../usr")) == ([], Path("/usr"))


def test_an_npm_tool_is_shown_with_its_node_modules_folder(tmp_path: Path) -> None:
    # Given a tool installed under /tmp and reached through npm's .bin link
    bin_dir = npm_install(tmp_path / "tools", "fixer", FIXER)
    scope = Scope(tmp_path / "repo")
    # When its command line is looked at
    found = reach(["fixer", "--flag"], str(bin_dir), scope)
    # Then the node_modules folder that holds the package (and its hoisted dependencies) is shown
    assert found.binds == (tmp_path / "tools" / "node_modules",)
    assert found.refused == ()


def test_a_script_named_by_the_command_line_is_shown_itself(tmp_path: Path) -> None:
    script = executable(tmp_path / "scripts" / "agent.py", "print('hi')\n")
    found = reach(["python3", str(script)], "/usr/bin:/bin", Scope(tmp_path / "repo"))
    assert found.binds == (script,)


def test_a_virtual_environment_is_shown_whole_for_its_site_packages(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "pyvenv.cfg").parent.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tool = executable(venv / "bin" / "tool", f"#!{venv}/bin/python\n")
    assert reach([str(tool)], "", Scope(tmp_path / "repo")).binds == (venv,)


def test_a_folder_on_path_that_is_a_link_is_made_again_inside(tmp_path: Path) -> None:
    # Given PATH naming a link under /tmp to a folder outside it
    (tmp_path / "bin").symlink_to("/usr/bin")
    # Then the link itself is made again inside (its target is seen anyway)
    found = path_reach(str(tmp_path / "bin"), Scope(tmp_path / "repo"))
    assert found.symlinks == (("/usr/bin", tmp_path / "bin"),)
    assert found.binds == ()


def test_a_command_in_the_repository_is_refused_with_the_reason_and_the_fix(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    tool = executable(repo / "bin" / "agent", "#!/bin/sh\n")
    (refusal,) = reach([str(tool)], "", Scope(repo)).refused
    assert refusal.path == tool
    assert "inside the repository" in refusal.reason
    assert "[run] environment" in refusal.fix
    # unless it is in a folder of the checkout shown as the environment
    assert reach([str(tool)], "", Scope(repo, (repo / "bin",))).refused == ()


def test_a_package_folder_holding_the_attempt_folders_is_refused(tmp_path: Path) -> None:
    # Given a script in a folder whose package root would also show orchardist's attempts
    venv = tmp_path / "venv"
    (venv / "pyvenv.cfg").parent.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("")
    tool = executable(venv / "bin" / "tool", "#!/bin/sh\n")
    scope = Scope(tmp_path / "repo", forbidden=(venv / "attempts",))
    (refusal,) = reach([str(tool)], "", scope).refused
    assert "would show attempt folders" in refusal.reason
