"""What an open console costs the broker: poll it as the console's page does while
``bench.compare`` measures (docs/console.md: the charts' rates every second, and here
the overview every 5 s as an auto-refreshing tab would).

    PORT=18080
    python -m bench.console_poller http://127.0.0.1:$PORT &
    python -m bench.compare --base HEAD --only produce --rounds 4 \\
        --this-override admin.http.port=$PORT
"""

from __future__ import annotations

import sys
import time
import urllib.request


def main(base: str) -> None:
    n = 0
    while True:
        try:
            urllib.request.urlopen(base + "/console/api/rates", timeout=5).read()
            if n % 5 == 0:
                urllib.request.urlopen(base + "/", timeout=5).read()
            n += 1
        except OSError:
            pass  # the broker is not up yet, or gone
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1])
