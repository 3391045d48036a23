"""A hostile agent forges what orchardist trusts: rows of the store (a ``runs`` row naming the
user's branch, which would blind the checkout guard to it; a ``baselines`` row, which would make
a broken change pass as "already failing on the base"; a ``branch_commits`` row, which resume
trusts) and the user's refs. The store and the refs are out of its reach: afterwards they hold
orchardist's rows and the user's commits only."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from orchardist import RunState
from support import Finished, git, toml_str, write_plan
from userstate import assert_untouched, user_ground

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]

FORGE = r"""
user_git=$(dirname "$(cat "$(git rev-parse --absolute-git-dir)/objects/info/alternates")")
head=$(git rev-parse HEAD)
"$PY" - "$user_git/orchardist/state.db" "$head" <<'PYEOF' || true
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=5)
db.execute("insert into runs values ('forged', 'p', 'd', '.', ?, 'feature', 'running', 0, "
           "null, '')", (sys.argv[2],))
db.execute("insert into baselines values ('forged', ?, 'true', 1, 0, null, 0)", (sys.argv[2],))
db.execute("insert into branch_commits values ('forged', ?, 't', 1)", (sys.argv[2],))
db.commit()
PYEOF
cp "$user_git/orchardist/state.db" "$TMPDIR/copy.db" 2>/dev/null &&
  cp "$TMPDIR/copy.db" "$user_git/orchardist/state.db" 2>/dev/null || true
git --git-dir="$user_git" update-ref refs/heads/feature "$head" 2>/dev/null || true
echo forged > forged.txt
"""


def test_rows_and_refs_an_agent_forges_never_reach_the_store_or_the_users_branches(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: the user's branch `feature` (behind main), and an agent that forges store rows and
    # moves `feature` to main's commit
    git(repo, "branch", "feature")
    git(repo, "commit", "-qm", "ahead", "--allow-empty")
    feature = git(repo, "rev-parse", "feature")
    plan = write_plan(
        repo,
        f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(shell_scripts(forger=FORGE))}

        [[task]]
        id = "forger"
        """,
    )

    ground = user_ground(repo)
    # When
    run = run_plan(plan)

    # Then: the user's branch did not move
    assert git(repo, "rev-parse", "feature") == feature
    # and the store, read directly, holds orchardist's rows only
    db = sqlite3.connect(repo / ".git" / "orchardist" / "state.db")
    try:
        assert db.execute("select id, branch from runs").fetchall() == [(run.run.id, run.branch)]
        assert db.execute("select key from baselines").fetchall() == []
        assert {r for (r,) in db.execute("select run_id from branch_commits")} == {run.run.id}
    finally:
        db.close()
    assert run.state is RunState.DONE, run.doc
    assert "forged.txt" in run.tree()
    assert_untouched(repo, ground)
