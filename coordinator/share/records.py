"""Records of the ``__share_group_state`` topic, byte-compatible with Kafka 4.4.

Kafka writes them through its CoordinatorRecordSerde (share-coordinator's
ShareSnapshotKey/Value.json, ShareUpdateKey/Value.json):

* key:   int16 record type (0 ShareSnapshot, 1 ShareUpdate; the JSON's ``apiKey``),
  then the key at version 0, not flexible: GroupId string (int16 length), TopicId
  uuid (16 bytes), Partition int32;
* value: int16 value version (0), then the value at version 0, flexible: for a
  snapshot SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32, StartOffset
  int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches compact array;
  for an update SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1: not
  updated), StateBatches. A state batch is FirstOffset int64, LastOffset int64,
  DeliveryState int8, DeliveryCount int16 and its (empty) tagged fields.
  DeliveryCompleteCount (KIP-1226, Kafka 4.2) is tagged field 0 of the value, int32,
  written only when it is not its default -1.

A tombstone (value None) under a ShareSnapshot key deletes the share-partition's state.
Decoding is strict: a malformed record raises ValueError (the loader skips it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from txbroker.coordinator.share.state import (
    PersistedShareState,
    StateBatch,
    combine_state_batches,
)
from txbroker.protocol.primitives import (
    DecodeError,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_unsigned_varint,
)

__all__ = [
    "SHARE_SNAPSHOT",
    "SHARE_UPDATE",
    "ShareStateKey",
    "ShareSnapshotValue",
    "ShareUpdateValue",
    "encode_key",
    "decode_key",
    "encode_snapshot_value",
    "decode_snapshot_value",
    "encode_update_value",
    "decode_update_value",
    "decode_value",
    "replay",
]

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0
_DELIVERY_COMPLETE_COUNT_TAG = 0


@dataclass(frozen=True, order=True)
class ShareStateKey:
    """Which share-partition a record is about; ``record_type`` is SHARE_SNAPSHOT or
    SHARE_UPDATE (the two kinds have distinct keys, so compaction keeps one of each)."""

    record_type: int
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = -1


@dataclass(frozen=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: not updated
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = -1


# -- keys ------------------------------------------------------------------------------


def encode_key(key: ShareStateKey) -> bytes:
    if key.record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise ValueError(f"share state key: unknown record type {key.record_type}")
    out = bytearray()
    write_int16(out, key.record_type)
    group = key.group_id.encode("utf-8")
    write_int16(out, len(group))
    out += group
    out += key.topic_id.bytes
    write_int32(out, key.partition)
    return bytes(out)


def decode_key(data: bytes) -> ShareStateKey:
    try:
        record_type, off = read_int16(data, 0)
        if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
            raise ValueError(f"share state key: unknown record type {record_type}")
        n, off = read_int16(data, off)
        if n < 0 or off + n + 20 != len(data):
            raise ValueError("share state key: bad length")
        group = bytes(data[off:off + n]).decode("utf-8")
        off += n
        topic_id = uuid.UUID(bytes=bytes(data[off:off + 16]))
        partition, _ = read_int32(data, off + 16)
    except (DecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"share state key: {exc}") from exc
    return ShareStateKey(record_type, group, topic_id, partition)


# -- values ----------------------------------------------------------------------------


def _write_batches(out: bytearray, batches: Iterable[StateBatch]) -> None:
    batches = tuple(batches)
    write_unsigned_varint(out, len(batches) + 1)
    for b in batches:
        write_int64(out, b.first_offset)
        write_int64(out, b.last_offset)
        write_int8(out, b.delivery_state)
        write_int16(out, b.delivery_count)
        write_unsigned_varint(out, 0)  # no tagged fields


def _write_tags(out: bytearray, delivery_complete_count: int) -> None:
    if delivery_complete_count == -1:
        write_unsigned_varint(out, 0)
        return
    write_unsigned_varint(out, 1)
    write_unsigned_varint(out, _DELIVERY_COMPLETE_COUNT_TAG)
    write_unsigned_varint(out, 4)
    write_int32(out, delivery_complete_count)


def _read_batches(data: bytes, off: int) -> tuple[tuple[StateBatch, ...], int]:
    n, off = read_unsigned_varint(data, off)
    if n == 0:
        raise ValueError("state batches: null array")
    if (n - 1) * 20 > len(data) - off:  # each batch takes at least 20 bytes
        raise ValueError("state batches: count past the end of the record")
    out = []
    for _ in range(n - 1):
        first, off = read_int64(data, off)
        last, off = read_int64(data, off)
        state, off = read_int8(data, off)
        count, off = read_int16(data, off)
        off = _skip_tags(data, off)
        out.append(StateBatch(first, last, state, count))
    return tuple(out), off


def _skip_tags(data: bytes, off: int) -> int:
    count, off = read_unsigned_varint(data, off)
    for _ in range(count):
        _, off = read_unsigned_varint(data, off)
        size, off = read_unsigned_varint(data, off)
        if off + size > len(data):
            raise ValueError("tagged field past the end of the record")
        off += size
    return off


def _read_tags(data: bytes, off: int) -> tuple[int, int]:
    """The value's tagged fields: DeliveryCompleteCount (-1 when absent); unknown tags
    are skipped, as Kafka does."""
    dcc = -1
    count, off = read_unsigned_varint(data, off)
    for _ in range(count):
        tag, off = read_unsigned_varint(data, off)
        size, off = read_unsigned_varint(data, off)
        if off + size > len(data):
            raise ValueError("tagged field past the end of the record")
        if tag == _DELIVERY_COMPLETE_COUNT_TAG:
            if size != 4:
                raise ValueError("DeliveryCompleteCount: bad size")
            dcc, _ = read_int32(data, off)
        off += size
    return dcc, off


def encode_snapshot_value(value: ShareSnapshotValue | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    write_int16(out, VALUE_VERSION)
    write_int32(out, value.snapshot_epoch)
    write_int32(out, value.state_epoch)
    write_int32(out, value.leader_epoch)
    write_int64(out, value.start_offset)
    write_int64(out, value.create_timestamp)
    write_int64(out, value.write_timestamp)
    _write_batches(out, value.state_batches)
    _write_tags(out, value.delivery_complete_count)
    return bytes(out)


def encode_update_value(value: ShareUpdateValue) -> bytes:
    out = bytearray()
    write_int16(out, VALUE_VERSION)
    write_int32(out, value.snapshot_epoch)
    write_int32(out, value.leader_epoch)
    write_int64(out, value.start_offset)
    _write_batches(out, value.state_batches)
    _write_tags(out, value.delivery_complete_count)
    return bytes(out)


def _version(data: bytes, what: str) -> int:
    version, off = read_int16(data, 0)
    if version != VALUE_VERSION:
        raise ValueError(f"{what}: unsupported value version {version}")
    return off


def decode_snapshot_value(data: bytes | None) -> ShareSnapshotValue | None:
    if data is None:
        return None
    try:
        off = _version(data, "share snapshot")
        snapshot_epoch, off = read_int32(data, off)
        state_epoch, off = read_int32(data, off)
        leader_epoch, off = read_int32(data, off)
        start_offset, off = read_int64(data, off)
        create_ts, off = read_int64(data, off)
        write_ts, off = read_int64(data, off)
        batches, off = _read_batches(data, off)
        dcc, off = _read_tags(data, off)
    except DecodeError as exc:
        raise ValueError(f"share snapshot: {exc}") from exc
    if off != len(data):
        raise ValueError("share snapshot: trailing bytes")
    return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset,
                              create_ts, write_ts, batches, dcc)


def decode_update_value(data: bytes) -> ShareUpdateValue:
    try:
        off = _version(data, "share update")
        snapshot_epoch, off = read_int32(data, off)
        leader_epoch, off = read_int32(data, off)
        start_offset, off = read_int64(data, off)
        batches, off = _read_batches(data, off)
        dcc, off = _read_tags(data, off)
    except DecodeError as exc:
        raise ValueError(f"share update: {exc}") from exc
    if off != len(data):
        raise ValueError("share update: trailing bytes")
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, batches, dcc)


def decode_value(key: ShareStateKey, data: bytes | None) -> ShareSnapshotValue | ShareUpdateValue | None:
    if key.record_type == SHARE_SNAPSHOT:
        return decode_snapshot_value(data)
    if data is None:
        raise ValueError("share update: tombstone under an update key")
    return decode_update_value(data)


# -- replay ----------------------------------------------------------------------------


def replay(state: PersistedShareState | None,
           value: ShareSnapshotValue | ShareUpdateValue | None) -> PersistedShareState | None:
    """The share coordinator's replay of one record of a share-partition: a snapshot
    replaces the state (a tombstone deletes it), an update is merged into it (start
    offset -1 keeps the old one; batches combined as in ``combine_state_batches``)."""
    if value is None:
        return None
    if isinstance(value, ShareSnapshotValue):
        return PersistedShareState(value.state_epoch, value.leader_epoch, value.start_offset,
                                   value.delivery_complete_count, value.state_batches)
    if state is None:
        # An update with no snapshot before it (Kafka starts from the update alone).
        return PersistedShareState(0, value.leader_epoch, value.start_offset,
                                   value.delivery_complete_count,
                                   combine_state_batches((), value.state_batches, value.start_offset))
    start = state.start_offset if value.start_offset == -1 else value.start_offset
    leader_epoch = state.leader_epoch if value.leader_epoch == -1 else value.leader_epoch
    return PersistedShareState(
        state.state_epoch, leader_epoch, start, value.delivery_complete_count,
        combine_state_batches(state.state_batches, value.state_batches, start))
