"""``python -m georecall.verify.cli``: the same entry point as the ``georecall`` script."""

import sys

from georecall.verify.cli import main

sys.exit(main())
