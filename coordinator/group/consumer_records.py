"""Records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``.

Kafka keeps a consumer group as six record types, each keyed by its key version
(its "record type"): 3 ConsumerGroupMetadata (group epoch), 4
ConsumerGroupPartitionMetadata (the subscribed topics' metadata), 5
ConsumerGroupMemberMetadata (a member's subscription), 6
ConsumerGroupTargetAssignmentMetadata (the assignment epoch), 7
ConsumerGroupTargetAssignmentMember (a member's target partitions) and 8
ConsumerGroupCurrentMemberAssignment (a member's epochs, state, assigned and
pending-revocation partitions) and 16 ConsumerGroupRegularExpression (the topics a
subscribed regex resolved to, keyed by the regex). The same types and fields are stored here in the
versioned msgpack layout of ``records.py`` (key ``[0, type, group, (member)]``,
value ``[0, *fields]``; a later version may only append fields). A tombstone (value
None) removes what its key names. Topic ids are stored as their 16 bytes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from txbroker.coordinator.record_codec import as_bytes, as_int, as_str, pack, unpack_array

FORMAT_VERSION = 0
GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
GROUP_KINDS = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)
# Keyed by group and a second string: the member id, or the regex for REGULAR_EXPRESSION.
MEMBER_KINDS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT,
                REGULAR_EXPRESSION)

# {topic id: sorted partitions}: an assignment as the records and the state keep it.
Assignment = dict[uuid.UUID, frozenset[int]]

__all__ = [
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerRecordKey",
    "CurrentAssignment",
    "MemberSubscription",
    "decode_consumer_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "record",
]


@dataclass(frozen=True, order=True)
class ConsumerRecordKey:
    kind: int
    group_id: str
    member_id: str = ""


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """ConsumerGroupMemberMetadataValue's ClassicMemberMetadata: set for a member that
    speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer group."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, ConsumerProtocolSubscription)


@dataclass(frozen=True)
class MemberSubscription:
    """ConsumerGroupMemberMetadataValue."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True)
class CurrentAssignment:
    """ConsumerGroupCurrentMemberAssignmentValue."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment
    # KIP-1251 (Kafka 4.3): the member epoch each held partition was assigned at.
    assignment_epochs: dict[tuple[uuid.UUID, int], int] | None = None


def encode_key(key: ConsumerRecordKey) -> bytes:
    if key.kind in GROUP_KINDS:
        return pack([FORMAT_VERSION, key.kind, key.group_id])
    return pack([FORMAT_VERSION, key.kind, key.group_id, key.member_id])


def record(kind: int, group_id: str, member_id: str, value: Any) -> tuple[bytes, bytes | None]:
    """One record (key, value) of a consumer group; ``value`` None is a tombstone."""
    return encode_key(ConsumerRecordKey(kind, group_id, member_id)), encode_value(kind, value)


def decode_consumer_key(arr: list[Any]) -> ConsumerRecordKey | None:
    """The key of a consumer-group record from its decoded array, None if another kind."""
    kind = arr[1]
    if kind in GROUP_KINDS and len(arr) == 3:
        return ConsumerRecordKey(kind, as_str(arr[2], "group id"))
    if kind in MEMBER_KINDS and len(arr) == 4:
        return ConsumerRecordKey(kind, as_str(arr[2], "group id"), as_str(arr[3], "member id"))
    return None


def _rows(raw: Any, width: int, what: str) -> list[list]:
    """An array of arrays of at least ``width`` fields, the first a 16-byte topic id."""
    if not isinstance(raw, list):
        raise ValueError(f"{what}: expected an array")
    for item in raw:
        if not isinstance(item, list) or len(item) < width:
            raise ValueError(f"{what}: malformed entry")
        if len(as_bytes(item[0], "topic id")) != 16:
            raise ValueError(f"{what}: bad topic id")
    return raw


def _assignment(a: Assignment) -> list:
    return [[tid.bytes, sorted(parts)] for tid, parts in sorted(a.items()) if parts]


def _decode_assignment(raw: Any, what: str) -> Assignment:
    out: Assignment = {}
    for item in _rows(raw, 2, what):
        if not isinstance(item[1], list):
            raise ValueError(f"{what}: malformed topic partitions")
        out[uuid.UUID(bytes=item[0])] = frozenset(as_int(p, "partition", 0) for p in item[1])
    return out


def _decode_classic(raw: Any) -> ClassicMemberMetadata:
    """The appended classic member metadata field (absent for consumer-protocol members)."""
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise ValueError("member metadata: malformed classic member metadata")
    protocols = []
    for item in raw[1]:
        if not isinstance(item, list) or len(item) < 2:
            raise ValueError("member metadata: malformed classic protocol")
        protocols.append((as_str(item[0], "protocol name"), as_bytes(item[1], "protocol metadata")))
    return ClassicMemberMetadata(as_int(raw[0], "session timeout"), tuple(protocols))


def _opt_str(v: Any, what: str) -> str | None:
    return None if v is None else as_str(v, what)


def encode_value(kind: int, value: Any) -> bytes | None:
    """``value``: int (group / assignment epoch), {topic id: (name, partitions)}
    (partition metadata), MemberSubscription, Assignment (target) or CurrentAssignment."""
    if value is None:
        return None
    if kind in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        return pack([FORMAT_VERSION, int(value)])
    if kind == PARTITION_METADATA:
        return pack([FORMAT_VERSION, [[tid.bytes, name, n] for tid, (name, n) in
                                      sorted(value.items())]])
    if kind == MEMBER_METADATA:
        s: MemberSubscription = value
        return pack([FORMAT_VERSION, s.instance_id, s.rack_id, s.client_id, s.client_host,
                     list(s.subscribed_topic_names), s.subscribed_topic_regex,
                     s.rebalance_timeout_ms, s.server_assignor]
                    + ([] if s.classic is None else [
                        [s.classic.session_timeout_ms,
                         [[n, bytes(m)] for n, m in s.classic.protocols]]]))
    if kind == TARGET_ASSIGNMENT_MEMBER:
        return pack([FORMAT_VERSION, _assignment(value)])
    if kind == REGULAR_EXPRESSION:  # (topics, refresh time ms)
        topics, refreshed_ms = value
        return pack([FORMAT_VERSION, sorted(topics), refreshed_ms])
    c: CurrentAssignment = value
    epochs = [[tid.bytes, p, e] for (tid, p), e in sorted((c.assignment_epochs or {}).items())]
    return pack([FORMAT_VERSION, c.member_epoch, c.previous_member_epoch, c.state,
                 _assignment(c.assigned), _assignment(c.pending_revocation), epochs])


def decode_value(kind: int, data: bytes | None) -> Any:
    """The inverse of :func:`encode_value` (None for a tombstone); ValueError if malformed."""
    if data is None:
        return None
    arr = unpack_array(data, f"consumer group record {kind}")
    if kind in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        if len(arr) < 2:
            raise ValueError("epoch record: too few fields")
        return as_int(arr[1], "epoch")
    if kind == PARTITION_METADATA:
        if len(arr) < 2:
            raise ValueError("partition metadata: too few fields")
        return {uuid.UUID(bytes=t[0]): (as_str(t[1], "topic"), as_int(t[2], "partitions", 0))
                for t in _rows(arr[1], 3, "partition metadata")}
    if kind == MEMBER_METADATA:
        if len(arr) < 9 or not isinstance(arr[5], list):
            raise ValueError("member metadata: too few fields")
        return MemberSubscription(
            instance_id=_opt_str(arr[1], "instance id"), rack_id=_opt_str(arr[2], "rack id"),
            client_id=as_str(arr[3], "client id"), client_host=as_str(arr[4], "client host"),
            subscribed_topic_names=tuple(as_str(t, "topic") for t in arr[5]),
            subscribed_topic_regex=_opt_str(arr[6], "regex"),
            rebalance_timeout_ms=as_int(arr[7], "rebalance timeout"),
            server_assignor=_opt_str(arr[8], "server assignor"),
            classic=_decode_classic(arr[9]) if len(arr) > 9 else None)
    if kind == REGULAR_EXPRESSION:
        if len(arr) < 3 or not isinstance(arr[1], list):
            raise ValueError("regular expression: too few fields")
        return (frozenset(as_str(t, "topic") for t in arr[1]),
                as_int(arr[2], "refresh time"))
    if kind == TARGET_ASSIGNMENT_MEMBER:
        if len(arr) < 2:
            raise ValueError("target assignment: too few fields")
        return _decode_assignment(arr[1], "target assignment")
    if len(arr) < 6:
        raise ValueError("current assignment: too few fields")
    epochs = None
    if len(arr) > 6:  # appended field: absent in records written before it
        epochs = {(uuid.UUID(bytes=t[0]), as_int(t[1], "partition", 0)):
                  as_int(t[2], "assignment epoch") for t in _rows(arr[6], 3, "assignment epochs")}
    return CurrentAssignment(as_int(arr[1], "member epoch"), as_int(arr[2], "previous epoch"),
                             as_int(arr[3], "state"),
                             _decode_assignment(arr[4], "assigned partitions"),
                             _decode_assignment(arr[5], "pending revocation"), epochs)
