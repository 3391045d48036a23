"""git itself: the repository through its command line, the environment git runs in,
snapshots and tree hashes written by orchardist, loose objects read and loose refs moved
in-process, the pristine index, the checkout's fingerprint.

May import: the top-level vocabulary (errors, safeio) only.
"""
