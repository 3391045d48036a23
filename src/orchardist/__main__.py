"""``python -m orchardist``: the same as the ``orchardist`` command."""

import sys

from orchardist.cli import main

sys.exit(main())
