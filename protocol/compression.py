"""Record batch compression codecs (attributes bits 0-2), via cramjam.

Batches are stored as they came: nothing is ever recompressed. Produce
validation decompresses into a bounded buffer (``decompress_bounded``) to check
the records; record decoding (timestamp look-ups, compaction, tests) uses
``decompress``.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError, RecordTooLargeError


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


# cramjam's ``decompress_into`` stops with this error when the output buffer is
# full: the only signal that a stream decompresses past the space given.
_BUFFER_FULL = "failed to write whole buffer"
_FIRST_GUESS_RATIO = 8
_MIN_GUESS = 64 * 1024


def _xerial_chunks(data: bytes) -> list[bytes] | None:
    if not data.startswith(_XERIAL_MAGIC):
        return None
    chunks = []
    pos = 16
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError("truncated xerial snappy chunk length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError(f"xerial snappy chunk of {n} bytes exceeds the batch")
        chunks.append(data[pos : pos + n])
        pos += n
    return chunks


def decompress_bounded(codec: Compression, data: bytes, limit: int) -> bytearray:
    """Decompress ``data`` without ever holding more than ``limit`` output bytes.

    A stream that decompresses past ``limit`` raises RecordTooLargeError
    (MESSAGE_TOO_LARGE) after at most ``limit`` bytes were produced: a
    decompression bomb costs the broker a bounded buffer, never gigabytes.
    Undecodable data raises CorruptRecordError (CORRUPT_MESSAGE).
    """
    try:
        if codec == Compression.SNAPPY:
            return _snappy_bounded(data, limit)
        module = {Compression.GZIP: cramjam.gzip, Compression.LZ4: cramjam.lz4,
                  Compression.ZSTD: cramjam.zstd}.get(codec)
        if module is None:
            raise CorruptRecordError(f"unknown compression codec {codec}")
        # Start from a guess and grow geometrically: typical batches fit the first
        # buffer, and a bomb is cut off at the limit.
        size = min(limit, max(_MIN_GUESS, len(data) * _FIRST_GUESS_RATIO))
        while True:
            out = bytearray(size)
            try:
                n = module.decompress_into(data, out)
            except cramjam.DecompressionError as e:
                if _BUFFER_FULL not in str(e):
                    raise
                if size >= limit:
                    raise RecordTooLargeError(
                        f"{codec.name} batch decompresses to more than {limit} bytes"
                    ) from None
                size = min(limit, size * 4)
                continue
            del out[n:]
            return out
    except (cramjam.DecompressionError, struct.error, ValueError) as e:
        raise CorruptRecordError(f"cannot decompress {codec.name} batch: {e}") from None


def _snappy_bounded(data: bytes, limit: int) -> bytearray:
    # Raw snappy declares its decompressed length up front: check the sum before
    # decompressing anything.
    chunks = _xerial_chunks(data)
    if chunks is None:
        chunks = [data]
    total = sum(cramjam.snappy.decompress_raw_len(c) for c in chunks)
    if total > limit:
        raise RecordTooLargeError(f"SNAPPY batch decompresses to {total} bytes, more than {limit}")
    out = bytearray(total)
    pos = 0
    for chunk in chunks:
        pos += cramjam.snappy.decompress_raw_into(chunk, memoryview(out)[pos:])
    del out[pos:]
    return out
