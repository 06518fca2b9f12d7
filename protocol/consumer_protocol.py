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
