"""Shared pieces of the coordinators' internal-topic record formats: msgpack arrays
that start with a format version, and strict field checks (a malformed record
raises ValueError, so a loader can skip it with a log line)."""

from __future__ import annotations

import threading
from typing import Any

import msgpack

# A Packer per thread: packb builds one per call (half its cost, on each record a
# coordinator writes); one Packer's buffer must not be shared between threads.
_packers = threading.local()


def pack(obj: Any) -> bytes:
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(obj)


def unpack_array(data: Any, what: str) -> list[Any]:
    """A non-empty msgpack array whose first element is a format version >= 0."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"{what}: expected bytes, got {type(data).__name__}")
    try:
        obj = msgpack.unpackb(bytes(data), raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise ValueError(f"{what}: not msgpack: {exc}") from exc
    if not isinstance(obj, list) or not obj:
        raise ValueError(f"{what}: expected a non-empty array")
    version = obj[0]
    if type(version) is not int or version < 0:
        raise ValueError(f"{what}: bad format version {version!r}")
    return obj


def as_str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{what}: expected str, got {type(v).__name__}")
    return v


def as_int(v: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    # type() rather than isinstance(): msgpack booleans must not pass as ints.
    if type(v) is not int:
        raise ValueError(f"{what}: expected int, got {type(v).__name__}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{what}: {v} out of range [{lo}, {hi}]")
    return v


def as_bytes(v: Any, what: str) -> bytes:
    if not isinstance(v, bytes):
        raise ValueError(f"{what}: expected bytes, got {type(v).__name__}")
    return v
