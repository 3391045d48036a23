"""Wake asyncio waiters when the store's files change: inotify, no polling.

SQLite in WAL mode appends every commit to ``state.db-wal``, and the store then touches
``state.db-bell`` once the commit is visible (see ``Store.transaction``); a watch on the store's
folder sees each write as it lands (the inotify plumbing is
:class:`orchardist.runs.follow.Watch`'s). One watcher serves every client of the dashboard:
each change bumps a generation counter and wakes all who wait for a newer one.

The live streams built on these watches never end by themselves, and a stopping server waits
for every response to end: :class:`Streams` ends them all when the server begins to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from ..runs.follow import Watch


class StoreWatcher:
    """Counts changes to the files of one folder; ``wait_newer`` blocks until the count grows."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.generation = 0
        self.ended = False  # the server is stopping: waiters return at once, streams end
        self._changed: asyncio.Condition | None = None
        self._watch: Watch | None = None

    async def start(self) -> None:
        """Arm the watch and hook it into the running loop. Before the first run there is no
        store folder: its parent is watched until it appears."""
        self._changed = asyncio.Condition()
        self._watch = Watch(None)
        self._watch.add(self.folder)
        if self.folder not in self._watch.folders:
            self._watch.add(self.folder.parent)
        asyncio.get_running_loop().add_reader(self._watch.fd, self._on_readable)

    def _on_readable(self) -> None:
        assert self._watch is not None
        self._watch.wait()  # readable: returns at once, after draining the queued events
        self._watch.add(self.folder)  # a no-op once watched
        self.generation += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_newer(self, seen: int, timeout_s: float) -> int:
        """The generation once it is past ``seen``, or the current one after ``timeout_s`` or
        once ended."""
        assert self._changed is not None
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.generation > seen or self.ended),
                    timeout_s,
                )
        return self.generation

    async def end(self) -> None:
        """Wake every waiter, now and from now on."""
        self.ended = True
        if self._changed is not None:
            await self._notify()

    def stop(self) -> None:
        """Close the watch."""
        if self._watch is not None:
            asyncio.get_running_loop().remove_reader(self._watch.fd)
            self._watch.close()
            self._watch = None


class Streams:
    """The watchers of the live streams, so that a stopping server can end every stream."""

    def __init__(self) -> None:
        self._live: set[StoreWatcher] = set()
        self._ending = False

    @contextlib.asynccontextmanager
    async def watching(self, watcher: StoreWatcher) -> AsyncIterator[StoreWatcher]:
        """``watcher`` started for the block, ended with the others (at once if the server is
        already stopping), stopped after."""
        await watcher.start()
        self._live.add(watcher)
        try:
            if self._ending:
                await watcher.end()
            yield watcher
        finally:
            self._live.discard(watcher)
            watcher.stop()

    async def end(self) -> None:
        """End every stream: each watcher's waiters return, and each stream sees it ended."""
        self._ending = True
        for watcher in list(self._live):
            await watcher.end()
