"""protocol/bounds.py: the schema walk that checks every declared length and count
against the bytes sent, before kio's native reader sees a request body.

The walk is generated code; tests/unit/protocol/bounds_reference.py keeps the walk of
closures it replaced, and the differential tests here require the same end offset or
the same error from both on kio-encoded bodies, their prefixes, mutations of
them and the fuzz corpus."""

from __future__ import annotations

import io
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map
from kio.serial import entity_writer
from kio.static.primitive import Records
from txbroker.protocol.bounds import check_body, entity_walker
from txbroker.protocol.messages import decode_request, parse_request_header, request_class
from txbroker.protocol.primitives import DecodeError

from tests.fuzz.corpus import CLIENTS, GENERATED, read_frames
from tests.unit.protocol import bounds_reference

# kio registers strategies for its types but not for the opaque records field.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# Every request schema kio has: the walk must agree with kio's own encoding of each.
REQUEST_CLASSES = [
    cls for key in sorted(api_key_map) for v in range(0, 20)
    if (cls := request_class(key, v)) is not None
]


def _encode(message) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(message))(buf, message)
    return buf.getvalue()


@pytest.mark.parametrize("cls", REQUEST_CLASSES,
                         ids=lambda c: f"{c.__name__}-v{c.__version__}")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_walk_consumes_exactly_what_kio_wrote_and_refuses_every_prefix(cls, data):
    message = data.draw(st.from_type(cls))
    body = _encode(message)
    assert check_body(cls, b"\x07" + body, 1) == len(body) + 1
    # Every strict prefix lacks bytes the full walk needed.
    cut = data.draw(st.integers(0, len(body) - 1)) if body else None
    if cut is not None:
        with pytest.raises(DecodeError):
            check_body(cls, body[:cut], 0)


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, -1) + (b"\x00" if flexible else b"")


# Frames that aborted the process with kio 0.6.5 (issue 14): a compact array count of
# about 2^32 in a dozen bytes.
HUGE_COMPACT_COUNT = b"\xff\xff\xff\xff\x0f"
ABORTING_FRAMES = {
    "LeaveGroup v4": _header(13, 4, True) + b"\x02g" + HUGE_COMPACT_COUNT,
    "Metadata v9": _header(3, 9, True) + HUGE_COMPACT_COUNT,
    "Metadata v12": _header(3, 12, True) + HUGE_COMPACT_COUNT,
    "FindCoordinator v4": _header(10, 4, True) + b"\x00" + HUGE_COMPACT_COUNT,
    "Fetch v12": _header(1, 12, True) + struct.pack(">iiiibii", -1, 0, 1, 100, 0, 0, -1)
    + HUGE_COMPACT_COUNT,
    "Produce v9": _header(0, 9, True) + b"\x00" + struct.pack(">hi", -1, 1000)
    + HUGE_COMPACT_COUNT,
    # KIP-848: group id, member id, epoch 0, no instance/rack id, rebalance timeout, then
    # a subscription of 2^32 topic names.
    "ConsumerGroupHeartbeat v1": _header(68, 1, True) + b"\x02g\x02m"
    + struct.pack(">i", 0) + b"\x00\x00" + struct.pack(">i", 1000) + HUGE_COMPACT_COUNT,
}


@pytest.mark.parametrize("name", sorted(ABORTING_FRAMES))
def test_huge_compact_array_count_is_a_decode_error(name):
    frame = ABORTING_FRAMES[name]
    with pytest.raises(DecodeError, match="elements but only"):
        decode_request(parse_request_header(frame), frame)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


@pytest.mark.parametrize("count, refused", [(1_000_000, False), (1_000_001, True)])
def test_an_array_over_kafkas_cap_is_refused_even_when_the_bytes_hold_it(count, refused):
    # Kafka 4.4 refuses a collection of more than 1,000,000 elements (and closes the
    # connection): ListTransactions v1 with that many producer-id filters, 8 MB sent.
    frame = (_header(66, 1, True) + b"\x01" + _uvarint(count + 1) + bytes(8 * count)
             + struct.pack(">q", -1) + b"\x00")
    header = parse_request_header(frame)
    if refused:
        with pytest.raises(DecodeError, match="exceeds the maximum of 1000000"):
            decode_request(header, frame)
        with pytest.raises(DecodeError, match="exceeds the maximum"):
            bounds_reference.check_body(request_class(66, 1), frame, header.body_offset)
    else:
        assert len(decode_request(header, frame).producer_id_filters) == count


@pytest.mark.parametrize("count, refused", [(10_000, False), (10_001, True)])
def test_tagged_fields_over_kafkas_cap_are_refused(count, refused):
    # Metadata v12, no topics, three bools, then ``count`` unknown empty tagged fields.
    fields = b"".join(_uvarint(100 + i) + b"\x00" for i in range(count))
    frame = _header(3, 12, True) + b"\x01\x00\x00" + _uvarint(count) + fields
    offset = parse_request_header(frame).body_offset
    if refused:
        with pytest.raises(DecodeError, match="exceed the maximum of 10000"):
            check_body(request_class(3, 12), frame, offset)
        with pytest.raises(DecodeError, match="exceed the maximum"):
            bounds_reference.check_body(request_class(3, 12), frame, offset)
    else:  # the walk passes them (kio then refuses tags it does not know)
        assert check_body(request_class(3, 12), frame, offset) == len(frame)


def test_null_array_where_the_schema_allows_none():
    # Issue 14's reproducer: DescribeGroups v5 (flexible) with groups = null (count 0).
    frame = struct.pack(">hhih", 15, 5, 1, -1) + b"\x00\x00\x00\x00"
    with pytest.raises(DecodeError, match="DescribeGroupsRequest.groups: count -1"):
        decode_request(parse_request_header(frame), frame)


def test_nullable_array_may_be_null():
    frame = _header(3, 1, False) + b"\xff\xff\xff\xff"  # Metadata v1: topics = null is "all"
    assert decode_request(parse_request_header(frame), frame).topics is None


@pytest.mark.parametrize("varint", [b"\xff\xff\xff\xff\xff\x01", b"\xff\xff\xff\xff\x1f",
                                    b"\x80\x80"])
def test_malformed_varints(varint):
    frame = _header(3, 12, True) + varint
    with pytest.raises(DecodeError, match="varint"):
        decode_request(parse_request_header(frame), frame)


def test_tagged_field_size_past_the_end():
    # Metadata v12 with no topics, three bools, then one tagged field claiming 100 bytes.
    frame = _header(3, 12, True) + b"\x01\x00\x00" + b"\x01\x05\x64abc"
    with pytest.raises(DecodeError, match="tag 5 declares 100 bytes"):
        decode_request(parse_request_header(frame), frame)


def test_known_tagged_field_must_fit_its_size():
    # FetchRequest v12's tagged ClusterId (tag 0) claiming a 50-byte string inside 2 bytes.
    cls = request_class(1, 12)
    body = struct.pack(">iiiibii", -1, 0, 1, 100, 0, 0, -1) + b"\x01\x01\x01" + \
        b"\x01\x00\x02\x33x"
    with pytest.raises(DecodeError, match="cluster_id"):
        check_body(cls, body, 0)


def test_string_longer_than_the_request():
    frame = _header(3, 1, False) + struct.pack(">ih", 1, 30000) + b"abc"
    with pytest.raises(DecodeError, match="declares 30000 bytes but 3 are left"):
        decode_request(parse_request_header(frame), frame)


# --- the generated walk against the reference walk ---------------------------

def _outcome(walk, buf, offset: int, end: int) -> int | str:
    """The end offset of a walk, or its error as text."""
    try:
        return walk(buf, offset, end)
    except DecodeError as e:
        return f"DecodeError: {e}"
    except IndexError:  # check_body's last resort: must not be reached by either walk
        return "IndexError"


def assert_same_walk(cls, buf: bytes, offset: int = 0, ends: int = 48) -> None:
    """Both walks agree on ``buf`` from ``offset`` to the whole buffer and to shorter
    ends (bytes past ``end`` exist but must not be read): every end of a short body,
    ``ends`` of them spread over a long one; as bytes and as a memoryview."""
    new, reference = entity_walker(cls), bounds_reference.entity_walker(cls)
    view = memoryview(buf)
    span = len(buf) - offset
    step = max(1, span // ends)
    for end in {*range(offset, len(buf) + 1, step), len(buf)}:
        expected = _outcome(reference, view, offset, end)
        assert expected != "IndexError"
        assert _outcome(new, buf, offset, end) == expected, (cls.__name__, buf, end)
        assert _outcome(new, view, offset, end) == expected, (cls.__name__, buf, end)
    assert _outcome(lambda b, o, _e: check_body(cls, b, o), buf, offset, len(buf)) == \
        _outcome(lambda b, o, _e: bounds_reference.check_body(cls, b, o), buf, offset, len(buf))


# Bytes that make lengths and counts interesting: zero, one, null (-1 and compact 0),
# the largest one-byte varint, a continuation, negatives and huge values.
_SPECIAL_BYTES = (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0x0F, 0x10)
_SPECIAL_RUNS = (b"\xff\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x1f",
                 b"\x80\x80\x80\x80\x80\x01", b"\x00\x00", b"\x7f\xff", b"\x80\x00")


def mutations(body: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``count`` mutated copies of ``body``: a byte set to a special or random value,
    a special run written over or inserted, a byte deleted or duplicated."""
    out = []
    for _ in range(count):
        b = bytearray(body)
        at = rng.randrange(len(b) + 1)
        kind = rng.randrange(6)
        if kind == 0 and b:
            b[min(at, len(b) - 1)] = rng.choice(_SPECIAL_BYTES)
        elif kind == 1 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif kind == 2:
            run = rng.choice(_SPECIAL_RUNS)
            b[at:at + len(run)] = run
        elif kind == 3:
            b[at:at] = rng.choice(_SPECIAL_RUNS)
        elif kind == 4 and b:
            del b[min(at, len(b) - 1)]
        else:
            b[at:at] = b[at:at + rng.randrange(1, 8)]
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("cls", REQUEST_CLASSES,
                         ids=lambda c: f"{c.__name__}-v{c.__version__}")
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_walk_agrees_with_the_reference(cls, data):
    body = _encode(data.draw(st.from_type(cls)))
    assert_same_walk(cls, body)
    assert_same_walk(cls, b"\x07" + body + b"\x00\xff", 1)  # an offset, trailing bytes
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for mutated in mutations(body, rng, 12):
        assert_same_walk(cls, mutated, ends=8)


def _corpus_bodies() -> list[tuple[type, bytes, int]]:
    bodies = []
    for frame in read_frames(CLIENTS) + read_frames(GENERATED):
        try:
            header = parse_request_header(frame)
        except DecodeError:
            continue
        cls = request_class(header.api_key, header.api_version)
        if cls is not None:
            bodies.append((cls, frame, header.body_offset))
    return bodies


def test_generated_walk_agrees_with_the_reference_on_the_fuzz_corpus():
    """Every frame of the fuzz corpus (real clients' and kio-generated ones), each
    with seeded mutations of its body."""
    rng = random.Random(25)
    bodies = _corpus_bodies()
    assert len(bodies) > 500
    for cls, frame, offset in bodies:
        body = frame[offset:]
        assert_same_walk(cls, frame, offset)
        for mutated in mutations(body, rng, 8):
            assert_same_walk(cls, mutated, ends=8)


def test_the_reference_is_the_walk_that_was_replaced():
    # The differential tests are only as good as their reference: it must still
    # refuse what the walk has always refused (the cases above, on the reference).
    for name in sorted(ABORTING_FRAMES):
        frame = ABORTING_FRAMES[name]
        header = parse_request_header(frame)
        with pytest.raises(DecodeError, match="elements but only"):
            bounds_reference.check_body(request_class(header.api_key, header.api_version),
                                        frame, header.body_offset)
