"""State: the records and states of runs, tasks and attempts, the event vocabulary, the
SQLite store and its tables, and the read-side views (status, stats).

May import: verify (the oracle's records it persists), confine, git and the top-level
vocabulary. Imported by everything above it; imports nothing above.
"""
