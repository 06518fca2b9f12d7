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


def open_transactions(broker, plogs: Iterable, now_ms: int | None = None, *,
                      candidates_only: bool = False) -> list[OpenInPartition]:
    """Every open transaction in ``plogs``, classified as find-hanging does; with
    ``candidates_only`` only those last written longer ago than the maximum timeout
    (the only ones that can hang: in the usual case none, and the coordinator's ids
    are not even looked at). The partitions and the coordinator are asked through
    their front doors (PartitionLog.open_transactions, TransactionCoordinator)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    max_ms = broker.config.get("transaction.max.timeout.ms")
    found = [(plog, txn) for plog in plogs for txn in plog.open_transactions()
             if not candidates_only or now - txn.last_timestamp > max_ms]
    coordinator = broker.transactions
    tids = coordinator.transactional_ids_of(txn.producer_id for _, txn in found)
    out = []
    for plog, txn in found:
        tid = tids.get(txn.producer_id)
        counted = tid is not None and coordinator.includes_partition(
            tid, txn.producer_id, plog.topic, plog.partition)
        out.append(OpenInPartition(
            plog.topic, plog.partition, txn.producer_id, txn.producer_epoch,
            txn.coordinator_epoch, txn.first_offset, txn.last_timestamp, tid, counted,
            hanging=not counted and now - txn.last_timestamp > max_ms))
    return out


def hanging_candidates(broker) -> list[OpenInPartition]:
    """Over every partition but the internal topics' (find-hanging skips them too)."""
    internal = {name for name, info in broker.logs.topics.items() if info.internal}
    return open_transactions(broker, (p for p in list(broker.logs.logs.values())
                                      if p.ongoing_transaction_count()
                                      and p.topic not in internal),
                             candidates_only=True)
