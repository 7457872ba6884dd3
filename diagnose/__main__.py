"""`python -m diagnose` is the same as the `diagnose` console script."""

import sys

from diagnose.commands import main

sys.exit(main())
