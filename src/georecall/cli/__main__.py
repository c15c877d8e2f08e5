"""``python -m georecall.cli``: the same entry point as the ``georecall`` script."""

import sys

from georecall.cli import main

sys.exit(main())
