"""How long after an event is committed ``orchardist events RUN --follow`` prints it.

Usage: ``python benchmarks/follow_latency.py [--events 200] [--gap-ms 20]``

In a throwaway repository, this process records a run, a child process holds its run lock (so it
looks like a live orchestrator to the follower), starts ``orchardist events RUN --follow`` as a real
subprocess, then commits events one at a time, ``--gap-ms`` apart, each carrying the time it was
committed. The follower is woken by inotify (no polling); the latency of an event is the time
its line is read from the follower's stdout minus its commit time. Printed: median, p90 and max
in milliseconds, and whether the follower ended by itself once the lock holder exited.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from orchardist import Workspace
from orchardist.state.eventlog import Event
from orchardist.state.records import Run, RunState

HOLD = """
import sys
from pathlib import Path
from orchardist import Workspace
from orchardist.runs.start import run_lock
ws = Workspace.open(Path(sys.argv[1]))
with run_lock(ws, sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "base",
            ],
            check=True,
        )
        ws = Workspace.open(repo)
        run = Run("bench", "plan.toml", "", str(repo), "0" * 40, "b", RunState.RUNNING, time.time())
        with ws.store.transaction() as tx:
            tx.add_run(run)
        received: list[tuple[float, float]] = []  # (committed at, read at)
        holder = subprocess.Popen(  # the "orchestrator": holds the run lock until stdin closes
            [sys.executable, "-c", HOLD, str(repo), run.id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdout.readline()  # it holds the lock now
        follower = subprocess.Popen(
            [sys.executable, "-m", "orchardist", "events", run.id, "--follow", "-C", str(repo)],
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert follower.stdout is not None
        stdout = follower.stdout

        def read() -> None:
            for line in stdout:
                received.append((json.loads(line)["data"]["at"], time.time()))

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.0)  # let the follower start and arm its watches
        for i in range(args.events):
            with ws.store.transaction() as tx:
                tx.emit(Event(run.id, "bench", time.time(), data={"i": i, "at": time.time()}))
            time.sleep(args.gap_ms / 1000)
        holder.stdin.close()
        holder.wait()
        ended = follower.wait(timeout=30) == 0
        reader.join()
        ws.store.close()
    lat = sorted((read - at) * 1000 for at, read in received)
    p90 = lat[int(len(lat) * 0.9) - 1]
    print(
        f"events {len(lat)}/{args.events}  latency ms: median {statistics.median(lat):.2f}  "
        f"p90 {p90:.2f}  max {lat[-1]:.2f}  follower ended on its own: {ended}"
    )


if __name__ == "__main__":
    main()
