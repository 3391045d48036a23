"""The plan: a plan file read (TOML or YAML), checked field by field with located
problems, and turned into the frozen records of :mod:`orchardist.specs`; its JSON
Schema, its forecast, the preflight checks and the planner agent that writes one.

May import: pipelines, executors and agents (their registries of names), state, verify,
confine, git and the top-level vocabulary. Imported by engine, runs, scan, web, cli.
"""
