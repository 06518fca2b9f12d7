"""Records of the compacted ``__consumer_offsets`` topic, as versioned msgpack.

Two kinds of record share the topic, like in Kafka:

* group metadata: key = group id, value = the group's generation, protocol,
  leader and members (with their subscription and assignment);
* committed offsets: key = (group, topic, partition), value = offset, leader
  epoch, metadata string, commit timestamp and an optional expire timestamp.

A tombstone is a record whose value is ``None``.

Layout. Every key and every value is a msgpack array whose first element is
the format version (0 today):

* key:   ``[0, KIND, *fields]`` with KIND 1 = offset, 2 = group metadata
  (Kafka's own key-version numbering). Key bytes must never change for a given
  logical key: compaction supersedes records by comparing key bytes, so a new
  key format would leave old records alive forever.
* value: ``[version, *fields]``. A later version may only *append* fields, so
  an older reader decodes the prefix it knows and ignores the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txbroker.coordinator.group.consumer_records import ConsumerRecordKey, decode_consumer_key
from txbroker.coordinator.record_codec import as_bytes, as_int, as_str, pack, unpack_array

FORMAT_VERSION = 0
_KIND_OFFSET = 1
_KIND_GROUP = 2

__all__ = [
    "GroupMetadataKey",
    "OffsetKey",
    "MemberMetadata",
    "GroupMetadataValue",
    "OffsetValue",
    "encode_key",
    "decode_key",
    "encode_group_metadata_key",
    "encode_offset_key",
    "encode_group_metadata_value",
    "decode_group_metadata_value",
    "encode_offset_value",
    "decode_offset_value",
]


@dataclass(frozen=True, order=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, order=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's selected protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str  # "" when the group never had a member
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None  # when the group entered its state (offset expiry)
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None




def _opt_str(v: Any, what: str) -> str | None:
    return None if v is None else as_str(v, what)


def _opt_int(v: Any, what: str) -> int | None:
    return None if v is None else as_int(v, what)


# -- keys --------------------------------------------------------------------


def encode_group_metadata_key(group_id: str) -> bytes:
    return pack([FORMAT_VERSION, _KIND_GROUP, group_id])


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return pack([FORMAT_VERSION, _KIND_OFFSET, group_id, topic, partition])


def encode_key(key: GroupMetadataKey | OffsetKey) -> bytes:
    if isinstance(key, GroupMetadataKey):
        return encode_group_metadata_key(key.group_id)
    return encode_offset_key(key.group_id, key.topic, key.partition)


def decode_key(data: bytes) -> GroupMetadataKey | OffsetKey | ConsumerRecordKey:
    """Tell the record kinds apart and decode the key (consumer-protocol groups' kinds:
    ``consumer_records.py``)."""
    arr = unpack_array(data, "key")
    if arr[0] != FORMAT_VERSION:
        # Keys cannot evolve (see the module docstring): any other version is foreign.
        raise ValueError(f"key: unsupported key format version {arr[0]}")
    if len(arr) < 2:
        raise ValueError("key: missing kind")
    kind = arr[1]
    if kind == _KIND_GROUP and len(arr) == 3:
        return GroupMetadataKey(as_str(arr[2], "group id"))
    if kind == _KIND_OFFSET and len(arr) == 5:
        return OffsetKey(as_str(arr[2], "group id"), as_str(arr[3], "topic"), as_int(arr[4], "partition"))
    consumer = decode_consumer_key(arr)
    if consumer is not None:
        return consumer
    raise ValueError(f"key: unknown kind {kind!r} / length {len(arr)}")


# -- group metadata value -----------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue | None) -> bytes | None:
    if value is None:
        return None
    members = [
        [
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            bytes(m.subscription),
            bytes(m.assignment),
        ]
        for m in value.members
    ]
    return pack(
        [
            FORMAT_VERSION,
            value.protocol_type,
            value.generation_id,
            value.protocol_name,
            value.leader_id,
            value.current_state_timestamp_ms,
            members,
        ]
    )


def _decode_member(raw: Any) -> MemberMetadata:
    if not isinstance(raw, list) or len(raw) < 8:
        raise ValueError("group metadata: malformed member")
    return MemberMetadata(
        member_id=as_str(raw[0], "member id"),
        group_instance_id=_opt_str(raw[1], "group instance id"),
        client_id=as_str(raw[2], "client id"),
        client_host=as_str(raw[3], "client host"),
        rebalance_timeout_ms=as_int(raw[4], "rebalance timeout"),
        session_timeout_ms=as_int(raw[5], "session timeout"),
        subscription=as_bytes(raw[6], "subscription"),
        assignment=as_bytes(raw[7], "assignment"),
    )


def decode_group_metadata_value(data: bytes | None) -> GroupMetadataValue | None:
    if data is None:
        return None
    arr = unpack_array(data, "group metadata")
    if len(arr) < 7:
        raise ValueError("group metadata: too few fields")
    members = arr[6]
    if not isinstance(members, list):
        raise ValueError("group metadata: members is not an array")
    return GroupMetadataValue(
        protocol_type=as_str(arr[1], "protocol type"),
        generation_id=as_int(arr[2], "generation"),
        protocol_name=_opt_str(arr[3], "protocol name"),
        leader_id=_opt_str(arr[4], "leader"),
        current_state_timestamp_ms=_opt_int(arr[5], "state timestamp"),
        members=tuple(_decode_member(m) for m in members),
    )


# -- offset value -------------------------------------------------------------


def encode_offset_value(value: OffsetValue | None) -> bytes | None:
    if value is None:
        return None
    return pack(
        [
            FORMAT_VERSION,
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp_ms,
            value.expire_timestamp_ms,
        ]
    )


def decode_offset_value(data: bytes | None) -> OffsetValue | None:
    if data is None:
        return None
    arr = unpack_array(data, "offset")
    if len(arr) < 6:
        raise ValueError("offset: too few fields")
    return OffsetValue(
        offset=as_int(arr[1], "offset"),
        leader_epoch=_opt_int(arr[2], "leader epoch"),
        metadata=as_str(arr[3], "metadata"),
        commit_timestamp_ms=as_int(arr[4], "commit timestamp"),
        expire_timestamp_ms=_opt_int(arr[5], "expire timestamp"),
    )
