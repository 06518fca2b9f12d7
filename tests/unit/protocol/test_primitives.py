"""Wire primitives: round trips, kio cross-checks, and truncated input."""

from __future__ import annotations

import io

import kio.serial.readers as kr
import kio.serial.writers as kw
import pytest
from hypothesis import given
from hypothesis import strategies as st
from txbroker.protocol import primitives as p

I8 = st.integers(-(2**7), 2**7 - 1)
I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=40)


@pytest.mark.parametrize("write,read,strategy", [
    (p.write_int8, p.read_int8, I8),
    (p.write_int16, p.read_int16, I16),
    (p.write_int32, p.read_int32, I32),
    (p.write_int64, p.read_int64, I64),
    (p.write_uint32, p.read_uint32, U32),
    (p.write_varint, p.read_varint, I32),
    (p.write_varlong, p.read_varlong, I64),
    (p.write_nullable_string, p.read_nullable_string, st.none() | TEXT),
    (p.write_compact_nullable_string, p.read_compact_nullable_string, st.none() | TEXT),
], ids=["int8", "int16", "int32", "int64", "uint32", "varint", "varlong", "string",
        "compact-string"])
def test_round_trip(write, read, strategy):
    @given(prefix=st.binary(max_size=3), value=strategy, suffix=st.binary(max_size=3))
    def check(prefix, value, suffix):
        out = bytearray(prefix)
        write(out, value)
        end = len(out)
        out += suffix
        got, offset = read(bytes(out), len(prefix))
        assert got == value
        assert offset == end

    check()


@given(U32)
def test_unsigned_varint_round_trip(value):
    out = bytearray()
    p.write_unsigned_varint(out, value)
    assert p.read_unsigned_varint(bytes(out), 0) == (value, len(out))
    assert len(out) == max(1, (value.bit_length() + 6) // 7)


@given(U64)
def test_unsigned_varlong_round_trip(value):
    out = bytearray()
    p.write_unsigned_varint(out, value)
    assert p.read_unsigned_varint(bytes(out), 0, max_bytes=10) == (value, len(out))


@given(I64)
def test_varint_size_matches_encoding(value):
    out = bytearray()
    p.write_varlong(out, value)
    assert p.varint_size(value) == len(out)


def test_zigzag_known_values():
    for value, encoded in [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"),
                           (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
                           (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")]:
        out = bytearray()
        p.write_varint(out, value)
        assert bytes(out) == encoded, value
        assert p.read_varint(encoded, 0) == (value, len(encoded))


def test_writers_reject_out_of_range():
    for write, value in [(p.write_varint, 2**31), (p.write_varint, -(2**31) - 1),
                         (p.write_varlong, 2**63), (p.write_unsigned_varint, -1)]:
        with pytest.raises(ValueError):
            write(bytearray(), value)


# --- cross-checks against kio's (native) readers and writers ---------------------------


@given(I32)
def test_varint_matches_kio(value):
    ours = bytearray()
    p.write_varint(ours, value)
    theirs = io.BytesIO()
    kw.write_signed_varint(theirs, value)
    assert bytes(ours) == theirs.getvalue()
    assert kr.read_signed_varint(bytes(ours), 0) == (value, len(ours))


@given(I64)
def test_varlong_matches_kio(value):
    ours = bytearray()
    p.write_varlong(ours, value)
    theirs = io.BytesIO()
    kw.write_signed_varlong(theirs, value)
    assert bytes(ours) == theirs.getvalue()
    assert kr.read_signed_varlong(bytes(ours), 0) == (value, len(ours))


@given(U32)
def test_unsigned_varint_matches_kio(value):
    ours = bytearray()
    p.write_unsigned_varint(ours, value)
    theirs = io.BytesIO()
    kw.write_unsigned_varint(theirs, value)
    assert bytes(ours) == theirs.getvalue()
    assert kr.read_unsigned_varint(bytes(ours), 0) == (value, len(ours))


@given(st.binary(min_size=1, max_size=10))
def test_varint_decoding_of_arbitrary_bytes_agrees_with_kio(data):
    """Same value and length for any bytes both accept; both reject the rest."""
    try:
        theirs = kr.read_signed_varint(data, 0)
    except Exception:
        theirs = None
    try:
        ours = p.read_varint(data, 0)
    except p.DecodeError:
        ours = None
    if theirs is not None and ours is not None:
        assert ours == theirs
    # kio tolerates 5th-byte high bits that overflow 32 bits; we never accept what kio rejects.
    if theirs is None:
        assert ours is None


@given(I16, I32, I64, st.none() | TEXT, st.none() | TEXT)
def test_fixed_width_and_strings_match_kio(a, b, c, s, cs):
    out = bytearray()
    p.write_int16(out, a)
    p.write_int32(out, b)
    p.write_int64(out, c)
    p.write_nullable_string(out, s)
    p.write_compact_nullable_string(out, cs)
    data = bytes(out)
    off = 0
    for reader, expected in [(kr.read_int16, a), (kr.read_int32, b), (kr.read_int64, c),
                             (kr.read_nullable_legacy_string, s),
                             (kr.read_compact_string_nullable, cs)]:
        value, size = reader(data, off)
        assert value == expected
        off += size
    assert off == len(data)


# --- tagged fields --------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300)), max_size=6),
       st.binary(max_size=4))
def test_skip_tagged_fields(fields, suffix):
    out = bytearray()
    p.write_unsigned_varint(out, len(fields))
    for tag, data in fields:
        p.write_unsigned_varint(out, tag)
        p.write_unsigned_varint(out, len(data))
        out += data
    end = len(out)
    out += suffix
    assert p.skip_tagged_fields(bytes(out), 0) == end


def test_skip_tagged_fields_matches_kio_writer():
    buf = io.BytesIO()
    kw.write_empty_tagged_fields(buf)
    assert p.skip_tagged_fields(buf.getvalue(), 0) == len(buf.getvalue())


def test_skip_tagged_fields_truncated():
    out = bytearray()
    p.write_unsigned_varint(out, 1)
    p.write_unsigned_varint(out, 0)
    p.write_unsigned_varint(out, 10)
    out += b"12345"
    with pytest.raises(p.DecodeError):
        p.skip_tagged_fields(bytes(out), 0)


# --- truncated or malformed input ---------------------------------------------------------


@pytest.mark.parametrize("read,data", [
    (p.read_int8, b""),
    (p.read_int16, b"\x01"),
    (p.read_int32, b"\x00\x00\x01"),
    (p.read_int64, b"\x00" * 7),
    (p.read_uint32, b"\x00"),
    (p.read_unsigned_varint, b""),
    (p.read_unsigned_varint, b"\x80\x80"),
    (p.read_unsigned_varint, b"\x80\x80\x80\x80\x80\x01"),  # too long for 5 bytes
    (p.read_varint, b"\xff\xff\xff\xff\x7f"),  # 5 bytes but above 32 bits
    (p.read_varlong, b"\xff" * 10 + b"\x01"),
    (p.read_varlong, b"\xff" * 9 + b"\x7f"),  # above 64 bits
    (p.read_nullable_string, b"\x00"),
    (p.read_nullable_string, b"\x00\x05abc"),
    (p.read_nullable_string, b"\xff\xfe"),  # negative length other than -1
    (p.read_nullable_string, b"\x00\x02\xff\xfe"),  # not UTF-8
    (p.read_compact_nullable_string, b"\x06abc"),
    (p.read_compact_nullable_string, b"\x03\xc3\x28"),  # not UTF-8
])
def test_truncated_or_invalid_input_raises_decode_error(read, data):
    with pytest.raises(p.DecodeError):
        read(data, 0)


@given(st.sampled_from([p.read_int8, p.read_int16, p.read_int32, p.read_int64, p.read_varint,
                        p.read_varlong, p.read_nullable_string,
                        p.read_compact_nullable_string]),
       I64, st.integers(0, 12))
def test_every_prefix_of_an_encoding_raises_decode_error(read, value, cut):
    writers = {p.read_int8: (p.write_int8, value % 128), p.read_int16: (p.write_int16, value % 2**15),
               p.read_int32: (p.write_int32, value % 2**31), p.read_int64: (p.write_int64, value),
               p.read_varint: (p.write_varint, value % 2**31),
               p.read_varlong: (p.write_varlong, value),
               p.read_nullable_string: (p.write_nullable_string, str(value)),
               p.read_compact_nullable_string: (p.write_compact_nullable_string, str(value))}
    write, v = writers[read]
    out = bytearray()
    write(out, v)
    cut = min(cut, len(out) - 1)
    with pytest.raises(p.DecodeError):
        read(bytes(out[:cut]), 0)


def test_decode_error_is_a_value_error():
    assert issubclass(p.DecodeError, ValueError)


def test_negative_offset_is_rejected():
    with pytest.raises(p.DecodeError):
        p.read_int32(b"\x00" * 8, -2)
