"""Hostile agents against the namespaces every attempt runs in (isolation = "auto" with bwrap).

Each attack is checked by its outcome on the host: processes looked up in the host's ``/proc``,
secrets searched for in every file the run leaves, files compared before and after, and
connections counted by a listener the test itself runs.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ns_support import require_namespaces
from orchardist import RunState
from run_support import interpreter
from support import Finished, git, running_with_arg, toml_str, write_plan

RunPlan = Callable[..., Finished]
Scripts = Callable[..., str]


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    require_namespaces()


def isolation(mode: str) -> str:
    return f'[run]\nisolation = "{mode}"\nmax_parallel = 2\n'


# -- processes ---------------------------------------------------------------------------------


def test_daemons_started_with_setsid_or_a_cleared_environment_do_not_outlive_their_attempt(
    repo: Path, sync: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: agents that leave daemons ignoring SIGTERM behind and exit 0: one through setsid,
    # one through setsid env -i (no marker variable), one that forks again after setsid; each
    # daemon is tagged by an argument of its own, seen from the host's /proc
    tag = f"escapee-{uuid.uuid4().hex}"
    command = shell_scripts(
        setsid=f"""
        setsid sh -c 'trap "" TERM; touch "$1"; sleep 600; :' {tag}-setsid "$SYNC/setsid" \\
            </dev/null >/dev/null 2>&1 &
        wait_for test -e "$SYNC/setsid"
        echo x > setsid.txt
        """,
        envless=f"""
        setsid env -i /bin/sh -c 'trap "" TERM; touch "$1"; sleep 600; :' {tag}-envless \\
            "$SYNC/envless" </dev/null >/dev/null 2>&1 &
        wait_for test -e "$SYNC/envless"
        echo x > envless.txt
        """,
        hopper=f"""
        setsid sh -c '(setsid env -i sh -c "trap \\"\\" TERM; touch $1; sleep 600; :" \\
            {tag}-hopper &) ; exit 0' sh "$SYNC/hopper" </dev/null >/dev/null 2>&1 &
        wait_for test -e "$SYNC/hopper"
        echo x > hopper.txt
        """,
    )
    plan = write_plan(
        repo,
        isolation("required")
        + f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "setsid"

        [[task]]
        id = "envless"

        [[task]]
        id = "hopper"
        """,
    )

    run = run_plan(plan)

    # Then: the daemons provably started, and none of them is alive once the run ended
    assert run.state is RunState.DONE, run.doc
    assert {p.name for p in sync.iterdir()} >= {"setsid", "envless", "hopper"}
    assert running_with_arg(f"{tag}-setsid") == set()
    assert running_with_arg(f"{tag}-envless") == set()
    assert running_with_arg(f"{tag}-hopper") == set()


# -- secrets -----------------------------------------------------------------------------------

STEAL = """
# every environment block this agent can see, the orchestrator's among them
for f in /proc/[0-9]*/environ; do
  tr '\\0' '\\n' < "$f" 2>/dev/null | grep ORCHARDIST_TEST_SECRET || true
done > loot.txt
cat loot.txt
printf '{"summary": "%s"}' "$(tr -d '\\n"' < loot.txt)" > "$ORCHARDIST_OUTPUT"
echo stolen >> loot.txt
"""


def everything_left(repo: Path, home: Path) -> bytes:
    """Every byte a run left: logs, prompts, the store, the run branch's files, the home."""
    blobs = []
    for folder in (repo / ".git" / "orchardist", home):
        blobs += [p.read_bytes() for p in folder.rglob("*") if p.is_file()]
    [branch] = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/orchardist").split()
    files = git(repo, "ls-tree", "-r", "--name-only", branch).splitlines()
    blobs += [git(repo, "show", f"{branch}:{name}").encode() for name in files]
    return b"\n".join(blobs)


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_an_agent_cannot_read_the_orchestrator_s_environment_through_proc(
    repo: Path, shell_scripts: Scripts, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # Given: an orchestrator (a process of its own) with a secret in its environment, on no
    # allowlist, and an agent that reads every /proc/*/environ it can, into a file of its
    # tree, its output and its summary (which a dependent's prompt shows)
    secret = secrets.token_hex(16)
    monkeypatch.setenv("ORCHARDIST_TEST_SECRET", secret)
    command = shell_scripts(steal=STEAL, after="echo after > after.txt")
    plan = write_plan(
        repo,
        isolation(mode)
        + f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(command)}

        [[task]]
        id = "steal"

        [[task]]
        id = "after"
        depends_on = ["steal"]
        """,
    )

    # (a new interpreter, not a fork: /proc/PID/environ shows the environment a process was
    # started with, and only a new one starts with the secret set above)
    done = interpreter(repo, "run", str(plan))

    # Then: with namespaces the secret is nowhere the run left anything; with isolation off
    # the same agent finds it (the attack is real, the test can fail)
    assert done.returncode == 0, done.stdout + done.stderr
    assert secret not in done.stdout + done.stderr
    left = everything_left(repo, Path(os.environ["HOME"]))
    assert b"stolen" in left  # the agent's loot file reached the run branch
    if mode == "auto":
        assert secret.encode() not in left
    else:
        assert secret.encode() in left


# -- writes ------------------------------------------------------------------------------------


def test_an_agent_cannot_write_the_users_checkout_git_directory_or_real_home(
    repo: Path, shell_scripts: Scripts, run_plan: RunPlan
) -> None:
    # Given: the user's checkout, objects, config and shell start-up file, and an agent that
    # tries to change each of them, noting which writes the kernel let through
    home = Path(os.environ["HOME"])
    (home / ".bashrc").write_text("# the user's own\n")
    targets = {
        "checkout": repo / "README.md",
        "new_file": repo / "dropped.txt",
        "objects": repo / ".git" / "objects" / "planted",
        "config": repo / ".git" / "config",
        "bashrc": home / ".bashrc",
        "state": repo / ".git" / "orchardist" / "state.db",
    }
    tries = "\n".join(
        f'if echo hacked >> "{path}" 2>/dev/null; then echo {name}; fi >> escaped.txt'
        for name, path in targets.items()
    )
    plan = write_plan(
        repo,
        isolation("required")
        + f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(shell_scripts(write=tries + chr(10) + "echo tried >> escaped.txt"))}

        [[task]]
        id = "write"
        """,
        commit=True,
    )
    before = {name: path.read_bytes() for name, path in targets.items() if path.exists()}
    objects = sorted(p.name for p in (repo / ".git" / "objects").rglob("*"))
    fsck_before = git(repo, "fsck", "--no-dangling")

    run = run_plan(plan)

    # Then: the writes at the checkout's path reached the attempt's own tree (shown there),
    # every other write was refused (the agent says so), and nothing changed on the host
    assert run.state is RunState.DONE, run.doc
    assert run.read("escaped.txt") == "checkout\nnew_file\ntried"
    assert run.read("README.md") == "hello\nhacked"
    assert run.read("dropped.txt") == "hacked"
    assert not (repo / "dropped.txt").exists()
    assert not (repo / ".git" / "objects" / "planted").exists()
    for name in ("checkout", "config", "bashrc"):
        assert targets[name].read_bytes() == before[name], name
    assert b"hacked" not in targets["state"].read_bytes()
    assert git(repo, "fsck", "--no-dangling") == fsck_before
    new_objects = set(p.name for p in (repo / ".git" / "objects").rglob("*")) - set(objects)
    assert "planted" not in new_objects


# -- network -----------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback; yields its port and the names clients sent."""
    server = socket.create_server(("127.0.0.1", 0))
    heard: list[str] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                heard.append(conn.recv(100).decode(errors="replace"))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], heard
    done.set()
    # On Linux, close() does not wake a thread blocked in accept(); shutdown() does (EINVAL).
    server.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=10)
    assert not thread.is_alive()
    server.close()


# Sends NAME to the host's port; prints whether it could. Then checks loopback works inside.
CALL = f"""\
{shlex.quote(sys.executable)} - {{name}} {{port}} <<'PYEOF'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=5) as conn:
        conn.sendall(sys.argv[1].encode())
    print("reached", sys.argv[1])
except OSError as exc:
    print("unreachable", sys.argv[1], exc)
own = socket.create_server(("127.0.0.1", 0))
with socket.create_connection(own.getsockname(), timeout=5):
    print("loopback works")
PYEOF
"""


def test_verify_commands_have_loopback_only_unless_the_task_allows_the_network(
    repo: Path,
    shell_scripts: Scripts,
    run_plan: RunPlan,
    listener: tuple[int, list[str]],
) -> None:
    # Given: two tasks whose agent and verify command each call a server on the host; the
    # second task allows the network to its verify commands
    port, heard = listener
    agent = shell_scripts(
        closed=CALL.format(name="agent-closed", port=port) + "echo x > x.txt\n",
        open=CALL.format(name="agent-open", port=port) + "echo x > x.txt\n",
    )
    verify_closed = CALL.format(name="verify-closed", port=port)
    verify_open = CALL.format(name="verify-open", port=port)
    plan = write_plan(
        repo,
        isolation("required")
        + f"""
        [agents.sh]
        kind = "shell"
        command = {toml_str(agent)}

        [[task]]
        id = "closed"
        verify = [{toml_str(verify_closed)}]

        [[task]]
        id = "open"
        network = true
        verify = [{toml_str(verify_open)}]
        """,
    )

    run = run_plan(plan)

    # Then: agents reached the host, and only the verify command that was allowed to; loopback
    # worked inside every namespace
    assert run.state is RunState.DONE, run.doc
    assert set(heard) == {"agent-closed", "agent-open", "verify-open"}  # verify may run twice
    logs = "".join(
        p.read_text(errors="replace")
        for p in (run.root / ".git" / "orchardist" / "logs" / run.run.id).glob("*.log")
    )
    said = logs.splitlines()  # (the log shows each command too: whole lines only)
    assert any(line.startswith("unreachable verify-closed") for line in said)
    assert "reached verify-closed" not in said
    assert "reached verify-open" in said
    calls = [line for line in said if line.split(" ")[0] in ("reached", "unreachable")]
    assert said.count("loopback works") == len(calls)  # loopback worked after every call
