"""`python -m modsar.cli`: the same as the `modsar` command, exit status included (a Ray job's entrypoint)."""

import sys

from modsar.cli import main

sys.exit(main())
