"""Open transactions as the partitions see them, and which of them hang.

Kafka's rule (kafka-transactions.sh find-hanging, tools/transactions.py): an open
transaction in a partition (DescribeProducers' current_txn_start_offset) is a candidate
when its producer's last write is older than the maximum transaction timeout; it hangs
unless its producer id is the current one of a transactional id whose transaction, as
the coordinator describes it, includes the partition. Read from the in-process state:
the producers' open transactions are a dict per partition, the coordinator's a dict.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class OpenInPartition:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    last_timestamp: int
    transactional_id: str | None  # whose current producer id this is, if any
    counted: bool  # the coordinator's transaction includes this partition
    hanging: bool


def transactional_ids_of(broker, producer_ids: Iterable[int]) -> dict[int, str]:
    """producer id -> the transactional id whose current producer id it is."""
    wanted = set(producer_ids)
    if not wanted or not broker.transactions.state.loaded:
        return {}
    result = broker.transactions.state.list_transactions((), wanted)
    return {t.producer_id: t.transactional_id for t in result.transactions
            if t.producer_id in wanted}


def open_transactions(broker, plogs: Iterable, now_ms: int | None = None, *,
                      candidates_only: bool = False) -> list[OpenInPartition]:
    """Every open transaction in ``plogs``, classified as find-hanging does; with
    ``candidates_only`` only those last written longer ago than the maximum timeout
    (the only ones that can hang: in the usual case none, and the coordinator's ids
    are not even looked at)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    max_ms = broker.config.get("transaction.max.timeout.ms")
    found = []
    for plog in plogs:
        for pid, first in list(plog.ongoing_txns.items()):
            entry = plog.producer_state.producers.get(pid)
            last_ts = entry.last_timestamp if entry is not None else -1
            if not candidates_only or now - last_ts > max_ms:
                found.append((plog, pid, first, entry))
    tids = transactional_ids_of(broker, (pid for _, pid, _, _ in found))
    state = broker.transactions.state
    out = []
    for plog, pid, first, entry in found:
        tid = tids.get(pid)
        counted = False
        if tid is not None:
            d = state.describe(tid)
            counted = d.error == 0 and d.producer_id == pid and \
                plog.partition in d.topics.get(plog.topic, ())
        last_ts = entry.last_timestamp if entry is not None else -1
        out.append(OpenInPartition(
            plog.topic, plog.partition, pid, entry.epoch if entry is not None else -1,
            entry.coordinator_epoch if entry is not None else -1, first, last_ts, tid,
            counted, hanging=not counted and now - last_ts > max_ms))
    return out


def hanging_candidates(broker) -> list[OpenInPartition]:
    """Over every partition but the internal topics' (find-hanging skips them too)."""
    internal = {name for name, info in broker.logs.topics.items() if info.internal}
    return open_transactions(broker, (p for p in list(broker.logs.logs.values())
                                      if p.ongoing_txns and p.topic not in internal),
                             candidates_only=True)
