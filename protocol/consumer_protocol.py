"""Kafka's consumer protocol (the bytes a classic consumer group's members exchange in
JoinGroup/SyncGroup, opaque to the broker): what the admin tools and the console read
of a member's assignment."""

from __future__ import annotations

import struct


def decode_consumer_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions in a consumer group member's assignment (Kafka's consumer
    protocol: int16 version, [topic string, [int32 partition]], user data); [] when
    the bytes are not that (another protocol type, or none yet)."""
    try:
        off = 2
        (count,) = struct.unpack_from(">i", data, off)
        off += 4
        out = []
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, off)
            topic = bytes(data[off + 2:off + 2 + size]).decode()
            off += 2 + size
            (n,) = struct.unpack_from(">i", data, off)
            off += 4
            parts = struct.unpack_from(f">{max(n, 0)}i", data, off)
            off += 4 * max(n, 0)
            out += [(topic, p) for p in parts]
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def decode_consumer_subscription(data: bytes) -> tuple[int, list[str], list[tuple[str, int]]] | None:
    """A ConsumerProtocolSubscription (the metadata a classic consumer sends in JoinGroup):
    (version, topics, owned partitions). The topics are read with the v0 prefix, as
    Kafka does; owned partitions (v1+, after the user data) are [] when absent or
    unreadable. None when the topics cannot be read."""
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        if version < 0 or count < 0:
            return None
        off = 6
        topics = []
        for _ in range(count):
            topic, off = _string(data, off)
            topics.append(topic)
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    return version, topics, _owned_partitions(data, off) if version >= 1 else []


def _owned_partitions(data: bytes, off: int) -> list[tuple[str, int]]:
    owned: list[tuple[str, int]] = []
    try:
        (size,) = struct.unpack_from(">i", data, off)  # user data (nullable bytes)
        off += 4 + max(size, 0)
        (n,) = struct.unpack_from(">i", data, off)
        off += 4
        for _ in range(max(n, 0)):
            topic, off = _string(data, off)
            (k,) = struct.unpack_from(">i", data, off)
            off += 4
            owned += [(topic, p) for p in struct.unpack_from(f">{max(k, 0)}i", data, off)]
            off += 4 * max(k, 0)
    except (struct.error, UnicodeDecodeError, ValueError):
        return []
    return owned


def _string(data: bytes, off: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, off)
    if n < 0 or off + 2 + n > len(data):
        raise ValueError("bad string")
    return bytes(data[off + 2:off + 2 + n]).decode(), off + 2 + n


def encode_consumer_assignment(version: int, partitions: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment (what SyncGroup gives a classic consumer): ``version``
    (0-3 share this layout), the partitions by topic, no user data."""
    out = [struct.pack(">hi", version, len(partitions))]
    for topic in sorted(partitions):
        name = topic.encode()
        parts = sorted(partitions[topic])
        out.append(struct.pack(f">h{len(name)}si{len(parts)}i", len(name), name, len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
