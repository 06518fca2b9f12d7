import sys

from txbroker.broker.cli import main

sys.exit(main())
