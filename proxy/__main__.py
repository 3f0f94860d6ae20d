"""`python -m proxy ...` is the `overspill` command."""

import sys

from proxy.cli import main

sys.exit(main())
