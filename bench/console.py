"""Console page times at scale: 1,000 partitions and 100,000 transactional ids.

    .venv/bin/python -m bench.console [--partitions 1000] [--ids 100000] [--open 1000]

An in-process broker (the test fixture's BrokerThread); the transactional ids are made
by the coordinator itself (InitProducerId, then AddPartitionsToTxn for ``--open`` of
them, so they are Ongoing), in-process to keep the set-up short. Each page is fetched
over HTTP from 127.0.0.1 seven times; the median wall time is printed (it includes
aiohttp's own work, so it bounds the server time from above). The target: each
page ≤ 200 ms server time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.parse
import urllib.request

from txbroker.testing.broker_thread import BrokerThread

PAGES = ("/", "/console/topics", "/console/topics/wide", "/console/topics/wide/0",
         "/console/topics/wide/0/records?isolation=read_uncommitted",
         "/console/transactions", "/console/transactions?state=all",
         "/console/transactions?state=all&start=50000", "/console/groups",
         "/console/api/rates")


async def _make_ids(broker, count: int, open_count: int, partitions: int) -> None:
    coordinator = broker.transactions
    batch = 2000
    for start in range(0, count, batch):
        tids = [f"bench-tx-{i:06d}" for i in range(start, min(count, start + batch))]
        results = await asyncio.gather(*(coordinator.init_producer_id(t, 60_000, -1, -1, 3)
                                         for t in tids))
        opened = [(t, r) for t, r in zip(tids, results, strict=True)
                  if int(t.rsplit("-", 1)[1]) < open_count]
        await asyncio.gather(*(coordinator.add_partitions(
            t, r.producer_id, r.producer_epoch, [("wide", i % partitions)], 3)
            for i, (t, r) in enumerate(opened)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--ids", type=int, default=100_000)
    ap.add_argument("--open", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerThread(d + "/data", {"admin.http.port": "0"}).start()
        try:
            started = time.monotonic()
            broker.create_topic("wide", args.partitions)
            broker.call(_make_ids, args.ids, args.open, args.partitions)
            print(f"set-up: {args.partitions} partitions, {args.ids} transactional ids "
                  f"({args.open} open) in {time.monotonic() - started:.0f} s")
            port = broker.call(lambda b: b.admin_http.port)
            for page in PAGES:
                times = []
                for _ in range(7):
                    t = time.perf_counter()
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}",
                                                timeout=60) as resp:
                        size = len(resp.read())
                    times.append(time.perf_counter() - t)
                print(f"{statistics.median(times) * 1000:8.1f} ms  {size:>8} B  "
                      f"{urllib.parse.unquote(page)}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
