"""The loop and its owners: the scheduler, candidate rounds, a task's lifecycle, the
ledger of store transactions, jobs, failure policy, the merge train, regression search
and the hooks side concerns subscribe to.

May import: plan, pipelines, the seams, executors, agents, state, verify, confine, git
and the top-level vocabulary. Imported by runs and above.
"""
