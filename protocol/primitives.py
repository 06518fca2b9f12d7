"""Kafka wire primitives: fixed-width ints, varints (zigzag), strings and bytes.

Sans-IO: readers take a buffer and an offset and return ``(value, new_offset)``;
writers append to a ``bytearray``. Used by the record format code and the
hand-written request header parser; message bodies go through kio.
"""

from __future__ import annotations

import struct

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


class DecodeError(ValueError):
    """The bytes do not form a valid value (truncated or out of range)."""


def _need(buf: bytes | bytearray | memoryview, offset: int, n: int) -> None:
    if offset + n > len(buf) or offset < 0:
        raise DecodeError(f"need {n} bytes at offset {offset}, have {len(buf) - offset}")


def read_int8(buf, offset: int) -> tuple[int, int]:
    _need(buf, offset, 1)
    return _I8.unpack_from(buf, offset)[0], offset + 1


def read_int16(buf, offset: int) -> tuple[int, int]:
    _need(buf, offset, 2)
    return _I16.unpack_from(buf, offset)[0], offset + 2


def read_int32(buf, offset: int) -> tuple[int, int]:
    _need(buf, offset, 4)
    return _I32.unpack_from(buf, offset)[0], offset + 4


def read_int64(buf, offset: int) -> tuple[int, int]:
    _need(buf, offset, 8)
    return _I64.unpack_from(buf, offset)[0], offset + 8


def read_uint32(buf, offset: int) -> tuple[int, int]:
    _need(buf, offset, 4)
    return _U32.unpack_from(buf, offset)[0], offset + 4


def write_int8(out: bytearray, value: int) -> None:
    out += _I8.pack(value)


def write_int16(out: bytearray, value: int) -> None:
    out += _I16.pack(value)


def write_int32(out: bytearray, value: int) -> None:
    out += _I32.pack(value)


def write_int64(out: bytearray, value: int) -> None:
    out += _I64.pack(value)


def write_uint32(out: bytearray, value: int) -> None:
    out += _U32.pack(value)


# --- varints -------------------------------------------------------------

def read_unsigned_varint(buf, offset: int, max_bytes: int = 5) -> tuple[int, int]:
    """Unsigned LEB128 as Kafka uses it (at most 5 bytes for 32-bit, 10 for 64-bit)."""
    result = 0
    shift = 0
    for i in range(max_bytes):
        if offset + i >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[offset + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, offset + i + 1
        shift += 7
    raise DecodeError("varint too long")


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("unsigned varint must be >= 0")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(buf, offset: int) -> tuple[int, int]:
    """Signed zigzag varint (32-bit)."""
    raw, offset = read_unsigned_varint(buf, offset, 5)
    if raw > 0xFFFFFFFF:
        raise DecodeError("varint out of 32-bit range")
    return (raw >> 1) ^ -(raw & 1), offset


def read_varlong(buf, offset: int) -> tuple[int, int]:
    """Signed zigzag varint (64-bit)."""
    raw, offset = read_unsigned_varint(buf, offset, 10)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise DecodeError("varlong out of 64-bit range")
    return (raw >> 1) ^ -(raw & 1), offset


def write_varint(out: bytearray, value: int) -> None:
    if not -(2**31) <= value < 2**31:
        raise ValueError("varint out of 32-bit range")
    write_unsigned_varint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(2**63) <= value < 2**63:
        raise ValueError("varlong out of 64-bit range")
    write_unsigned_varint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def varint_size(value: int) -> int:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while raw >= 0x80:
        raw >>= 7
        n += 1
    return n


# --- strings and bytes ---------------------------------------------------

def read_nullable_string(buf, offset: int) -> tuple[str | None, int]:
    """Classic (non-compact) nullable string: int16 length, -1 for null."""
    n, offset = read_int16(buf, offset)
    if n == -1:
        return None, offset
    if n < 0:
        raise DecodeError(f"negative string length {n}")
    _need(buf, offset, n)
    try:
        return bytes(buf[offset : offset + n]).decode("utf-8"), offset + n
    except UnicodeDecodeError as e:
        raise DecodeError(f"string is not UTF-8: {e}") from None


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        write_int16(out, -1)
        return
    data = value.encode("utf-8")
    write_int16(out, len(data))
    out += data


def read_compact_nullable_string(buf, offset: int) -> tuple[str | None, int]:
    n, offset = read_unsigned_varint(buf, offset)
    if n == 0:
        return None, offset
    n -= 1
    _need(buf, offset, n)
    try:
        return bytes(buf[offset : offset + n]).decode("utf-8"), offset + n
    except UnicodeDecodeError as e:
        raise DecodeError(f"string is not UTF-8: {e}") from None


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        write_unsigned_varint(out, 0)
        return
    data = value.encode("utf-8")
    write_unsigned_varint(out, len(data) + 1)
    out += data


def skip_tagged_fields(buf, offset: int) -> int:
    """Skip a tagged-field section (KIP-482); unknown tags are ignored as Kafka does."""
    count, offset = read_unsigned_varint(buf, offset)
    for _ in range(count):
        _tag, offset = read_unsigned_varint(buf, offset)
        size, offset = read_unsigned_varint(buf, offset)
        _need(buf, offset, size)
        offset += size
    return offset
