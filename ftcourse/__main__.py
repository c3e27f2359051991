"""``python -m ftcourse ...``: the same as the ``ftcourse`` command (``ftcourse.course.cli``)."""

import sys

from .course.cli import main

sys.exit(main())
