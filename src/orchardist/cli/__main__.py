"""``python -m orchardist.cli``: the same as the ``orchardist`` command."""

import sys

from . import main

sys.exit(main())
