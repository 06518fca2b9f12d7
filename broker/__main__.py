"""``python -m broker serve ...`` from the repository root (or ``python -m
txbroker.broker``): the ``txbroker`` command, as ``python -m txbroker``."""

import sys

from txbroker.cli import main

sys.exit(main())
