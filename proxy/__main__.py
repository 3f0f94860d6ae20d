"""`python -m proxy ...` runs the server's own commands (every `overspill` command but `eval`)."""

import sys

from proxy.cli import main

sys.exit(main())
