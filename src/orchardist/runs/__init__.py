"""A run from the outside: its workspace, creating and executing it, reconciling it after
a crash, following it from another process, controlling it, and cleaning up.

May import: engine and everything below it. Imported by scan, web and cli.
"""
