"""A growing wait between failed logins from one client address: the console's login
form and the admin endpoint's bearer token (broker/admin_http.py).

After a wrong token an address must wait FIRST_DELAY_S before its next try, doubling
with each further failure up to MAX_DELAY_S; a try before then is refused at once
without looking at the token (answering at once, rather than holding the request, costs
a flood nothing but its own refusals). A right token forgets the address. An IPv6
client is keyed by its /64, which one host usually holds whole.

The table holds at most MAX_ENTRIES addresses (DESIGN principle 8): a flood of
addresses evicts the least recently failed ones, never grows memory, and entries idle
for FORGET_AFTER_S are dropped as they are met. Behind a reverse proxy every client
has the proxy's address; the wait then applies to all of them together.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
MAX_ENTRIES = 10_000
FORGET_AFTER_S = 900.0  # a quarter of an hour without a failure: start again at 0.5 s


def client_key(address: str | None) -> str:
    """The throttled unit of ``address``: itself for IPv4, its /64 for IPv6."""
    if not address:
        return "?"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # (a dual-stack socket's IPv4 client)
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class LoginThrottle:
    def __init__(self, *, first: float = FIRST_DELAY_S, cap: float = MAX_DELAY_S,
                 max_entries: int = MAX_ENTRIES, forget_after: float = FORGET_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.first = first
        self.cap = cap
        self.max_entries = max_entries
        self.forget_after = forget_after
        self._clock = clock
        # key -> (failures in a row, when the next try is allowed), least recent first
        self._entries: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def delay_for(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row."""
        return min(self.first * 2 ** (failures - 1), self.cap) if failures > 0 else 0.0

    def wait(self, address: str | None) -> float:
        """Seconds ``address`` must still wait before a try is looked at (0: now)."""
        key = client_key(address)
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        now = self._clock()
        if now - entry[1] >= self.forget_after:
            del self._entries[key]
            return 0.0
        return max(0.0, entry[1] - now)

    def failed(self, address: str | None) -> float:
        """A wrong token from ``address``: returns the wait it now has."""
        key = client_key(address)
        now = self._clock()
        failures, until = self._entries.pop(key, (0, now))
        if now - until >= self.forget_after:
            failures = 0
        delay = self.delay_for(failures + 1)
        self._entries[key] = (failures + 1, now + delay)  # (now the most recent)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return delay

    def succeeded(self, address: str | None) -> None:
        self._entries.pop(client_key(address), None)
