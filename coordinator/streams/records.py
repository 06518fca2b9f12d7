"""Records of streams groups (KIP-1071) in ``__consumer_offsets``, byte-compatible with
Kafka 4.4's CoordinatorRecordSerde and the group-coordinator's JSON definitions:

* key: int16 record type (the JSON's ``apiKey``), then the key at version 0, not
  flexible: GroupId (int16-length string) and, for member records, MemberId;
* value: int16 version (0), then the value at version 0, flexible (compact strings and
  arrays, tagged fields). A tombstone (value None) deletes what its key names.

==  ======================================  =============================================
17  StreamsGroupMetadata                    Epoch, MetadataHash; tagged: 0 Validated-
                                            TopologyEpoch (-1), 1 LastAssignmentConfigs
                                            (null), 2 StoredDescriptionTopologyEpoch (-1),
                                            3 FailedDescriptionTopologyEpoch (-1)
19  StreamsGroupMemberMetadata              the member's instance id, rack, client, rebalance
                                            timeout, topology epoch, process, endpoint, tags
20  StreamsGroupTargetAssignmentMetadata    AssignmentEpoch; tagged 0 AssignmentTimestamp (0)
21  StreamsGroupTargetAssignmentMember      Active / Standby / WarmupTasks
22  StreamsGroupCurrentMemberAssignment     epochs, State, tasks, tasks pending revocation;
                                            active TaskIds carry tagged 0 AssignmentEpochs
23  StreamsGroupTopology                    Epoch, Subtopologies
==  ======================================  =============================================

(18, StreamsGroupPartitionMetadata, is gone from Kafka 4.4.) Decoding is strict: a
malformed record raises ValueError, so a loader can skip it with a log line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from txbroker.coordinator.streams.assignor import TaskId
from txbroker.coordinator.streams.config import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    RECORD_TYPES,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    TOPOLOGY,
)
from txbroker.coordinator.streams.reconcile import MemberAssignment, TasksTuple
from txbroker.coordinator.streams.topology import (
    CopartitionGroup,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)
from txbroker.coordinator.streams.wire import (
    Reader,
    int32_bytes,
    write_kvs,
    write_len,
    write_str,
    write_tags,
)
from txbroker.protocol.primitives import (
    DecodeError,
    read_int16,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_unsigned_varint,
)

__all__ = ["GROUP_METADATA", "MEMBER_METADATA", "TARGET_ASSIGNMENT_METADATA",
           "TARGET_ASSIGNMENT_MEMBER", "CURRENT_MEMBER_ASSIGNMENT", "TOPOLOGY", "RECORD_TYPES",
           "StreamsRecordKey", "GroupMetadata", "MemberMetadata", "TargetAssignmentMetadata",
           "StreamsRecord", "encode_key", "decode_key", "encode_value", "decode_value",
           "encode_record", "decode_record"]

_GROUP_KEYS = (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA, TOPOLOGY)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
assert set(RECORD_TYPES) == set(_GROUP_KEYS + _MEMBER_KEYS)


@dataclass(frozen=True, order=True)
class StreamsRecordKey:
    record_type: int
    group_id: str
    member_id: str = ""  # member records only


@dataclass(frozen=True)
class GroupMetadata:
    epoch: int
    metadata_hash: int
    validated_topology_epoch: int = -1
    last_assignment_configs: tuple[tuple[str, str], ...] | None = None
    stored_description_topology_epoch: int = -1
    failed_description_topology_epoch: int = -1


@dataclass(frozen=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TargetAssignmentMetadata:
    assignment_epoch: int
    assignment_timestamp: int = 0


# value: GroupMetadata | MemberMetadata | TargetAssignmentMetadata | TasksTuple (target)
# | MemberAssignment (current) | StreamsTopology, or None (tombstone)
StreamsRecord = tuple[StreamsRecordKey, Any]


# -- keys ------------------------------------------------------------------------------

def _key_str(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    write_int16(out, len(data))
    out += data


def encode_key(key: StreamsRecordKey) -> bytes:
    if key.record_type not in RECORD_TYPES:
        raise ValueError(f"streams record key: unknown type {key.record_type}")
    out = bytearray()
    write_int16(out, key.record_type)
    _key_str(out, key.group_id)
    if key.record_type in _MEMBER_KEYS:
        _key_str(out, key.member_id)
    return bytes(out)


def decode_key(data: bytes) -> StreamsRecordKey:
    try:
        kind, off = read_int16(data, 0)
        if kind not in RECORD_TYPES:
            raise ValueError(f"streams record key: unknown type {kind}")
        r = Reader(data, off)
        group = r.key_str()
        member = r.key_str() if kind in _MEMBER_KEYS else ""
        if r.off != len(data):
            raise ValueError("streams record key: trailing bytes")
    except DecodeError as exc:
        raise ValueError(f"streams record key: {exc}") from exc
    return StreamsRecordKey(kind, group, member)


# -- values: writer --------------------------------------------------------------------

def _by_subtopology(tasks: frozenset[TaskId]) -> list[tuple[str, list[int]]]:
    grouped: dict[str, list[int]] = {}
    for s, p in tasks:
        grouped.setdefault(s, []).append(p)
    return [(s, sorted(ps)) for s, ps in sorted(grouped.items())]


def _int32s(values: list[int]) -> bytes:
    """Big-endian int32s, packed at once (a large assignment has 100,000s)."""
    return struct.pack(f">{len(values)}i", *values)


def _task_ids(out: bytearray, tasks: frozenset[TaskId], epochs: dict[TaskId, int] | None = None) -> None:
    rows = _by_subtopology(tasks)
    write_len(out, len(rows))
    for s, parts in rows:
        write_str(out, s)
        write_len(out, len(parts))
        out += _int32s(parts)
        if epochs is None:
            write_unsigned_varint(out, 0)
            continue
        tag = bytearray()  # AssignmentEpochs, tag 0: a compact int32 array
        write_len(tag, len(parts))
        tag += _int32s([epochs.get((s, p), 0) for p in parts])
        write_unsigned_varint(out, 1)
        write_unsigned_varint(out, 0)
        write_unsigned_varint(out, len(tag))
        out += tag


def _topic_info(out: bytearray, t: TopicInfo) -> None:
    write_str(out, t.name)
    write_int32(out, t.partitions)
    write_int16(out, t.replication_factor)
    write_kvs(out, t.configs)
    write_unsigned_varint(out, 0)


def _int16s(out: bytearray, values: tuple[int, ...]) -> None:
    write_len(out, len(values))
    for v in values:
        write_int16(out, v)


def encode_value(kind: int, value: Any) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    write_int16(out, 0)
    if kind == GROUP_METADATA:
        g: GroupMetadata = value
        write_int32(out, g.epoch)
        write_int64(out, g.metadata_hash)
        tags: list[tuple[int, bytes]] = []
        if g.validated_topology_epoch != -1:
            tags.append((0, int32_bytes(g.validated_topology_epoch)))
        if g.last_assignment_configs is not None:
            b = bytearray()
            write_kvs(b, g.last_assignment_configs)
            tags.append((1, bytes(b)))
        if g.stored_description_topology_epoch != -1:
            tags.append((2, int32_bytes(g.stored_description_topology_epoch)))
        if g.failed_description_topology_epoch != -1:
            tags.append((3, int32_bytes(g.failed_description_topology_epoch)))
        write_tags(out, tags)
    elif kind == MEMBER_METADATA:
        m: MemberMetadata = value
        for s in (m.instance_id, m.rack_id, m.client_id, m.client_host):
            write_str(out, s)
        write_int32(out, m.rebalance_timeout_ms)
        write_int32(out, m.topology_epoch)
        write_str(out, m.process_id)
        if m.user_endpoint is None:
            write_int8(out, -1)  # a nullable struct: -1 absent, 1 present
        else:
            write_int8(out, 1)
            write_str(out, m.user_endpoint[0])
            out += m.user_endpoint[1].to_bytes(2, "big")  # uint16
            write_unsigned_varint(out, 0)
        write_kvs(out, m.client_tags)
        write_unsigned_varint(out, 0)
    elif kind == TARGET_ASSIGNMENT_METADATA:
        a: TargetAssignmentMetadata = value
        write_int32(out, a.assignment_epoch)
        b = bytearray()
        write_int64(b, a.assignment_timestamp)
        write_tags(out, [(0, bytes(b))] if a.assignment_timestamp != 0 else [])
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        t: TasksTuple = value
        for tasks in (t.active, t.standby, t.warmup):
            _task_ids(out, tasks)
        write_unsigned_varint(out, 0)
    elif kind == CURRENT_MEMBER_ASSIGNMENT:
        c: MemberAssignment = value
        write_int32(out, c.member_epoch)
        write_int32(out, c.previous_member_epoch)
        write_int8(out, c.state)
        epochs = dict(c.active_epochs)
        _task_ids(out, c.assigned.active, epochs)
        _task_ids(out, c.assigned.standby)
        _task_ids(out, c.assigned.warmup)
        _task_ids(out, c.pending_revocation.active, epochs)
        _task_ids(out, c.pending_revocation.standby)
        _task_ids(out, c.pending_revocation.warmup)
        write_unsigned_varint(out, 0)
    elif kind == TOPOLOGY:
        topo: StreamsTopology = value
        write_int32(out, topo.epoch)
        write_len(out, len(topo.subtopologies))
        for s in topo.subtopologies:
            write_str(out, s.subtopology_id)
            for names in (s.source_topics, s.source_topic_regex):
                write_len(out, len(names))
                for n in names:
                    write_str(out, n)
            write_len(out, len(s.state_changelog_topics))
            for t in s.state_changelog_topics:
                _topic_info(out, t)
            write_len(out, len(s.repartition_sink_topics))
            for n in s.repartition_sink_topics:
                write_str(out, n)
            write_len(out, len(s.repartition_source_topics))
            for t in s.repartition_source_topics:
                _topic_info(out, t)
            write_len(out, len(s.copartition_groups))
            for g in s.copartition_groups:
                _int16s(out, g.source_topics)
                _int16s(out, g.source_topic_regex)
                _int16s(out, g.repartition_source_topics)
                write_unsigned_varint(out, 0)
            write_unsigned_varint(out, 0)
        write_unsigned_varint(out, 0)
    else:
        raise ValueError(f"streams record: unknown type {kind}")
    return bytes(out)


def encode_record(record: StreamsRecord) -> tuple[bytes, bytes | None]:
    key, value = record
    return encode_key(key), encode_value(key.record_type, value)


# -- values: reader --------------------------------------------------------------------

def _read_task_ids(r: Reader, epochs: dict[TaskId, int] | None = None) -> frozenset[TaskId]:
    out: set[TaskId] = set()
    for _ in range(r.count() or 0):
        s = r.str()
        parts = r.array(r.i32) or []
        tags = r.tags()
        if epochs is not None and 0 in tags:
            tr = Reader(tags[0], 0)
            values = tr.array(tr.i32, nullable=True)
            if values is not None:
                if len(values) != len(parts):
                    raise ValueError("AssignmentEpochs: not one per partition")
                epochs.update(((s, p), e) for p, e in zip(parts, values, strict=True))
        out.update((s, p) for p in parts)
    return frozenset(out)


def _read_topic_info(r: Reader) -> TopicInfo:
    name, parts, rf = r.str(), r.i32(), r.i16()
    configs = tuple(r.array(r.kv) or ())
    r.tags()
    return TopicInfo(name, parts, rf, configs)


def _read_subtopology(r: Reader) -> Subtopology:
    sid = r.str()
    sources = tuple(r.array(r.str) or ())
    regex = tuple(r.array(r.str) or ())
    changelogs = tuple(r.array(lambda: _read_topic_info(r)) or ())
    sinks = tuple(r.array(r.str) or ())
    repart = tuple(r.array(lambda: _read_topic_info(r)) or ())

    def group() -> CopartitionGroup:
        g = CopartitionGroup(tuple(r.array(r.i16) or ()), tuple(r.array(r.i16) or ()),
                             tuple(r.array(r.i16) or ()))
        r.tags()
        return g

    groups = tuple(r.array(group) or ())
    r.tags()
    return Subtopology(sid, sources, regex, changelogs, sinks, repart, groups)


def decode_value(kind: int, data: bytes | None) -> Any:
    """The inverse of :func:`encode_value` (None for a tombstone)."""
    if data is None:
        return None
    try:
        r = Reader(data, 0)
        if r.i16() != 0:
            raise ValueError(f"streams record {kind}: unsupported value version")
        value = _decode(kind, r)
    except (DecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"streams record {kind}: {exc}") from exc
    if r.off != len(data):
        raise ValueError(f"streams record {kind}: trailing bytes")
    return value


def _decode(kind: int, r: Reader) -> Any:
    if kind == GROUP_METADATA:
        epoch, mhash = r.i32(), r.i64()
        tags = r.tags()

        def tag_int(t: int) -> int:
            return Reader(tags[t], 0).i32() if t in tags else -1

        configs = None
        if 1 in tags:
            tr = Reader(tags[1], 0)
            raw = tr.array(tr.kv, nullable=True)
            configs = None if raw is None else tuple(raw)
        return GroupMetadata(epoch, mhash, tag_int(0), configs, tag_int(2), tag_int(3))
    if kind == MEMBER_METADATA:
        instance, rack = r.str_or_none(), r.str_or_none()
        client_id, host = r.str(), r.str()
        timeout, topo_epoch, process = r.i32(), r.i32(), r.str()
        endpoint = None
        if r.i8() >= 0:
            endpoint = (r.str(), int.from_bytes(r.raw(2), "big"))
            r.tags()
        tags = tuple(r.array(r.kv) or ())
        r.tags()
        return MemberMetadata(instance, rack, client_id, host, timeout, topo_epoch, process,
                              endpoint, tags)
    if kind == TARGET_ASSIGNMENT_METADATA:
        epoch = r.i32()
        tags = r.tags()
        return TargetAssignmentMetadata(epoch, Reader(tags[0], 0).i64() if 0 in tags else 0)
    if kind == TARGET_ASSIGNMENT_MEMBER:
        t = TasksTuple(_read_task_ids(r), _read_task_ids(r), _read_task_ids(r))
        r.tags()
        return t
    if kind == CURRENT_MEMBER_ASSIGNMENT:
        epoch, prev, state = r.i32(), r.i32(), r.i8()
        epochs: dict[TaskId, int] = {}
        assigned = TasksTuple(_read_task_ids(r, epochs), _read_task_ids(r), _read_task_ids(r))
        pending = TasksTuple(_read_task_ids(r, epochs), _read_task_ids(r), _read_task_ids(r))
        r.tags()
        active = assigned.active | pending.active
        return MemberAssignment(epoch, prev, state, assigned, pending,
                                tuple(sorted((t, epochs.get(t, 0)) for t in active)))
    if kind == TOPOLOGY:
        epoch = r.i32()
        subs = tuple(r.array(lambda: _read_subtopology(r)) or ())
        r.tags()
        return StreamsTopology(epoch, subs)
    raise ValueError(f"streams record: unknown type {kind}")


def decode_record(key: bytes, value: bytes | None) -> StreamsRecord:
    k = decode_key(key)
    return k, decode_value(k.record_type, value)
