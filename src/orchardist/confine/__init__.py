"""Confinement: where an attempt runs (the workspace layout), its private home, overlay
mounts, namespaces, Landlock, and child processes that end on time.

May import: git and the top-level vocabulary only.
"""
