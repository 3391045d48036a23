"""The checkout guard, for agents that run unconfined: it looks at the user's checkout when each
agent ends, and fails every attempt whose agent ran while the checkout changed (nothing tells
which agent wrote). Confined agents cannot write there: then the guard is off."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

# Parts of the checkout fingerprint a person changes in normal use during a run (editing files,
# checking out a branch, the run branch included): without a sandbox orchardist cannot tell who
# changed them, and does not fail attempts for it (docs/security.md, "Containment").
USERS_OWN = frozenset({"files or index", "HEAD"})


class CheckoutGuard:
    """The checkout as last seen, and the jobs whose agents ran since."""

    def __init__(self, fingerprint: Callable[[], dict[str, str]], active: bool, look: bool) -> None:
        """``active``: attempts are failed on a change; ``look``: take a first look now."""
        self.fingerprint = fingerprint
        self.active = active
        # Its own lock: its look at the checkout reads the store, so it must not be the
        # executor's, which the scheduler takes (cancel) while it holds a store transaction.
        self._lock = threading.Lock()
        self._checkout = fingerprint() if look else {}
        self._changed = ""
        self._in_agent: set[str] = set()  # jobs whose agent is running or just ended
        self._suspects: set[str] = set()  # jobs running when the checkout changed

    def started(self, job_id: str) -> None:
        """The job's agent starts (it is a suspect until its own look at the checkout)."""
        with self._lock:
            self._in_agent.add(job_id)

    def ended(self, job_id: str) -> None:
        """The job is over: forget it."""
        with self._lock:
            self._in_agent.discard(job_id)
            self._suspects.discard(job_id)

    def suspect(self, job_id: str, log: Path) -> str | None:
        """Look at the checkout as the job's agent ended: why its work cannot be kept, or None.
        Changes that are the user's own ground (USERS_OWN) are only noted in ``log``."""
        if not self.active:
            return None
        # Nothing tells which agent wrote: every agent running since the last clean look
        # is suspect, and none of their patches is kept. The sandbox prevents this instead.
        with self._lock:
            now = self.fingerprint()
            changed = sorted(
                k for k in {*now, *self._checkout} if now.get(k) != self._checkout.get(k)
            )
            theirs = [part for part in changed if part in USERS_OWN]
            if theirs:  # the user's own ground: edited files, a checked-out branch
                self._checkout = {**self._checkout, **{p: now[p] for p in theirs}}
                _note_checkout(log, theirs)
            changed = [part for part in changed if part not in USERS_OWN]
            if changed:
                self._checkout = now
                self._changed = ", ".join(changed)
                self._suspects |= self._in_agent | {job_id}
            suspect = job_id in self._suspects
            self._suspects.discard(job_id)
            self._in_agent.discard(job_id)
            why = self._changed
        if not suspect:
            return None
        return (
            f"the user's checkout changed while the agent ran ({why}): it "
            "wrote outside its worktree? Set guard_checkout = false in [run] if you "
            "edit the checkout during runs"
        )


def _note_checkout(log: Path, parts: list[str]) -> None:
    """Say in the attempt's log that the user's checkout changed while its agent ran."""
    line = (
        f"orchardist: the user's checkout changed while this agent ran ({', '.join(parts)}); "
        "without the sandbox nobody can tell whose edit it was, so the attempt is kept"
    )
    with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
        fh.write(f"{line}\n")
