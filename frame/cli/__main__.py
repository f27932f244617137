"""`python -m frame.cli`: the `slowframe` command without an installed entry point."""

import sys

from frame.cli import main

sys.exit(main())
