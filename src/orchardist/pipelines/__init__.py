"""Pipelines: a task expanded into stages with handoffs on the ordinary task graph, and
each stage's duty, prompt and handoff contract (judged on the executor's side).

May import: state, verify, confine, git and the top-level vocabulary (executors and the
seams only for type checking). Imported by executors, plan and engine.
"""
