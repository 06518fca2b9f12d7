"""The broker hang fault (``{"broker": "hang", "ms": N}``, docs/fault-injection.md): for
N ms the broker serves and answers nothing, on every connection, old and new, as a
Kafka broker in a long GC pause or behind a network partition; then every held request
is served and answered, in order per connection.

Nothing queues beyond the connections' own bounds: a held request is one of its
connection's ``queued.max.requests`` and its frame counts against
``queued.max.request.bytes``, so a client that pipelines during a hang stops being read.
A client whose request timeout passes meanwhile closes its connection and retries on a
new one; its held requests are still served when the hang ends (within
``shutdown.timeout.ms``), answers dropped, as Kafka serves the requests it read before
a disconnect: idempotence and transactions make the retry harmless.

Cost when no hang is set: the server tests ``hang.on`` (a plain bool) before and after
each request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("txbroker.faults")


class BrokerHang:
    def __init__(self) -> None:
        self.on = False  # read by the server for every request: keep it a plain bool
        self._faults: list[Any] = []  # request_faults.Fault of kind "hang", in effect
        self._pending: list[Any] = []  # installed before the loop runs (config): start()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._over = asyncio.Event()
        self._end: Any = None  # fn(fault): the table's remove, when a hang has lasted

    def begin(self, fault: Any, end) -> None:
        """Hang now for the fault's ``ms`` (or, without a running loop, from start())."""
        self._end = end
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._pending.append(fault)
            return
        ms = fault.spec.hang_ms
        self._timers[fault.id] = loop.call_later(ms / 1000, end, fault)
        self._faults.append(fault)
        if not self.on:
            self._over = asyncio.Event()
            self.on = True
        log.warning("fault %s: the broker hangs for %d ms (no request served or answered)",
                    fault.id, ms)

    def start(self) -> None:
        """The broker is serving: the hangs from its configuration begin."""
        pending, self._pending = self._pending, []
        for fault in pending:
            if fault.active:
                self.begin(fault, self._end)

    def end(self, fault: Any) -> None:
        """The fault's hang is over (its time passed, or it was removed)."""
        timer = self._timers.pop(fault.id, None)
        if timer is not None:
            timer.cancel()
        if fault in self._pending:
            self._pending.remove(fault)
        if fault not in self._faults:
            return
        self._faults.remove(fault)
        log.warning("fault %s: the hang is over; %d request(s) were held", fault.id,
                    fault.fired)
        if not self._faults:
            self.on = False
            self._over.set()  # the held requests go on

    def end_all(self) -> None:
        """End every hang (the broker stops: what it holds is served first)."""
        for fault in [*self._faults, *self._pending]:
            if self._end is not None:
                self._end(fault)

    async def hold(self, *, count: bool = True) -> None:
        """Wait while the broker hangs. ``count``: a request held before it is served
        (the fault's ``fired``), not an answer held after."""
        if count and self._faults:
            fault = self._faults[0]
            fault.seen += 1
            fault.fired += 1
        while self.on:
            await self._over.wait()
