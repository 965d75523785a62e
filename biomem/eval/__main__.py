"""`python -m biomem.eval locomo [options]`: the same as `biomem eval locomo [options]`."""

import sys

from biomem.cli import main

sys.exit(main(["eval", *sys.argv[1:]]))
