"""The scan cache's table in the store: scanners' results by content key, least recently used
dropped beyond a bound (see docs/scanners.md, "The cache"). ``scan.hit`` reads the same table
without importing this module, before the CLI loads."""

from __future__ import annotations

from collections.abc import Sequence

from .store import Store

LOOKUP_CHUNK = 500  # keys in one `in (...)` query: under SQLite's 999 bound variables


def get(store: Store, keys: Sequence[str], now: float) -> dict[str, str]:
    """Cached scan results by key (those present), marked as used at ``now``."""
    rows: dict[str, str] = {}
    with store.transaction() as tx:
        for start in range(0, len(keys), LOOKUP_CHUNK):  # one query a chunk, not a key
            chunk = keys[start : start + LOOKUP_CHUNK]
            marks = ", ".join("?" * len(chunk))
            sql = f"select key, value from scan_cache where key in ({marks})"
            rows.update((key, value) for key, value in tx.execute(sql, chunk))
        found = {key: rows[key] for key in keys if key in rows}  # in the order asked
        tx.execute_many(
            "update scan_cache set used_at = ? where key = ?", [(now, k) for k in found]
        )
    return found


def put(
    store: Store, rows: Sequence[tuple[str, str, str | bytes]], now: float, max_entries: int
) -> None:
    """Store ``(key, scanner, value)`` rows; the least recently used beyond the bound go.
    (A value is a findings document, or, for scan.hit's memos, bytes.)"""
    with store.transaction() as tx:
        tx.execute_many(
            "insert or replace into scan_cache (key, scanner, value, used_at) values (?, ?, ?, ?)",
            [(key, scanner, value, now) for key, scanner, value in rows],
        )
        tx.execute(
            "delete from scan_cache where key in (select key from scan_cache "
            "order by used_at desc limit -1 offset ?)",
            (max_entries,),
        )


def forget(store: Store, before: float, dry_run: bool = False) -> int:
    """Drop scan results not used since ``before``; how many there were."""
    with store.transaction() as tx:
        row = tx.execute("select count(*) from scan_cache where used_at < ?", (before,))
        count = int(row.fetchone()[0])
        if not dry_run:
            tx.execute("delete from scan_cache where used_at < ?", (before,))
    return count
