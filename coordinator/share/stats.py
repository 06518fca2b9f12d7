"""Counters of the share coordinator (KIP-932), for /metrics: plain ints, no I/O.

Owns nothing but its counts. The share-partitions (``partition.py``) and the share
coordinator (``coordinator.py``) add to one ShareStats per broker at their state
transitions; ``broker/metrics.py`` reads them when scraped. Counts are records
(offsets), not requests, like Kafka's record-acknowledgement / record-acquisition
meters. They live in memory: a restart starts them from 0, as Prometheus counters may.
"""

from __future__ import annotations

from dataclasses import dataclass

from txbroker.coordinator.share.state import AcknowledgeType

__all__ = ["ShareStats"]


@dataclass
class ShareStats:
    """Records, by what happened to them."""

    acquired_records: int = 0  # delivered to a member by ShareFetch
    redelivered_records: int = 0  # of those, delivered with a delivery count above 1
    accepted_records: int = 0  # acknowledged ACCEPT
    released_records: int = 0  # acknowledged RELEASE
    rejected_records: int = 0  # acknowledged REJECT (GAP is counted here too: archived unseen)
    renewed_records: int = 0  # acquisition locks renewed (RENEW, KIP-1222)
    lock_expired_records: int = 0  # acquisition locks that ran out (back to AVAILABLE / ARCHIVED)
    dlq_records: int = 0  # written to a dead-letter topic (KIP-1191)

    def acknowledged(self, ack_type: int, records: int) -> None:
        """``records`` offsets acknowledged with ``ack_type`` (an AcknowledgeType id)."""
        if ack_type == AcknowledgeType.ACCEPT:
            self.accepted_records += records
        elif ack_type == AcknowledgeType.RELEASE:
            self.released_records += records
        elif ack_type == AcknowledgeType.RENEW:
            self.renewed_records += records
        else:  # REJECT, GAP
            self.rejected_records += records
