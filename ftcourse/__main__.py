"""``python -m ftcourse ...``: the same as the ``ftcourse`` command."""

import sys

from .cli import main

sys.exit(main())
