"""Helpers shared by the group handlers."""

from __future__ import annotations

import datetime

from txbroker.protocol.errors import ErrorCode

ZERO = datetime.timedelta(0)


def ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def code(value: int) -> ErrorCode:
    return ErrorCode(value)


def client_host(peer: str) -> str:
    # Kafka reports "/host" for the member's address.
    return "/" + peer.rsplit(":", 1)[0]


def commit_entries(request) -> list:
    """The (topic, partition, offset, leader epoch, metadata) entries of an
    OffsetCommit or TxnOffsetCommit request."""
    from txbroker.coordinator.group.coordinator import OffsetCommitEntry

    entries = []
    for topic in request.topics:
        for p in topic.partitions:
            epoch = getattr(p, "committed_leader_epoch", -1)
            entries.append(OffsetCommitEntry(topic.name, p.partition_index, p.committed_offset,
                                             epoch if epoch is not None and epoch >= 0 else None,
                                             p.committed_metadata))
    return entries
