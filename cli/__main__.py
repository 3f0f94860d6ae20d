"""`python -m cli ...` is the `overspill` command."""

import sys

from cli.main import main

sys.exit(main())
