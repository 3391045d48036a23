"""Side concerns subscribe to events: progress display, logs, (later) dashboard and telemetry.

A hook never steers the run. Hooks are called in order, after the event's transaction committed;
a failing hook is logged and otherwise ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from ..state.eventlog import Event

log = logging.getLogger("orchardist")


class Hook:
    """Base class: every method is a no-op."""

    def on_event(self, event: Event) -> None:
        """Called for each committed event, in order."""

    def close(self) -> None:
        """Called once when the run ends."""


class Hooks:
    """An ordered list of hooks, isolated from each other's failures."""

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self.hooks = list(hooks)

    def emit(self, events: Iterable[Event]) -> None:
        """Deliver events to every hook."""
        for event in events:
            for hook in self.hooks:
                try:
                    hook.on_event(event)
                except Exception:
                    log.exception("hook %s failed on %s", type(hook).__name__, event.kind)

    def close(self) -> None:
        """Close every hook."""
        for hook in self.hooks:
            try:
                hook.close()
            except Exception:
                log.exception("hook %s failed to close", type(hook).__name__)


class Recorder(Hook):
    """Keeps every event (for tests and embedding)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        """Remember the event."""
        self.events.append(event)
