"""Helpers shared by the group handlers."""

from __future__ import annotations

import datetime

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode

ZERO = datetime.timedelta(0)
READ, DESCRIBE, GROUP, TOPIC = (AclOperation.READ, AclOperation.DESCRIBE, ResourceType.GROUP,
                                ResourceType.TOPIC)


def may_read_group(ctx, group_id: str) -> bool:
    """READ on the group: what Kafka wants for every member request of a group."""
    return ctx.authorize(READ, GROUP, group_id)


def may_write_transactional_id(ctx, transactional_id: str) -> bool:
    """WRITE on the transactional id: every transactional request of a producer."""
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def split_commit_entries(ctx, entries: list, op: AclOperation = READ) -> tuple[list, dict]:
    """Offset commits (OffsetCommit, TxnOffsetCommit): the entries of topics the
    principal may ``op`` (READ), and TOPIC_AUTHORIZATION_FAILED for the others."""
    allowed = ctx.authorized(op, TOPIC, {e.topic for e in entries})
    denied = {(e.topic, e.partition): ErrorCode.topic_authorization_failed.value
              for e in entries if e.topic not in allowed}
    if not denied:
        return entries, {}
    return [e for e in entries if e.topic in allowed], denied


def ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def code(value: int) -> ErrorCode:
    return ErrorCode(value)


def client_host(peer: str) -> str:
    # Kafka reports "/host" for the member's address.
    return "/" + peer.rsplit(":", 1)[0]


def names_by_topic_id(ctx) -> dict:
    """topic id -> name, for the versions that name topics by id (OffsetCommit and
    OffsetFetch v10); built per request, as Produce v13 does."""
    return {info.topic_id: name for name, info in ctx.broker.logs.topics.items()}


def commit_entries(request, names: dict | None = None) -> list:
    """The (topic, partition, offset, leader epoch, metadata) entries of an
    OffsetCommit or TxnOffsetCommit request; with ``names`` (v10) topics are named by
    id, and an unknown id gives the topic name "" (UNKNOWN_TOPIC_ID for the caller)."""
    from txbroker.coordinator.group.coordinator import OffsetCommitEntry

    entries = []
    for topic in request.topics:
        name = topic.name if names is None else names.get(topic.topic_id, "")
        for p in topic.partitions:
            epoch = getattr(p, "committed_leader_epoch", -1)
            entries.append(OffsetCommitEntry(name, p.partition_index, p.committed_offset,
                                             epoch if epoch is not None and epoch >= 0 else None,
                                             p.committed_metadata))
    return entries
