"""Bounds check of a request body against its schema, before any decoder sees it.

No length or count a client declares is trusted beyond the bytes it sent (DESIGN
principle 8). kio's native reader does not hold to that: kio 0.6.5 reserves
``count × 8`` bytes for a compact array before reading an element, so a frame of
a dozen bytes declaring 2^32 elements aborts the process (SIGABRT, no Python
exception). This module walks the body by the schema first, in pure Python, and
raises :class:`DecodeError` for anything kio must not be handed:

- an array count larger than the bytes left (Kafka's own generated readers refuse
  exactly that: "tried to allocate a collection of size N, but there are only M
  bytes remaining"); a string, bytes or records length past the end;
- null for an array, string or struct the schema does not allow to be null
  (Kafka: "non-nullable field X was serialized as null"), which kio accepts and
  hands to the handlers as ``None``;
- a malformed unsigned varint (more than 5 bytes, or more than 32 bits), and tagged
  fields whose sizes run past the end; known tagged fields are walked inside the
  bytes their size gives them;
- an array of more than 1,000,000 elements or more than 10,000 tagged fields, Kafka
  4.4's caps (``MAX_ARRAY_LENGTH``, ``MAX_TAGGED_FIELDS``), even where the bytes sent
  would hold them.

The walk follows kio's dataclasses (the field order, ``kafka_type`` and ``tag``
metadata and ``__flexible__``), so it covers every API and version kio has a
schema for, whatever kio version is installed.

It runs for every request, so it is generated code: the first time a schema is
checked, the source of one straight-line function for it is written (nested
structs inlined, a run of fixed-width fields one addition and one comparison,
loops only for arrays, one-byte varints read inline) and compiled; later requests
of that schema run only that function. A walk of closures (one call per field and
per varint) cost several times more (issue 25). ``tests/unit/protocol/bounds_reference.py``
keeps that walk as the reference the generated one is compared with.
"""

from __future__ import annotations

import dataclasses
import linecache
import struct
import types
import typing
from collections.abc import Callable
from functools import cache

from .primitives import DecodeError

# buf, offset, end -> the offset after what was walked
Walker = Callable[[bytes | bytearray | memoryview, int, int], int]

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "float64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _uvarint(buf, off: int, end: int, what: str) -> tuple[int, int]:
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


# The errors, built outside the generated code so that it only says which one.

def _ends_before(what: str) -> DecodeError:
    return DecodeError(f"{what}: the request ends before it")


def _ends_before_length(what: str) -> DecodeError:
    return DecodeError(f"{what}: the request ends before its length")


def _ends_before_count(what: str) -> DecodeError:
    return DecodeError(f"{what}: the request ends before its count")


def _bad_length(what: str, n: int, left: int) -> DecodeError:
    if n < 0:
        return DecodeError(f"{what}: length {n} (null or negative where the schema "
                           "allows none)")
    return DecodeError(f"{what}: declares {n} bytes but {left} are left")


# Kafka 4.4's generated readers refuse larger collections whatever the bytes left.
MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELDS = 10_000


def _bad_count(what: str, n: int, left: int) -> DecodeError:
    if n > MAX_ARRAY_LENGTH and n <= left:
        return DecodeError(f"{what}: a collection of {n} elements exceeds the maximum of "
                           f"{MAX_ARRAY_LENGTH}")
    if n < 0:
        return DecodeError(f"{what}: count {n} (null or negative where the schema "
                           "allows none)")
    return DecodeError(f"{what}: declares {n} elements but only {left} bytes are left")


def _tagged_fields(buf, off: int, end: int, what: str, known: dict[int, Walker]) -> int:
    """The tagged fields of a flexible entity when there is at least one (the
    generated code handles the common count of zero itself)."""
    count, off = _uvarint(buf, off, end, what)
    if count > end - off:
        raise DecodeError(f"{what}: declares {count} fields but only {end - off} bytes "
                          "are left")
    if count > MAX_TAGGED_FIELDS:
        raise DecodeError(f"{what}: {count} tagged fields exceed the maximum of "
                          f"{MAX_TAGGED_FIELDS}")
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


# The generated code's globals: the helpers above, and nothing else but the known
# tagged fields' walkers (added per function).
_HELPERS: dict[str, object] = {
    "_I16": _I16, "_I32": _I32, "_uvarint": _uvarint, "_tagged_fields": _tagged_fields,
    "_ends_before": _ends_before, "_ends_before_length": _ends_before_length,
    "_ends_before_count": _ends_before_count, "_bad_length": _bad_length,
    "_bad_count": _bad_count, "_MAX_ARRAY_LENGTH": MAX_ARRAY_LENGTH,
}


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


class _Source:
    """The lines of one generated function, and the globals it needs beyond _HELPERS.

    The generated code keeps the offset in ``off``; ``n`` is the length or count just
    read (a loop over ``range(n)`` is not disturbed by an inner one reusing it). Text
    from the schema (class and field names, for the messages) enters the source only
    as ``repr()`` literals.

    A run of fixed-width fields adds its width to ``off`` and leaves the comparison
    with ``end`` pending: a read that follows at the same depth takes it into its
    own slow path (its fast path fails anyway once ``off`` is past ``end``), so the
    common case pays one comparison for both. Any other line, including the first
    line after the end of a block, writes the pending comparison out first."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, object] = {}
        self.pending: tuple[int, str] | None = None  # (depth, what) of an unchecked run

    def add(self, depth: int, line: str) -> None:
        self.flush()
        self.lines.append("    " * depth + line)

    def flush(self) -> None:
        if self.pending is not None:
            depth, what = self.pending
            self.pending = None
            self.add(depth, "if off > end:")
            self.add(depth + 1, f"raise _ends_before({what!r})")

    def take_pending(self, depth: int) -> str | None:
        """The field name of a run pending at ``depth``, for the read about to be
        written there to check on its slow path (with ``check_taken``)."""
        if self.pending is None or self.pending[0] != depth:
            self.flush()
            return None
        what = self.pending[1]
        self.pending = None
        return what

    def check_taken(self, depth: int, what: str | None) -> None:
        if what is not None:
            self.add(depth, "if off > end:")
            self.add(depth + 1, f"raise _ends_before({what!r})")

    def bind(self, value: object) -> str:
        name = f"_known{len(self.names)}"
        self.names[name] = value
        return name

    # --- pieces of the walk -------------------------------------------------

    def fixed(self, depth: int, size: int | str, what: str) -> None:
        """Fixed-width bytes: ``size`` a number, or an expression of ``n``."""
        self.add(depth, f"off += {size}")
        self.pending = (depth, what)

    def uvarint_length(self, depth: int, what: str) -> None:
        """``n``: a compact length or count (uvarint minus one); one byte inline."""
        late = self.take_pending(depth)
        self.add(depth, "if off < end and (n := buf[off]) < 0x80:")
        self.add(depth + 1, "off += 1")
        self.add(depth, "else:")
        self.check_taken(depth + 1, late)
        self.add(depth + 1, f"n, off = _uvarint(buf, off, end, {what!r})")
        self.add(depth, "n -= 1")

    def int_length(self, depth: int, what: str, width: int, error: str) -> None:
        """``n``: a big-endian int16 or int32 length or count."""
        late = self.take_pending(depth)
        self.add(depth, f"if off + {width} > end:")
        self.check_taken(depth + 1, late)
        self.add(depth + 1, f"raise {error}({what!r})")
        self.add(depth, f"n = {'_I32' if width == 4 else '_I16'}(buf, off)[0]")
        self.add(depth, f"off += {width}")

    def sized(self, depth: int, what: str, flexible: bool, nullable: bool,
              wide: bool) -> None:
        """A string (int16 length) or bytes/records (int32 length); compact in
        flexible versions (uvarint length + 1, 0 for null)."""
        if flexible:
            self.uvarint_length(depth, what)
        else:
            self.int_length(depth, what, 4 if wide else 2, "_ends_before_length")
        self.add(depth, "if 0 <= n <= end - off:")
        self.add(depth + 1, "off += n")
        self.add(depth, "elif n != -1:" if nullable else "else:")
        self.add(depth + 1, f"raise _bad_length({what!r}, n, end - off)")

    def array(self, depth: int, what: str, flexible: bool, nullable: bool) -> int:
        """Read an array's count into ``n`` and open the block walking its elements
        (entered only for a count that fits the bytes left); the block's depth."""
        if flexible:
            self.uvarint_length(depth, what)
        else:
            self.int_length(depth, what, 4, "_ends_before_count")
        self.add(depth, "if n < 0 or n > end - off or n > _MAX_ARRAY_LENGTH:")
        if nullable:
            self.add(depth + 1, "if n != -1:")
            self.add(depth + 2, f"raise _bad_count({what!r}, n, end - off)")
        else:
            self.add(depth + 1, f"raise _bad_count({what!r}, n, end - off)")
        self.add(depth, "else:")
        return depth + 1

    def field(self, depth: int, field: dataclasses.Field, owner: str,
              flexible: bool) -> None:
        what = f"{owner}.{field.name}"
        kafka_type = field.metadata.get("kafka_type")
        array_nullable, element_type = _array_shape(field.type)
        if element_type is not None:
            element_nullable, element_type = _strip_none(element_type)
            inner = self.array(depth, what, flexible, array_nullable)
            if dataclasses.is_dataclass(element_type):
                self.add(inner, "for _ in range(n):")
                self.entity(inner + 1, element_type)  # type: ignore[arg-type]
            elif kafka_type in _FIXED:
                # n elements of one width: the bounds check of the last covers them all
                self.fixed(inner, f"n * {_FIXED[kafka_type]}", f"{what}[]")
            else:
                self.add(inner, "for _ in range(n):")
                self.primitive(inner + 1, kafka_type, f"{what}[]", flexible, element_nullable)
            return
        nullable, tp = _strip_none(field.type)
        if dataclasses.is_dataclass(tp):
            if not nullable:
                self.entity(depth, tp)  # type: ignore[arg-type]
                return
            # A nullable struct: an int8 marker, negative for null (Kafka reads any
            # other value as present), then the struct.
            late = self.take_pending(depth)
            self.add(depth, "if off >= end:")
            self.check_taken(depth + 1, late)
            self.add(depth + 1, f"raise _ends_before({what!r})")
            self.add(depth, "off += 1")
            self.add(depth, "if not buf[off - 1] & 0x80:")
            self.entity(depth + 1, tp)  # type: ignore[arg-type]
            return
        self.primitive(depth, kafka_type, what, flexible, nullable)

    def primitive(self, depth: int, kafka_type: str | None, what: str, flexible: bool,
                  nullable: bool) -> None:
        if kafka_type in _FIXED:
            self.fixed(depth, _FIXED[kafka_type], what)
        elif kafka_type == "string":
            self.sized(depth, what, flexible, nullable, wide=False)
        elif kafka_type in ("bytes", "records"):
            self.sized(depth, what, flexible, nullable or kafka_type == "records", wide=True)
        else:
            raise LookupError(f"{what}: no bounds rule for kafka_type {kafka_type!r}")

    def entity(self, depth: int, cls: type) -> None:
        """The walk of one kio entity, inline: its untagged fields in order (a run of
        fixed-width ones checked once), then, in flexible versions, its tagged fields."""
        owner = cls.__name__
        flexible = bool(getattr(cls, "__flexible__", False))
        start = len(self.lines)
        run = 0
        tagged: dict[int, Walker] = {}
        for field in dataclasses.fields(cls):
            tag = field.metadata.get("tag")
            if tag is not None:
                tagged[int(tag)] = _field_walker(cls, field.name)
                continue
            kafka_type = field.metadata.get("kafka_type")
            if kafka_type in _FIXED and _array_shape(field.type)[1] is None:
                run += _FIXED[kafka_type]
                continue
            if run:
                self.fixed(depth, run, owner)
                run = 0
            self.field(depth, field, owner, flexible)
        if run:
            self.fixed(depth, run, owner)
        if flexible:
            known = self.bind(tagged)
            late = self.take_pending(depth)
            self.add(depth, "if off < end and buf[off] == 0:  # the common case: none")
            self.add(depth + 1, "off += 1")
            self.add(depth, "else:")
            self.check_taken(depth + 1, late)
            self.add(depth + 1, f"off = _tagged_fields(buf, off, end, "
                                f"{owner + ' tagged fields'!r}, {known})")
        if len(self.lines) == start:
            self.add(depth, "pass")

    def compile(self, cls: type, name: str) -> Walker:
        filename = f"<bounds walk of {cls.__module__}.{cls.__qualname__}{name}>"
        self.add(1, "return off")
        source = "\n".join(["def walk(buf, off, end):", *self.lines, ""])
        namespace = dict(_HELPERS, **self.names)
        exec(compile(source, filename, "exec"), namespace)  # the source is ours, written above
        # Tracebacks and profilers show the generated lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        walker = namespace["walk"]
        walker.__qualname__ = walker.__name__ = f"walk_{cls.__name__}{name}"
        return walker  # type: ignore[return-value]


class _Walkers(dict):
    """Generated walkers by kio entity class, each written on first use. A dict
    rather than functools.cache: check_body's look-up runs for every request and a
    plain subscript costs half of a cache call."""

    def __missing__(self, cls: type) -> Walker:
        source = _Source()
        source.entity(1, cls)
        walker = self[cls] = source.compile(cls, "")
        return walker


_WALKERS = _Walkers()


def entity_walker(cls: type) -> Walker:
    """The bounds walk of one kio entity (request body or nested struct): a generated
    function of (buf, offset, end) returning the offset after the entity."""
    return _WALKERS[cls]


@cache
def _field_walker(cls: type, name: str) -> Walker:
    """The walk of one field of ``cls`` alone: a known tagged field, which is walked
    inside the bytes its size gives it."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    source = _Source()
    source.field(1, field, cls.__name__, bool(getattr(cls, "__flexible__", False)))
    return source.compile(cls, f".{name}")


def check_body(cls: type, buf: bytes | memoryview, offset: int) -> int:
    """Walk a request body of kio class ``cls`` from ``offset``; the offset after it.

    Raises DecodeError naming the field when a declared length, count or null does
    not fit the schema and the bytes actually sent."""
    try:
        return _WALKERS[cls](buf, offset, len(buf))
    except IndexError:  # a byte read past the end (cannot happen with the checks above)
        raise DecodeError(f"{cls.__name__}: the request ends early") from None
