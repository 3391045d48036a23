"""``python -m orchardist``: the same as the ``orchardist`` command."""

import sys

from .cli import main

sys.exit(main())
