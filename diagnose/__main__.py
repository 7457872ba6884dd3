"""`python -m diagnose` is the same as the `diagnose` console script."""

import sys

from diagnose.front.cli import main

sys.exit(main())
