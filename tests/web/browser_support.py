"""What the browser tests share besides the ``browser`` fixture (which stays in test_browser.py,
where tests/test_suite_marks.py sees it): screenshots. (The scripted agents wait at
``run_support.Gate``, as the other tests' agents do.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SCREENSHOTS = "ORCHARDIST_SCREENSHOTS"  # a folder: the pages are saved there (docs/images)


def keep_screenshot(page: Any, name: str) -> None:
    """Save the whole page as ``name`` in the folder env ORCHARDIST_SCREENSHOTS names (the
    docs' pictures are taken so); without it, none is taken: no test reads them, and each cost
    the browser a full-page render and a PNG."""
    folder = os.environ.get(SCREENSHOTS)
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=True)
