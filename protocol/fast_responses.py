"""Hand-written encoders for the small responses of every transaction.

kio's writers are pure Python and walk the entity reflectively: about half of the
broker's CPU per request went into building kio response objects and encoding
them for Produce, AddPartitionsToTxn, EndTxn, AddOffsetsToTxn and TxnOffsetCommit.
These functions write the same bytes straight from plain values (response body
only, no header). DESIGN.md allows this for hot paths, provided the bytes are
differentially tested against kio: tests/unit/protocol/test_fast_responses.py compares
them for every version the handlers serve.

Flexible versions (KIP-482) use compact strings/arrays (unsigned varint length + 1)
and end each struct with an empty tagged-field section (one 0 byte); the
responses here never carry tagged fields.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32I16 = struct.Struct(">ih")
_THROTTLE_ERROR = struct.Struct(">ih")
_PRODUCE_PART = struct.Struct(">ihqqq")  # index, error, base, append time, log start
_ZERO_UUID = bytes(16)  # the zero topic id (kio: None)
_PRODUCE_PART_V2 = struct.Struct(">ihqq")  # v2-v4: no log start offset
_ZERO_THROTTLE = b"\x00\x00\x00\x00"

# Versions served by the encoders, per API key (the handlers' ranges). Later versions
# whose answer has the same layout (only tagged fields, left empty, or new error codes)
# are served too: Produce v10-12, EndTxn v4, AddOffsetsToTxn v4, TxnOffsetCommit v4-5
# are what Java 4 clients send (transactions v2).
PRODUCE_VERSIONS = range(3, 14)
ADD_PARTITIONS_VERSIONS = range(0, 4)
END_TXN_VERSIONS = range(0, 5)
ADD_OFFSETS_VERSIONS = range(0, 5)
TXN_OFFSET_COMMIT_VERSIONS = range(0, 6)


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    b = s.encode()
    return (_uvarint(len(b) + 1) if flexible else _I16.pack(len(b))) + b


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(s, flexible)


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def error_only(version: int, flexible_from: int, error: int) -> bytes:
    """EndTxn / AddOffsetsToTxn: throttle_time_ms (0), error_code."""
    body = _THROTTLE_ERROR.pack(0, error)
    return body + b"\x00" if version >= flexible_from else body


def end_txn(version: int, error: int) -> bytes:
    return error_only(version, 3, error)


def add_offsets_to_txn(version: int, error: int) -> bytes:
    return error_only(version, 3, error)


def topic_partition_errors(version: int, flexible_from: int,
                           topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> bytes:
    """AddPartitionsToTxn v0-3 / TxnOffsetCommit: throttle_time_ms (0), then per topic
    its name and per partition (index, error_code)."""
    flexible = version >= flexible_from
    tag = b"\x00" if flexible else b""
    topics = list(topics)
    out = [_ZERO_THROTTLE, _array_len(len(topics), flexible)]
    for name, partitions in topics:
        partitions = list(partitions)
        out.append(_string(name, flexible))
        out.append(_array_len(len(partitions), flexible))
        for index, error in partitions:
            out.append(_I32I16.pack(index, error))
            out.append(tag)
        out.append(tag)
    out.append(tag)
    return b"".join(out)


def add_partitions_to_txn(version: int,
                          topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> bytes:
    return topic_partition_errors(version, 3, topics)


def txn_offset_commit(version: int,
                      topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> bytes:
    return topic_partition_errors(version, 3, topics)


ProducePartition = tuple[int, int, int, int, int, "str | None"]


def produce(version: int,
            topics: Iterable[tuple[str | uuid.UUID | None, Iterable[ProducePartition]]]) -> bytes:
    """Produce v3-13: per topic (its name, from v13 its id), per partition (index,
    error_code, base_offset, log_append_time_ms, log_start_offset, error_message), then
    throttle_time_ms (0). record_errors are always empty here (the broker rejects
    whole batches)."""
    flexible = version >= 9
    tag = b"\x00" if flexible else b""
    topics = list(topics)
    out = [_array_len(len(topics), flexible)]
    for topic, partitions in topics:
        partitions = list(partitions)
        if version >= 13:
            # The topic id; kio reads the zero UUID as None (an unknown id: echoed back).
            out.append(topic.bytes if topic is not None else _ZERO_UUID)
        else:
            out.append(_string(topic, flexible))
        out.append(_array_len(len(partitions), flexible))
        for index, error, base, append_time, start, message in partitions:
            if version >= 5:
                out.append(_PRODUCE_PART.pack(index, error, base, append_time, start))
            else:
                out.append(_PRODUCE_PART_V2.pack(index, error, base, append_time))
            if version >= 8:
                out.append(_array_len(0, flexible))  # record_errors
                out.append(_nullable_string(message, flexible))
            out.append(tag)
        out.append(tag)
    out.append(_ZERO_THROTTLE)
    out.append(tag)
    return b"".join(out)
