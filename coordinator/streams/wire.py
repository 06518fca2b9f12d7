"""Flexible-version (KIP-482) field codecs for the coordinator records: compact
strings and arrays, tagged fields, and a bounds-checked reader (an array count is
never trusted past the bytes left)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txbroker.protocol.primitives import (
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
    write_int32,
    write_unsigned_varint,
)

__all__ = ["write_str", "write_len", "write_kvs", "write_tags", "int32_bytes", "Reader"]


def write_str(out: bytearray, s: str | None) -> None:
    if s is None:
        write_unsigned_varint(out, 0)
        return
    data = s.encode("utf-8")
    write_unsigned_varint(out, len(data) + 1)
    out += data


def write_len(out: bytearray, n: int | None) -> None:
    write_unsigned_varint(out, 0 if n is None else n + 1)


def write_kvs(out: bytearray, kvs: tuple[tuple[str, str], ...] | None) -> None:
    write_len(out, None if kvs is None else len(kvs))
    for k, v in kvs or ():
        write_str(out, k)
        write_str(out, v)
        write_unsigned_varint(out, 0)


def write_tags(out: bytearray, tags: list[tuple[int, bytes]]) -> None:
    write_unsigned_varint(out, len(tags))
    for tag, data in tags:
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


def int32_bytes(v: int) -> bytes:
    b = bytearray()
    write_int32(b, v)
    return bytes(b)


class Reader:
    def __init__(self, data: bytes, off: int) -> None:
        self.data, self.off = data, off

    def _take(self, fn: Callable) -> Any:
        v, self.off = fn(self.data, self.off)
        return v

    def i8(self) -> int:
        return self._take(read_int8)

    def i16(self) -> int:
        return self._take(read_int16)

    def i32(self) -> int:
        return self._take(read_int32)

    def i64(self) -> int:
        return self._take(read_int64)

    def uvarint(self) -> int:
        return self._take(read_unsigned_varint)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.off + n > len(self.data):
            raise ValueError("field past the end of the record")
        b = bytes(self.data[self.off:self.off + n])
        self.off += n
        return b

    def key_str(self) -> str:
        return self.raw(self.i16()).decode("utf-8")

    def str_or_none(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.raw(n - 1).decode("utf-8")

    def str(self) -> str:
        s = self.str_or_none()
        if s is None:
            raise ValueError("null string in a non-nullable field")
        return s

    def count(self, nullable: bool = False) -> int | None:
        n = self.uvarint()
        if n == 0:
            if nullable:
                return None
            raise ValueError("null array in a non-nullable field")
        if n - 1 > len(self.data) - self.off:  # every element takes at least a byte
            raise ValueError("array count past the end of the record")
        return n - 1

    def array(self, fn: Callable[[], Any], nullable: bool = False) -> list | None:
        n = self.count(nullable)
        return None if n is None else [fn() for _ in range(n)]

    def tags(self) -> dict[int, bytes]:
        return {self.uvarint(): self.raw(self.uvarint()) for _ in range(self.uvarint())}

    def kv(self) -> tuple[str, str]:
        k, v = self.str(), self.str()
        self.tags()
        return k, v
