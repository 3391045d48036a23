"""Verification: running a task's commands on a tree, the oracle that compares them with
the baseline, and test discovery for ``verify = "auto"``.

May import: confine, git and the top-level vocabulary only.
"""
