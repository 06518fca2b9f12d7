"""Checks of consumer-protocol group requests (KIP-848), as Kafka answers them: a
ConsumerGroupHeartbeat's fields, and the member and epoch of OffsetCommit,
TxnOffsetCommit and OffsetFetch for a consumer group (with KIP-1251's per-partition
assignment epochs, Kafka 4.3)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup
from txbroker.coordinator.group.consumer_records import Assignment

__all__ = ["HeartbeatRequest", "Refused", "validate_heartbeat", "validate_offset_commit",
           "validate_offset_fetch"]

_E = ErrorCode
NONE = _E.none.value


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # the request's TopicPartitions
    client_id: str = ""
    client_host: str = ""
    version: int = 1


class Refused(Exception):
    """A request refused with a Kafka error and message."""

    def __init__(self, error: _E, message: str) -> None:
        super().__init__(message)
        self.error = error.value
        self.message = message


def validate_heartbeat(req: HeartbeatRequest, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (raises Refused)."""
    bad = _E.invalid_request
    if not req.group_id:
        raise Refused(bad, "GroupId can't be empty.")
    if req.instance_id == "":
        raise Refused(bad, "InstanceId can't be empty.")
    if req.rack_id == "":
        raise Refused(bad, "RackId can't be empty.")
    if req.member_epoch != 0 or req.version >= 1:
        if not req.member_id:
            raise Refused(bad, "MemberId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise Refused(bad, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise Refused(bad, "TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            raise Refused(bad, "SubscribedTopicNames or SubscribedTopicRegex must be set in "
                               "first request.")
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise Refused(bad, "InstanceId can't be null.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise Refused(bad, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise Refused(_E.unsupported_assignor,
                      f"ServerAssignor {req.server_assignor} is not supported. Supported "
                      f"assignors: {', '.join(assignors)}.")


def validate_offset_commit(g: ConsumerGroup, member_id: str, instance_id: str | None,
                           member_epoch: int, transactional: bool, api_version: int,
                           partitions: list[tuple[uuid.UUID | None, int]]) -> int:
    """OffsetCommit/TxnOffsetCommit of a consumer group, as Kafka 4.3's
    ConsumerGroup.validateOffsetCommit with KIP-1251's per-partition rule: the
    member's own epoch commits anything; a newer one is STALE_MEMBER_EPOCH; an older
    one commits only partitions the member holds that were assigned to it at or
    before that epoch. TxnOffsetCommit (v0-5) answers ILLEGAL_GENERATION for a
    stale epoch, as Kafka. ``partitions``: (topic id, partition), None for a topic
    that does not exist."""
    if member_epoch < 0 and not g.members:
        return NONE  # admin or simple (assign()-style) client
    if transactional and member_epoch == -1 and not member_id and instance_id is None:
        return NONE  # a producer that sent no group metadata
    m = g.members.get(member_id)
    if m is None:
        return _E.unknown_member_id.value
    if m.uses_classic:
        # A classic member of a migrated group commits with its generation (= member
        # epoch) and any OffsetCommit version, as Kafka checks it.
        return NONE if member_epoch == m.member_epoch else _E.illegal_generation.value
    if not transactional and api_version < 9:
        return _E.unsupported_version.value
    stale = _E.illegal_generation.value if transactional else _E.stale_member_epoch.value
    if member_epoch == m.member_epoch:
        return NONE
    if member_epoch > m.member_epoch:
        return stale
    for tid, p in partitions:
        assigned_at = m.assignment_epoch((tid, p)) if tid is not None else None
        if assigned_at is None or member_epoch < assigned_at:
            return stale
    return NONE

def validate_offset_fetch(g: ConsumerGroup, member_id: str | None,
                          member_epoch: int) -> int:
    """OffsetFetch v9+ (Kafka's ConsumerGroup.validateOffsetFetch)."""
    if member_id is None and member_epoch < 0:
        return NONE
    m = g.members.get(member_id or "")
    if m is None:
        return _E.unknown_member_id.value
    if member_epoch != m.member_epoch:
        return _E.stale_member_epoch.value
    return NONE

