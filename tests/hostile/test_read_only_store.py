"""A repository whose object store cannot be written: the attempt fails as the infrastructure's
fault (``infra_error``, retried as such), never the agent's, and the run ends."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from ns_support import require_namespaces
from run_support import ORCHARDIST
from support import git, toml_str, write_plan
from userstate import assert_untouched, user_ground


def test_a_read_only_object_store_is_an_infrastructure_error_not_the_agent_s(
    repo: Path, tmp_path: Path
) -> None:
    require_namespaces()
    # Given: an agent that writes a new file, and an orchestrator that sees the repository's
    # object store mounted read-only (the agent's view does not matter: orchardist hashes the
    # files and writes the objects itself)
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str("echo fresh-content > fresh.txt")}

        [[task]]
        id = "fresh"
        verify = "test -f fresh.txt"
        """,
    )
    objects = repo / ".git" / "objects"
    before = sorted(str(p.relative_to(objects)) for p in objects.rglob("*"))
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    read_only = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(objects), str(objects)]

    ground = user_ground(repo)
    # When
    done = subprocess.run(
        [*read_only, *ORCHARDIST, "run", str(plan)],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Then: the run ended failed, every attempt an infrastructure error naming the cause
    assert done.returncode == 1, done.stdout + done.stderr
    status = subprocess.run(
        [*ORCHARDIST, "status", "--json"], cwd=repo, capture_output=True, text=True, check=True
    )
    doc = json.loads(status.stdout)
    assert doc["state"] == "failed"
    attempts = doc["tasks"][0]["attempts"]
    assert attempts, doc
    assert {a["failure"] for a in attempts} == {"infra_error"}, attempts
    assert all("Read-only file system" in a["detail"] for a in attempts), attempts
    # and the store is as it was, and the run branch still at the base
    assert sorted(str(p.relative_to(objects)) for p in objects.rglob("*")) == before
    assert git(repo, "rev-parse", doc["branch"]) == git(repo, "rev-parse", "HEAD")
    assert_untouched(repo, ground)
