"""`python -m biomem.eval locomo [options]`."""

import sys

from . import main

sys.exit(main())
