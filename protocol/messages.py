"""Request/response framing on top of kio's generated message schemas.

Sans-IO: bytes in, typed messages out and back. The request header is parsed
by hand (it must be read before we know whether kio has a schema for the
version); bodies are decoded and encoded by kio.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import struct
from functools import cache
from typing import Any, NamedTuple

from kio.index import KioIndexError, load_payload_module
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from .bounds import check_body
from .primitives import (
    DecodeError,
    read_int16,
    read_int32,
    read_nullable_string,
    skip_tagged_fields,
)
from .schemas import OWN_SCHEMAS

API_VERSIONS_KEY = 18


class RequestHeader(NamedTuple):
    # A named tuple: one per request, and a frozen dataclass's __init__ costs a
    # setattr call per field.
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def api_name(api_key: int) -> str:
    name = api_key_map.get(api_key)  # (the fallback is not formatted on every request)
    return name if name is not None else f"unknown({api_key})"


@cache
def request_module(api_key: int, version: int) -> Any:
    """kio's module for a request version, or None when kio has no schema for it.

    Only "no such module" is an answer worth caching: any other failure (EMFILE while
    the import opens its file, say) is raised, so that a later call tries again
    instead of remembering "no schema" for the life of the process."""
    if (api_key, version) in OWN_SCHEMAS:
        return _own_module(api_key, version, "request")
    try:
        return load_payload_module(api_key, version, EntityType.request)
    except KioIndexError:
        return None


def _own_module(api_key: int, version: int, entity: str) -> Any:
    return importlib.import_module(f".schemas.{OWN_SCHEMAS[api_key, version]}_{entity}",
                                   __package__)


def preload_schemas(versions: Any) -> None:
    """Import kio's request and response schemas for ``(api_key, low, high)`` ranges
    now, at start, so no request ever waits for (or fails at) an import."""
    for api_key, low, high in versions:
        for version in range(low, high + 1):
            if request_class(api_key, version) is not None:
                response_class(api_key, version)
                is_flexible_request(api_key, version)


@cache
def response_module(api_key: int, version: int) -> Any:
    if (api_key, version) in OWN_SCHEMAS:
        return _own_module(api_key, version, "response")
    return load_payload_module(api_key, version, EntityType.response)


def _payload_class(module: Any, entity_type: EntityType) -> type:
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and getattr(value, "__type__", None) is entity_type
            and value.__module__ == module.__name__
        ):
            return value
    raise LookupError(f"no {entity_type.name} class in {module.__name__}")


@cache
def request_class(api_key: int, version: int) -> type | None:
    module = request_module(api_key, version)
    return None if module is None else _payload_class(module, EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type:
    return _payload_class(response_module(api_key, version), EntityType.response)


@cache
def is_flexible_request(api_key: int, version: int) -> bool:
    cls = request_class(api_key, version)
    if cls is not None:
        return bool(cls.__flexible__)
    # Unknown (newer) versions: every API became flexible at or below its newest version.
    if api_key == API_VERSIONS_KEY:
        return version >= 3
    return False


_HEADER_START = struct.Struct(">hhih")  # api key, version, correlation id, client id length


def parse_request_header(buf: bytes | memoryview) -> RequestHeader:
    """Parse request header v1 or v2 (v2 adds tagged fields) from a frame body."""
    # The common case in one unpack; anything unusual takes the checked path below.
    if len(buf) >= 10:
        api_key, api_version, correlation_id, n = _HEADER_START.unpack_from(buf, 0)
        end = 10 + n
        if 0 <= n and end <= len(buf):
            try:
                client_id = bytes(buf[10:end]).decode("utf-8")
            except UnicodeDecodeError:
                return _parse_request_header(buf)
            if is_flexible_request(api_key, api_version):
                if end < len(buf) and buf[end] == 0:  # no tagged fields
                    end += 1
                else:
                    end = skip_tagged_fields(buf, end)
            return RequestHeader(api_key, api_version, correlation_id, client_id, end)
    return _parse_request_header(buf)


def _parse_request_header(buf: bytes | memoryview) -> RequestHeader:
    api_key, off = read_int16(buf, 0)
    api_version, off = read_int16(buf, off)
    correlation_id, off = read_int32(buf, off)
    client_id, off = read_nullable_string(buf, off)
    if is_flexible_request(api_key, api_version):
        off = skip_tagged_fields(buf, off)
    return RequestHeader(api_key, api_version, correlation_id, client_id, off)


_KEY_VERSION_CORRELATION = struct.Struct(">hhi")


def parse_correlation_id(buf: bytes | memoryview) -> tuple[int, int, int]:
    """The first three header fields, readable even when the rest is garbage."""
    if len(buf) >= 8:
        return _KEY_VERSION_CORRELATION.unpack_from(buf, 0)
    api_key, off = read_int16(buf, 0)
    api_version, off = read_int16(buf, off)
    correlation_id, _ = read_int32(buf, off)
    return api_key, api_version, correlation_id


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def decode_request(header: RequestHeader, buf: bytes | memoryview) -> Any:
    """Decode the body with kio; raises DecodeError for malformed bytes."""
    cls = request_class(header.api_key, header.api_version)
    if cls is None:
        raise DecodeError(f"no schema for {api_name(header.api_key)} v{header.api_version}")
    # Every declared length and count against the bytes sent, before kio's native
    # reader trusts them (protocol/bounds.py says why).
    check_body(cls, buf, header.body_offset)
    try:
        message, size = _reader(cls)(buf, header.body_offset)
    except Exception as e:  # kio's native reader raises assorted errors for garbage
        raise DecodeError(f"malformed {api_name(header.api_key)} v{header.api_version}: {e}") from None
    return message


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   message: Any) -> bytes:
    """Size-prefixed request frame (used by tests and benchmarks acting as clients)."""
    out = bytearray(struct.pack(">hhi", api_key, version, correlation_id))
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        cid = client_id.encode()
        out += struct.pack(">h", len(cid)) + cid
    if is_flexible_request(api_key, version):
        out.append(0)
    buf = io.BytesIO()
    _writer(type(message))(buf, message)
    out += buf.getvalue()
    return struct.pack(">i", len(out)) + bytes(out)


@cache
def response_header_is_flexible(api_key: int, version: int) -> bool:
    # ApiVersions responses always use header v0 so old clients can read them (KIP-511).
    if api_key == API_VERSIONS_KEY:
        return False
    return bool(response_class(api_key, version).__flexible__)


_I32 = struct.Struct(">i")
_RESPONSE_HEADER = struct.Struct(">ii")


def encode_response(api_key: int, version: int, correlation_id: int,
                    message: Any) -> bytes | ResponseParts:
    """Size-prefixed response frame: header v0/v1 + kio-encoded body. A ``bytes``
    message is a body encoded already (protocol/fast_responses.py). A frame holding a
    large bytes field comes back as ResponseParts (the field not copied)."""
    if type(message) is bytes:
        if response_header_is_flexible(api_key, version):
            return _RESPONSE_HEADER.pack(len(message) + 5, correlation_id) + b"\x00" + message
        return _RESPONSE_HEADER.pack(len(message) + 4, correlation_id) + message
    out = _FrameWriter()
    out.write(_RESPONSE_HEADER.pack(0, correlation_id))
    if response_header_is_flexible(api_key, version):
        out.write(b"\x00")
    _writer(type(message))(out, message)
    return out.frame()


# A bytes field at least this long (a Fetch response's records) is kept as its own part
# of the frame instead of being copied into the frame's buffer.
LARGE_PART_BYTES = 64 << 10


class ResponseParts:
    """A response frame as a sequence of buffers (``len()`` is its size in bytes), for
    ``transport.writelines``: the records of a Fetch response go to the socket straight
    from the log read, not through one more copy."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list, size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


class _FrameWriter:
    """What kio's writers write into (they only call ``write``): small pieces gather in
    a BytesIO, large ones are kept by reference. The size prefix is filled in last."""

    __slots__ = ("_buf", "_parts", "_size")

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._parts: list = []
        self._size = 0

    def write(self, data) -> int:
        n = len(data)
        self._size += n
        if n < LARGE_PART_BYTES:
            return self._buf.write(data)
        if self._buf.tell():
            self._parts.append(self._buf.getvalue())
            self._buf = io.BytesIO()
        self._parts.append(data)
        return n

    def frame(self) -> bytes | ResponseParts:
        size = _I32.pack(self._size - 4)
        if not self._parts:
            # getvalue() hands over BytesIO's own buffer (no copy of the frame).
            self._buf.seek(0)
            self._buf.write(size)
            return self._buf.getvalue()
        if self._buf.tell():
            self._parts.append(self._buf.getvalue())
        first = self._parts[0]
        self._parts[0] = size + first[4:]  # the header part: a few bytes
        return ResponseParts(self._parts, self._size)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """Decode a response frame body (without size prefix): (correlation id, message)."""
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    off = 4
    if response_header_is_flexible(api_key, version):
        off = skip_tagged_fields(frame, off)
    message, _ = _reader(response_class(api_key, version))(frame, off)
    return correlation_id, message


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """Instantiate a kio entity of any version, dropping fields this version lacks.

    Handlers fill in the union of fields across the versions they serve.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls_or_obj: Any, name: str) -> bool:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    return name in _field_names(cls)
