"""ShareStats (``coordinator/share/stats.py``): the counts a SharePartition adds at its
state transitions, which /metrics exports."""

from __future__ import annotations

from txbroker.coordinator.share.partition import SharePartition
from txbroker.coordinator.share.results import (
    AcknowledgementBatch,
    FetchedBatch,
    SharePartitionConfig,
)
from txbroker.coordinator.share.state import AcknowledgeType
from txbroker.coordinator.share.stats import ShareStats

LOCK = 1000


def _partition(stats: ShareStats) -> SharePartition:
    config = SharePartitionConfig(record_lock_duration_ms=LOCK, delivery_count_limit=3)
    part, _ = SharePartition.initialize(config, 0, stats=stats)
    return part


def _acquire(part: SharePartition, member: str, now: int, last: int = 9) -> int:
    offset = part.next_fetch_offset()
    res = part.acquire(member, [FetchedBatch(0, last)], fetch_offset=offset, now_ms=now,
                       max_records=100)
    return res.count


def test_acquisitions_acknowledgements_expiries_and_redeliveries_are_counted() -> None:
    stats = ShareStats()
    part = _partition(stats)
    assert _acquire(part, "m1", now=0) == 10
    assert (stats.acquired_records, stats.redelivered_records) == (10, 0)
    types = (AcknowledgeType.ACCEPT,) * 4 + (AcknowledgeType.RELEASE,) * 3 \
        + (AcknowledgeType.REJECT,) * 2 + (AcknowledgeType.RENEW,)
    res = part.acknowledge("m1", [AcknowledgementBatch(0, 9, tuple(int(t) for t in types))], now_ms=1)
    assert res.error_code == 0
    assert (stats.accepted_records, stats.released_records, stats.rejected_records,
            stats.renewed_records) == (4, 3, 2, 1)
    # The 3 released come back with delivery count 2: redeliveries.
    assert _acquire(part, "m2", now=2) == 3
    assert (stats.acquired_records, stats.redelivered_records) == (13, 3)
    # Offset 9 (renewed at 1) and 4..6 (acquired at 2) expire.
    part.tick(LOCK + 2)
    assert stats.lock_expired_records == 4
    assert stats.dlq_records == 0


def test_a_refused_acknowledgement_counts_nothing() -> None:
    stats = ShareStats()
    part = _partition(stats)
    _acquire(part, "m1", now=0)
    res = part.acknowledge("m2", [AcknowledgementBatch(0, 9, (int(AcknowledgeType.ACCEPT),))],
                           now_ms=1)
    assert res.error_code != 0
    assert stats.accepted_records == 0


def test_partitions_built_without_stats_count_privately() -> None:
    part, _ = SharePartition.initialize(SharePartitionConfig(), 0)
    _acquire(part, "m1", now=0)
    assert part.stats.acquired_records == 10
