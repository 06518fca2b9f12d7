"""Record batch compression codecs (attributes bits 0-2), via cramjam.

The produce/fetch path never touches these: batches are stored as they came.
They serve record decoding (timestamp look-ups, compaction, tests).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Java's and librdkafka's snappy output uses xerial's framing.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: bytes) -> bytes:
    if data.startswith(_XERIAL_MAGIC):
        out = bytearray()
        pos = 16  # magic(8) + version(4) + compatible version(4)
        while pos < len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
            pos += n
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(data))


def _snappy_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    block = 32 * 1024
    for i in range(0, len(data), block) or [0]:
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return _snappy_compress(data)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


def decompress(codec: Compression, data: bytes) -> bytes:
    try:
        if codec == Compression.NONE:
            return data
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, struct.error, ValueError) as e:
        raise CorruptRecordError(f"cannot decompress {codec.name} batch: {e}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")
