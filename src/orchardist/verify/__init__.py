"""Verification: running a task's commands on a tree, the oracle that compares them with
the baseline, test discovery for ``verify = "auto"``, and the per-test results kept beside an
attempt's log for the dashboard.

May import: confine, git and the top-level vocabulary only.
"""
