"""`python -m mnemo`: the same as the `mnemo` command."""

import sys

from .cli import main

sys.exit(main())
