"""The dashboard: ``orchardist serve`` (needs the ``web`` extra: starlette and uvicorn)."""

from __future__ import annotations
