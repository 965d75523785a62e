"""`python -m biomem.cli`: the `biomem` command, where the console script is not on PATH."""

import sys

from . import main

sys.exit(main())
