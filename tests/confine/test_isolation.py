"""Namespaces hold what lists of protected paths could not: checked by outcome, with real bwrap."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ns_support import live, require_namespaces, wait_gone
from orchardist.confine import isolation
from orchardist.confine.bwrapprobe import Probe
from orchardist.confine.isolation import Mode, Policy, choose, describe
from orchardist.confine.procs import (
    MARKER_VAR,
    CancelToken,
    ProcessRequest,
    ProcessResult,
    run_process,
)
from orchardist.confine.spec import Spec, wrap
from orchardist.errors import IsolationError, UsageError
from run_support import orchardist as run_cli
from support import processes_with_env, write_plan

ENV = {"PATH": os.environ["PATH"]}
WAIT_LOOP = 'i=0; until {cond}; do i=$((i+1)); [ "$i" -lt 1000 ] || exit 9; sleep 0.01; done'


@pytest.fixture
def namespaces() -> None:
    require_namespaces()


def spec_in(tmp_path: Path, **kw: object) -> Spec:
    """A spec with a writable ``w`` folder, a private home and tmp, all under ``tmp_path``."""
    for name in ("w", "home", "tmp"):
        (tmp_path / name).mkdir(exist_ok=True)
    fields: dict[str, object] = {
        "writable": (tmp_path / "w",),
        "home": tmp_path / "home",
        "tmp": tmp_path / "tmp",
        # the interpreter the tests run (a checkout under /tmp would be hidden by the private
        # /tmp, as the executor's specs re-expose it)
        "readonly": tuple(dict.fromkeys(Path(p).resolve() for p in (sys.prefix, sys.base_prefix))),
    }
    fields.update(kw)
    return Spec(**fields)  # type: ignore[arg-type]


def sh(tmp_path: Path, script: str, spec: Spec) -> subprocess.CompletedProcess[str]:
    """Run a shell script confined by ``spec``, from ``tmp_path/w``."""
    argv = wrap(["/bin/sh", "-c", script], spec, cwd=tmp_path / "w")
    return subprocess.run(
        argv, capture_output=True, text=True, env=ENV, timeout=60, stdin=subprocess.DEVNULL
    )


# -- choosing a mode ------------------------------------------------------------------------

USABLE = Probe("/usr/bin/bwrap", True, version="bubblewrap 0.8.0")
MISSING = Probe(None, False, reason="bwrap not found on PATH (install bubblewrap)")


def fixed(result: Probe) -> Callable[[], Probe]:
    return lambda: result


@pytest.mark.parametrize(
    ("policy", "probe", "landlock", "mode"),
    [
        (Policy.AUTO, USABLE, True, Mode.NAMESPACES),
        (Policy.AUTO, MISSING, True, Mode.LANDLOCK),
        (Policy.AUTO, MISSING, False, Mode.NONE),
        (Policy.REQUIRED, USABLE, False, Mode.NAMESPACES),
        (Policy.LANDLOCK, USABLE, True, Mode.LANDLOCK),
        (Policy.LANDLOCK, USABLE, False, Mode.NONE),
        (Policy.OFF, USABLE, True, Mode.NONE),
    ],
)
def test_each_policy_gets_the_strongest_mode_it_allows(
    policy: Policy, probe: Probe, landlock: bool, mode: Mode
) -> None:
    assert choose(policy, found=fixed(probe), landlock=lambda: landlock) is mode


def test_required_namespaces_refuse_to_run_without_them_as_a_usage_error() -> None:
    with pytest.raises(IsolationError) as caught:
        choose(Policy.REQUIRED, found=fixed(MISSING), landlock=lambda: True)
    assert isinstance(caught.value, UsageError)  # the CLI exits 2 on these
    assert "install bubblewrap" in str(caught.value)
    assert '"required"' in str(caught.value)


def test_the_first_line_says_which_isolation_a_run_got_and_why_it_is_weaker() -> None:
    assert "namespaces" in describe(Policy.AUTO, Mode.NAMESPACES, fixed(USABLE))
    fallback = describe(Policy.AUTO, Mode.LANDLOCK, fixed(MISSING))
    assert "Landlock" in fallback and "bwrap not found" in fallback
    assert "isolation off" in describe(Policy.OFF, Mode.NONE, fixed(USABLE))
    assert "isolation off" in describe(Policy.AUTO, Mode.NONE, fixed(MISSING))


def test_wrap_leaves_unconfined_commands_alone_and_sends_landlock_through_the_sandbox(
    tmp_path: Path,
) -> None:
    assert wrap(["true"], Spec(writable=(tmp_path,), mode=Mode.NONE)) == ["true"]
    landlocked = wrap(["true"], Spec(writable=(tmp_path,), home=tmp_path, mode=Mode.LANDLOCK))
    assert landlocked[-2:] == ["--", "true"] and "--write" in landlocked
    assert "bwrap" not in " ".join(landlocked)


def test_inner_paths_are_bound_after_outer_ones(tmp_path: Path, namespaces: None) -> None:
    inner, outer = tmp_path / "repo" / "objects", tmp_path / "repo"
    argv = wrap(["true"], Spec(writable=(inner,), readonly=(outer,)))
    assert argv.index(str(outer)) < argv.index(str(inner))


def test_the_probe_is_made_once() -> None:
    assert isolation.probe() is isolation.probe()


# -- what a confined process can do ----------------------------------------------------------


def test_the_orchestrators_environment_is_out_of_sight(tmp_path: Path, namespaces: None) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    # Given a process outside holding a secret in its environment
    holding = ["/bin/sh", "-c", "echo ready; sleep 60"]
    with subprocess.Popen(
        holding, env={**ENV, "API_KEY": secret}, stdout=subprocess.PIPE, start_new_session=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
            assert secret in Path(f"/proc/{holder.pid}/environ").read_text(errors="replace")
            # When a confined process reads its environ, and every environ it can see
            script = f"cat /proc/{holder.pid}/environ; cat /proc/[0-9]*/environ; ls /proc"
            done = sh(tmp_path, script, spec_in(tmp_path))
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
    # Then the secret is nowhere, and it sees only its own few processes
    assert secret not in done.stdout + done.stderr
    pids = [p for p in done.stdout.split() if p.isdigit()]
    assert str(holder.pid) not in pids and str(os.getpid()) not in pids
    assert len(pids) < 10


def test_writes_land_only_in_the_writable_set(tmp_path: Path, namespaces: None) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_text("original\n")
    (tmp_path / "hidden").mkdir()
    spec = spec_in(tmp_path, readonly=(tmp_path / "ro",))
    marker = Path("/etc") / f"orchardist-{uuid.uuid4().hex}"
    script = f"""
        echo w > {tmp_path}/w/new
        echo tmp > /tmp/t
        echo home > "$HOME/h"
        cat {tmp_path}/ro/f
        echo changed > {tmp_path}/ro/f
        echo x > {tmp_path}/hidden/f
        echo x > {marker}
        echo x > /var/tmp/orchardist-{marker.name}
        exit 0
    """
    done = sh(tmp_path, script, spec)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "w" / "new").read_text() == "w\n"
    assert (tmp_path / "tmp" / "t").read_text() == "tmp\n"  # /tmp is the private tmp
    assert (tmp_path / "home" / "h").read_text() == "home\n"
    assert "original" in done.stdout  # read-only paths stay readable
    assert (tmp_path / "ro" / "f").read_text() == "original\n"
    assert not (tmp_path / "hidden" / "f").exists()
    assert not marker.exists()
    assert not Path(f"/var/tmp/orchardist-{marker.name}").exists()


def test_home_tmp_and_the_working_directory_are_the_attempts_own(
    tmp_path: Path, namespaces: None
) -> None:
    done = sh(tmp_path, 'echo "$HOME|$TMPDIR|$(pwd)"; ls /tmp', spec_in(tmp_path))
    first, *rest = done.stdout.splitlines()
    assert first == f"{tmp_path / 'home'}|/tmp|{tmp_path / 'w'}"
    assert tmp_path.name not in rest  # the host's /tmp is not there


def test_dev_is_minimal_and_capabilities_are_dropped(tmp_path: Path, namespaces: None) -> None:
    name = f"orchardist-{uuid.uuid4().hex}"
    script = f"echo x > /dev/{name}; ls /dev; grep CapEff /proc/self/status"
    done = sh(tmp_path, script, spec_in(tmp_path))
    devices = set(done.stdout.split())
    assert {"null", "zero", "urandom"} <= devices
    host_blocks = {p.name for p in Path("/dev").iterdir() if p.is_block_device()}
    assert not host_blocks & devices
    assert not Path("/dev", name).exists()  # its /dev is its own
    assert "CapEff:\t0000000000000000" in done.stdout


def interfaces(text: str) -> set[str]:
    return {line.split(":")[0].strip() for line in text.splitlines() if ":" in line}


def test_without_network_only_loopback_is_left(tmp_path: Path, namespaces: None) -> None:
    host = interfaces(Path("/proc/net/dev").read_text())
    off = sh(tmp_path, "cat /proc/net/dev", spec_in(tmp_path, network=False))
    on = sh(tmp_path, "cat /proc/net/dev", spec_in(tmp_path, network=True))
    assert interfaces(off.stdout) == {"lo"}
    assert interfaces(on.stdout) == host
    ping = "import socket; s=socket.create_server(('127.0.0.1', 0)); print('lo ok')"
    lo = sh(tmp_path, f'{sys.executable} -c "{ping}"', spec_in(tmp_path, network=False))
    assert "lo ok" in lo.stdout, lo.stderr


# -- nothing outlives its namespace ----------------------------------------------------------


def run_with_daemon(
    tmp_path: Path, tag: str, *, cancel_when_seen: bool
) -> tuple[ProcessResult, set[int]]:
    """Start a ``setsid env -i`` daemon inside; return the result and the daemon's host pids
    as seen while the confined command still ran."""
    go = tmp_path / "w" / "go"
    script = f"""
        setsid env -i TAG={tag} sleep 1000 </dev/null >/dev/null 2>&1 &
        {WAIT_LOOP.format(cond=f"grep -qs TAG={tag} /proc/[0-9]*/environ")}
        echo started
        {WAIT_LOOP.format(cond=f"[ -e {go} ]") if not cancel_when_seen else "sleep 1000"}
    """
    token = CancelToken()
    seen: set[int] = set()

    def on_line(line: bytes) -> None:
        if line == b"started":
            seen.update(processes_with_env("TAG", tag))
            if cancel_when_seen:
                token.cancel("test")
            else:
                go.touch()

    spec = spec_in(tmp_path)
    try:
        result = run_process(
            ProcessRequest(
                argv=wrap(["/bin/sh", "-c", script], spec),
                cwd=tmp_path / "w",
                env=ENV,
                log=tmp_path / "out.log",
                timeout_s=60.0,
                cancel=token,
                on_line=on_line,
            )
        )
    finally:
        token.close()
    return result, seen


def test_a_setsid_daemon_dies_when_its_command_ends(tmp_path: Path, namespaces: None) -> None:
    tag = uuid.uuid4().hex
    result, seen = run_with_daemon(tmp_path, tag, cancel_when_seen=False)
    assert result.exit_code == 0, (tmp_path / "out.log").read_text()
    assert seen, "the daemon should have been running while the command ran"
    assert not wait_gone(seen)
    assert not live(processes_with_env("TAG", tag))


def test_a_setsid_daemon_dies_when_its_command_is_cancelled(
    tmp_path: Path, namespaces: None
) -> None:
    tag = uuid.uuid4().hex
    result, seen = run_with_daemon(tmp_path, tag, cancel_when_seen=True)
    assert result.cancelled
    assert seen
    assert not wait_gone(seen)
    assert not live(processes_with_env("TAG", tag))


def test_namespace_tests_fail_on_ci_instead_of_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "probe", fixed(MISSING))
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="bubblewrap"):
        require_namespaces()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="bwrap not found"):
        require_namespaces()


def test_a_confined_command_gets_its_grace_period_on_cancel(
    tmp_path: Path, namespaces: None
) -> None:
    # Given a confined command that cleans up on SIGTERM
    script = "trap 'echo cleaned up; exit 7' TERM; echo ready; sleep 1000 & wait"
    token = CancelToken()

    def on_line(line: bytes) -> None:
        if line == b"ready":
            token.cancel("test")

    # When it is cancelled
    try:
        result = run_process(
            ProcessRequest(
                argv=["/bin/sh", "-c", script],
                cwd=tmp_path,
                env=ENV,
                log=tmp_path / "out.log",
                timeout_s=60.0,
                cancel=token,
                on_line=on_line,
                confine=spec_in(tmp_path),
                grace_s=30.0,
            )
        )
    finally:
        token.close()
    # Then its trap ran before the namespace went away
    assert result.cancelled
    assert "cleaned up" in (tmp_path / "out.log").read_text()
    assert result.exit_code == 7


def test_a_confined_command_cancelled_as_it_starts_is_not_held_up_by_the_grace_period(
    tmp_path: Path, namespaces: None
) -> None:
    # Given a confined command whose token is cancelled before it starts: nothing inside the
    # namespace but bwrap's init, which ignores a SIGTERM sent from outside, could use a grace
    token = CancelToken()
    token.cancel("test")
    marker = uuid.uuid4().hex
    # When it runs with a long grace period
    try:
        result = run_process(
            ProcessRequest(
                argv=["sleep", "1000"],
                cwd=tmp_path,
                env=ENV,
                log=tmp_path / "out.log",
                timeout_s=60.0,
                cancel=token,
                confine=spec_in(tmp_path),
                grace_s=60.0,
                marker=marker,
            )
        )
    finally:
        token.close()
    # Then it ended before the grace could have passed, and left nothing
    assert result.cancelled
    assert result.duration_s < 60.0
    assert not live(processes_with_env(MARKER_VAR, marker))


# -- through the command line ----------------------------------------------------------------

SCRIPTED_PLAN = """
[run]
isolation = "{policy}"

[agents.fake]
kind = "scripted"
script = {{ "*" = {{ write = {{ "done.txt" = "done\\n" }} }} }}

[[task]]
id = "t"
"""


def cli(repo: Path, path: str) -> subprocess.CompletedProcess[str]:
    """``orchardist run plan.toml`` in ``repo`` with ``path`` as PATH."""
    return run_cli(repo, "run", "plan.toml", env={**os.environ, "PATH": path})


def test_a_run_s_first_line_says_it_got_namespaces(repo: Path, namespaces: None) -> None:
    write_plan(repo, SCRIPTED_PLAN.format(policy="required"))

    done = cli(repo, os.environ["PATH"])

    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("run ") and "isolation: namespaces (bubblewrap" in first


def test_required_isolation_without_bwrap_exits_2_and_creates_no_run(
    repo: Path, tmp_path: Path
) -> None:
    # Given: a PATH with git but no bwrap, and a plan that requires namespaces
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    write_plan(repo, SCRIPTED_PLAN.format(policy="required"))

    done = cli(repo, str(bin_dir))

    # Then: a usage error naming the cause and the way out; nothing was created
    assert done.returncode == 2, done.stdout + done.stderr
    assert 'isolation = "required"' in done.stderr
    assert "install bubblewrap" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (repo / ".git" / "orchardist" / "state.db").exists()


def test_auto_without_bwrap_runs_with_the_fallback_and_says_so(repo: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    write_plan(repo, SCRIPTED_PLAN.format(policy="auto"))

    done = cli(repo, str(bin_dir))

    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert "namespaces unavailable: bwrap not found on PATH" in first
