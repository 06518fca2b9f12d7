"""The reference for protocol/bounds.py: its walk as it was before issue 25, one closure
per field, read by the same rules the generated walk must keep.

tests/unit/test_bounds.py runs both on kio-encoded bodies, their prefixes and
mutations, and on the fuzz corpus, and requires the same result from each: the same
end offset, or a DecodeError with the same message. Keep this file as it is unless a
rule of the walk itself changes (then change both, and say so in the commit).
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache

from txbroker.protocol.bounds import MAX_ARRAY_LENGTH, MAX_TAGGED_FIELDS
from txbroker.protocol.primitives import DecodeError

# buf, offset, end -> new offset
Step = Callable[[memoryview, int, int], int]

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "float64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _uvarint(buf: memoryview, off: int, end: int, what: str) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes and 32 bits, as Kafka reads them."""
    value = 0
    for i in range(5):
        if off >= end:
            raise DecodeError(f"{what}: varint runs past the end of the request")
        b = buf[off]
        off += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if i == 4 and b > 0x0F:
                break
            return value, off
    raise DecodeError(f"{what}: varint is longer than 32 bits")


def _fixed(size: int, what: str) -> Step:
    def step(buf: memoryview, off: int, end: int) -> int:
        off += size
        if off > end:
            raise DecodeError(f"{what}: the request ends before it")
        return off
    return step


def _sized(what: str, flexible: bool, nullable: bool, wide: bool) -> Step:
    """A string (int16 length) or bytes/records (int32 length); compact in flexible
    versions (uvarint length + 1, 0 for null)."""
    def step(buf: memoryview, off: int, end: int) -> int:
        if flexible:
            n, off = _uvarint(buf, off, end, what)
            n -= 1
        elif wide:
            if off + 4 > end:
                raise DecodeError(f"{what}: the request ends before its length")
            n = _I32(buf, off)[0]
            off += 4
        else:
            if off + 2 > end:
                raise DecodeError(f"{what}: the request ends before its length")
            n = _I16(buf, off)[0]
            off += 2
        if n < 0:
            if n == -1 and nullable:
                return off
            raise DecodeError(f"{what}: length {n} (null or negative where the schema "
                              "allows none)")
        if n > end - off:
            raise DecodeError(f"{what}: declares {n} bytes but {end - off} are left")
        return off + n
    return step


def _array(what: str, flexible: bool, nullable: bool, element: Step) -> Step:
    def step(buf: memoryview, off: int, end: int) -> int:
        if flexible:
            n, off = _uvarint(buf, off, end, what)
            n -= 1
        else:
            if off + 4 > end:
                raise DecodeError(f"{what}: the request ends before its count")
            n = _I32(buf, off)[0]
            off += 4
        if n < 0:
            if n == -1 and nullable:
                return off
            raise DecodeError(f"{what}: count {n} (null or negative where the schema "
                              "allows none)")
        if n > end - off:
            raise DecodeError(f"{what}: declares {n} elements but only {end - off} bytes "
                              "are left")
        if n > MAX_ARRAY_LENGTH:
            raise DecodeError(f"{what}: a collection of {n} elements exceeds the maximum")
        for _ in range(n):
            off = element(buf, off, end)
        return off
    return step


def _optional_struct(what: str, inner: Step) -> Step:
    """A nullable struct field: an int8 marker, -1 for null, then the struct."""
    def step(buf: memoryview, off: int, end: int) -> int:
        if off + 1 > end:
            raise DecodeError(f"{what}: the request ends before it")
        marker = buf[off]
        off += 1
        if marker & 0x80:  # negative: null (Kafka reads any other value as present)
            return off
        return inner(buf, off, end)
    return step


def _array_shape(tp: object) -> tuple[bool, object | None]:
    """(nullable, element type) of a field type; element None when not an array."""
    nullable = False
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else tp
    if typing.get_origin(tp) is tuple:
        return nullable, typing.get_args(tp)[0]
    return nullable, None


def _strip_none(tp: object) -> tuple[bool, object]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return True, args[0]
    return False, tp


def _field_step(field: dataclasses.Field, owner: str, flexible: bool) -> Step:
    what = f"{owner}.{field.name}"
    kafka_type = field.metadata.get("kafka_type")
    array_nullable, element_type = _array_shape(field.type)
    if element_type is not None:
        element_nullable, element_type = _strip_none(element_type)
        if dataclasses.is_dataclass(element_type):
            element = entity_walker(element_type)  # type: ignore[arg-type]
        else:
            element = _primitive_step(kafka_type, f"{what}[]", flexible, element_nullable)
        return _array(what, flexible, array_nullable, element)
    nullable, tp = _strip_none(field.type)
    if dataclasses.is_dataclass(tp):
        inner = entity_walker(tp)  # type: ignore[arg-type]
        return _optional_struct(what, inner) if nullable else inner
    return _primitive_step(kafka_type, what, flexible, nullable)


def _primitive_step(kafka_type: str | None, what: str, flexible: bool,
                    nullable: bool) -> Step:
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type], what)
    if kafka_type == "string":
        return _sized(what, flexible, nullable, wide=False)
    if kafka_type in ("bytes", "records"):
        return _sized(what, flexible, nullable or kafka_type == "records", wide=True)
    raise LookupError(f"{what}: no bounds rule for kafka_type {kafka_type!r}")


def _merge_fixed(fields: list[tuple[int | None, Step]], owner: str) -> list[Step]:
    """Runs of fixed-width fields become one bounds check."""
    steps: list[Step] = []
    run = 0
    for size, step in fields:
        if size is not None:
            run += size
            continue
        if run:
            steps.append(_fixed(run, owner))
            run = 0
        steps.append(step)
    if run:
        steps.append(_fixed(run, owner))
    return steps


@cache
def entity_walker(cls: type) -> Step:
    """The bounds walk of one kio entity (request body or nested struct)."""
    owner = cls.__name__
    flexible = bool(getattr(cls, "__flexible__", False))
    inline: list[tuple[int | None, Step]] = []
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        step = _field_step(field, owner, flexible)
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = step
            continue
        kafka_type = field.metadata.get("kafka_type")
        fixed = _FIXED.get(kafka_type) if _array_shape(field.type)[1] is None else None
        inline.append((fixed, step))
    steps = _merge_fixed(inline, owner)
    if flexible:
        steps.append(_tagged_fields(owner, tagged))

    if len(steps) == 1:
        return steps[0]

    def walk(buf: memoryview, off: int, end: int) -> int:
        for step in steps:
            off = step(buf, off, end)
        return off
    return walk


def _tagged_fields(owner: str, known: dict[int, Step]) -> Step:
    what = f"{owner} tagged fields"

    def step(buf: memoryview, off: int, end: int) -> int:
        if off < end and buf[off] == 0:  # the common case: none
            return off + 1
        count, off = _uvarint(buf, off, end, what)
        if count > end - off:
            raise DecodeError(f"{what}: declares {count} fields but only {end - off} bytes "
                              "are left")
        if count > MAX_TAGGED_FIELDS:
            raise DecodeError(f"{what}: {count} tagged fields exceed the maximum")
        for _ in range(count):
            tag, off = _uvarint(buf, off, end, what)
            size, off = _uvarint(buf, off, end, what)
            if size > end - off:
                raise DecodeError(f"{what}: tag {tag} declares {size} bytes but only "
                                  f"{end - off} are left")
            field_end = off + size
            inner = known.get(tag)
            if inner is not None:
                inner(buf, off, field_end)  # a known field stays inside its size
            off = field_end
        return off
    return step


def check_body(cls: type, buf: bytes | memoryview, offset: int) -> int:
    """Walk a request body of kio class ``cls`` from ``offset``; the offset after it."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    try:
        return entity_walker(cls)(view, offset, len(view))
    except IndexError:  # a byte read past the end (cannot happen with the checks above)
        raise DecodeError(f"{cls.__name__}: the request ends early") from None
