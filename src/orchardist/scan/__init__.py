"""Scanners: read-only checks run in parallel over a tree, merged into one SARIF 2.1.0 log.

``profiles`` validates ``[scanners.NAME]``; ``findings`` reads what scanners report;
``sarif`` merges and deduplicates; ``cache`` keys results by configuration and content;
``engine`` runs the scanners; ``fix`` turns findings into fix tasks. ``memo`` leaves, after a
scan, what ``hit`` needs to answer the same scan again before the rest is imported.

This package imports nothing at module level so that ``plan`` can use ``profiles``.
"""
