"""Reading one topic-partition offset range read_committed, as Arrow record batches.

Runs inside Spark's Python workers: it opens its own connection (nothing here is
pickled but the plain ``Range`` and options) and closes it when the range is done.

Test hooks (environment variables, for the kill-mid-batch test; never set them in
production):

* ``TXBROKER_SOURCE_TEST_READ_MARKER=<file>``: append ``topic partition start end pid``
  to the file when a range starts being read (pid: the reading Python worker's, so a
  test can tell which executor reads);
* ``TXBROKER_SOURCE_TEST_READ_DELAY=<seconds>[@<n>]``: sleep after the last rows of
  a range were handed to Spark, before the task can finish, so that a test can kill
  the driver while a micro-batch's output is half written. With ``@n``, only ranges
  read after the first ``n`` lines of the marker file sleep (earlier batches finish).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from .decoder import committed_batches
from .options import Range, SourceOptions, open_client
from .vectorized import to_arrow
from .wire import FetchResult, TxBrokerSourceError, WireClient

log = logging.getLogger("txbroker.spark_jobs.source")

MAX_FETCH_BYTES = 256 << 20
MARKER_ENV = "TXBROKER_SOURCE_TEST_READ_MARKER"
DELAY_ENV = "TXBROKER_SOURCE_TEST_READ_DELAY"


def data_loss(opts: SourceOptions, message: str) -> None:
    """Raise (failOnDataLoss=true, the default) or log a warning and carry on."""
    if opts.fail_on_data_loss:
        raise TxBrokerSourceError(
            message + ". Set failOnDataLoss=false to skip the missing offsets instead.",
            "OFFSET_OUT_OF_RANGE")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


def read_range(rng: Range, opts: SourceOptions, client: WireClient | None = None
               ) -> Iterator[pa.RecordBatch]:
    """The committed records of ``rng`` (start <= offset < end) in offset order.

    ``end`` is at or below the last stable offset the driver saw when it planned the
    range, so the range holds no record of a transaction still open, and reading it
    again later yields the same rows (what a replayed micro-batch needs)."""
    delay = _test_delay(rng)
    own = client is None
    if client is None:
        client = open_client(opts)
    where = f"{rng.topic}-{rng.partition}"
    # While a fetch's records are decoded and handed to Spark, the next Fetch is already
    # on its way (one at a time: the client is used by one thread at a time).
    prefetch = ThreadPoolExecutor(1, thread_name_prefix=f"txbroker-fetch-{where}")
    pending: Future[FetchResult] | None = None
    try:
        position = rng.start
        max_bytes = opts.max_fetch_bytes
        idle_since: float | None = None
        while position < rng.end:
            try:
                if pending is not None:
                    result, pending = pending.result(), None
                else:
                    result = client.fetch(rng.topic, rng.partition, position,
                                          max_bytes=max_bytes)
            except TxBrokerSourceError as e:
                if e.code == "UNKNOWN_TOPIC_OR_PARTITION":
                    data_loss(opts, f"{where} was deleted while offsets {position}-"
                                    f"{rng.end - 1} were still to be read")
                    break
                if e.code != "OFFSET_OUT_OF_RANGE":
                    raise
                earliest = e.log_start_offset
                if earliest is None or earliest < 0:
                    earliest = client.earliest([(rng.topic, rng.partition)])[
                        (rng.topic, rng.partition)]
                if position >= earliest:
                    # Past the end of the log: the partition was recreated or truncated.
                    data_loss(opts, f"offsets {position}-{rng.end - 1} of {where} no longer "
                                    "exist (the partition is shorter than when the batch "
                                    "was planned)")
                    break
                data_loss(opts, f"offsets {position}-{min(earliest, rng.end) - 1} of {where} "
                                f"were deleted (log start offset is now {earliest})")
                position = earliest
                continue
            batches, next_position = committed_batches(
                result.records, result.aborted, position, rng.end, where=where)
            if next_position > position:
                if next_position < rng.end:
                    pending = prefetch.submit(client.fetch, rng.topic, rng.partition,
                                              next_position, max_bytes=max_bytes)
                batch = to_arrow(batches, position, rng.end, rng.topic, rng.partition,
                                 include_headers=opts.include_headers, where=where)
                position = next_position
                idle_since = None
                if batch is not None:
                    yield batch  # every record of one fetch: Spark takes batches of any size
            elif result.records and max_bytes < MAX_FETCH_BYTES:
                max_bytes *= 2  # only part of a batch came back: ask for more
            elif result.last_stable_offset <= position and result.high_watermark <= position:
                data_loss(opts, f"offsets {position}-{rng.end - 1} of {where} no longer exist "
                                f"(high watermark is now {result.high_watermark})")
                break
            else:
                # Nothing came back below the planned end yet (a broker that is catching
                # up after a restart): wait for it, within the request timeout.
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > opts.timeout:
                    raise TxBrokerSourceError(
                        f"Fetch of {where} at offset {position}: no records within "
                        f"{opts.timeout:g} s although the range ends at {rng.end}",
                        "REQUEST_TIMED_OUT")
                time.sleep(0.05)
        if delay:
            time.sleep(delay)
    finally:
        # Waits for a fetch still in flight (Spark stopped reading early, or an error)
        # before its connection is closed: no thread outlives the read, retrying.
        prefetch.shutdown()
        if own:
            client.close()


def _test_delay(rng: Range) -> float:
    """The test hooks (see the module docstring): record the read, return the sleep."""
    marker = os.environ.get(MARKER_ENV)
    if not marker:
        return 0.0
    with open(marker, "a+") as f:
        f.seek(0)
        before = len(f.readlines())
        f.write(f"{rng.topic} {rng.partition} {rng.start} {rng.end} {os.getpid()}\n")
    seconds, _, after = os.environ.get(DELAY_ENV, "0").partition("@")
    return float(seconds) if before >= int(after or 0) else 0.0
