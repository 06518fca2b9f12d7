"""``__transaction_state`` records: layout, round trips, and rejection of garbage."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.transaction.records import (
    PERSISTED_STATES,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def value(**kw) -> TxnLogValue:
    base = dict(
        producer_id=1000,
        previous_producer_id=1000,
        next_producer_id=-1,
        producer_epoch=3,
        last_producer_epoch=2,
        timeout_ms=60000,
        state="Ongoing",
        partitions=frozenset({("a", 1), ("a", 0), ("b", 7)}),
        txn_start_ms=10,
        last_update_ms=20,
    )
    base.update(kw)
    return TxnLogValue(**base)


def test_key_round_trip_and_layout() -> None:
    key = encode_key("my-txn")
    assert msgpack.unpackb(key) == [0, 0, "my-txn"]
    assert decode_key(key) == "my-txn"
    # Compaction compares key bytes: the same id must always give the same bytes.
    assert encode_key("my-txn") == key


@pytest.mark.parametrize("bad", [
    b"", b"\xc1", msgpack.packb([1, 0, "t"]), msgpack.packb([0, 1, "t"]), msgpack.packb([0, 0]),
    msgpack.packb([0, 0, ""]), msgpack.packb([0, 0, 5]), msgpack.packb([0, False, "t"]),
    msgpack.packb({"a": 1}), msgpack.packb([]), msgpack.packb([0, 0, "t", "x"]),
])
def test_decode_key_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode_key(bad)


def test_encode_key_rejects_empty() -> None:
    with pytest.raises(ValueError):
        encode_key("")


def test_value_layout_is_kafka_order_with_grouped_sorted_partitions() -> None:
    raw = msgpack.unpackb(encode_value(value()))
    assert raw == [0, 1000, 1000, -1, 3, 2, 60000, PERSISTED_STATES["Ongoing"],
                   [["a", [0, 1]], ["b", [7]]], 10, 20]
    assert PERSISTED_STATES == {"Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3,
                                "CompleteCommit": 4, "CompleteAbort": 5}


def test_value_round_trip_and_tombstone() -> None:
    v = value()
    assert decode_value(encode_value(v)) == v
    assert encode_value(None) is None
    assert decode_value(None) is None


def test_value_bytes_deterministic() -> None:
    a = value(partitions=frozenset({("b", 7), ("a", 0), ("a", 1)}))
    b = value(partitions=frozenset({("a", 1), ("b", 7), ("a", 0)}))
    assert encode_value(a) == encode_value(b)


def test_later_versions_may_append_fields() -> None:
    prepared = value(state="PrepareCommit", txn_first_offsets={("a", 0): 5},
                     client_transaction_version=2)
    raw = msgpack.unpackb(encode_value(prepared))
    raw[0] = 1
    raw.append("a future field")
    assert decode_value(msgpack.packb(raw)) == prepared


def test_client_transaction_version_is_written_only_when_set() -> None:
    # Transactions v1 records keep the bytes they had before the field existed, and
    # records written without it (by the current format) load as version 0.
    v1 = value(state="Ongoing")
    assert len(msgpack.unpackb(encode_value(v1))) == 11
    assert decode_value(encode_value(v1)).client_transaction_version == 0
    v2 = value(state="CompleteCommit", client_transaction_version=2)
    raw = msgpack.unpackb(encode_value(v2))
    assert raw[11] is None and raw[12] == 2  # no first offsets, then the version
    assert decode_value(encode_value(v2)) == v2
    prepared = value(state="PrepareAbort", txn_first_offsets={("a", 0): 1},
                     client_transaction_version=2, next_producer_id=9)
    assert decode_value(encode_value(prepared)) == prepared
    with pytest.raises(ValueError):
        encode_value(value(state="Ongoing", client_transaction_version=-1))


def test_prepare_records_carry_first_offsets_grouped_by_topic() -> None:
    v = value(state="PrepareAbort", txn_first_offsets={("b", 7): 0, ("a", 1): 12, ("a", 0): 3})
    raw = msgpack.unpackb(encode_value(v))
    assert raw[11] == [["a", [[0, 3], [1, 12]]], ["b", [[7, 0]]]]
    assert decode_value(encode_value(v)) == v
    # An empty map (nothing written yet) is kept apart from "not recorded" (old records).
    empty = value(state="PrepareCommit", txn_first_offsets={})
    assert decode_value(encode_value(empty)).txn_first_offsets == {}
    assert decode_value(encode_value(value(state="PrepareCommit"))).txn_first_offsets is None
    assert len(msgpack.unpackb(encode_value(value(state="PrepareCommit")))) == 11


@pytest.mark.parametrize("kw", [
    {"state": "Ongoing", "txn_first_offsets": {("a", 0): 1}},  # only Prepare* records
    {"state": "PrepareCommit", "txn_first_offsets": {("c", 0): 1}},  # not a partition of it
    {"state": "PrepareCommit", "txn_first_offsets": {("a", 0): -1}},
])
def test_encode_refuses_bad_first_offsets(kw) -> None:
    with pytest.raises(ValueError):
        encode_value(value(**kw))


@pytest.mark.parametrize("bad", ["x", [["a", [0, 1]]], [["a", [[0]]]], [["a", [[0, 1], [0, 2]]]],
                                 [["a", [[0, -5]]]], [[5, [[0, 1]]]]])
def test_decode_refuses_malformed_first_offsets(bad) -> None:
    raw = msgpack.unpackb(encode_value(value(state="PrepareCommit")))
    raw.append(bad)
    with pytest.raises(ValueError):
        decode_value(msgpack.packb(raw))


@pytest.mark.parametrize("kw", [
    {"state": "Dead"}, {"state": "PrepareEpochFence"}, {"state": "Bogus"},
    {"state": "Empty"},  # Empty with partitions
    {"producer_id": -1}, {"producer_epoch": -1}, {"producer_epoch": 32768},
    {"last_producer_epoch": -2}, {"timeout_ms": 0}, {"timeout_ms": 2**31},
    {"partitions": frozenset({("a", -1)})}, {"txn_start_ms": -2},
    {"previous_producer_id": -2}, {"producer_epoch": True},
])
def test_encode_refuses_values_kafka_never_writes(kw) -> None:
    with pytest.raises(ValueError):
        encode_value(value(**kw))


def _raw(**changes) -> bytes:
    raw = msgpack.unpackb(encode_value(value()))
    for idx, v in changes.items():
        raw[int(idx[1:])] = v
    return msgpack.packb(raw)


@pytest.mark.parametrize("bad", [
    b"", b"\x00", b"\xc1", msgpack.packb("str"), msgpack.packb([]), msgpack.packb([-1]),
    msgpack.packb(["0"]), msgpack.packb([0, 1, 2]),
    _raw(i7=6), _raw(i7=7), _raw(i7=99), _raw(i4=-1), _raw(i1=True), _raw(i1=1.5),
    _raw(i8=[["a", [0, 0]]]), _raw(i8=[["a", 0]]), _raw(i8="x"), _raw(i8=[[1, [0]]]),
    _raw(i6=0), _raw(i9="now"), _raw(i7=0),  # Empty with partitions
])
def test_decode_value_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(bad)


_partitions = st.frozensets(st.tuples(st.sampled_from(["a", "b", "topic-ü"]), st.integers(0, 2**31 - 1)),
                            max_size=6)


@st.composite
def log_values(draw) -> TxnLogValue:
    state = draw(st.sampled_from(sorted(PERSISTED_STATES)))
    return TxnLogValue(
        producer_id=draw(st.integers(0, 2**63 - 1)),
        previous_producer_id=draw(st.integers(-1, 2**63 - 1)),
        next_producer_id=draw(st.integers(-1, 2**63 - 1)),
        producer_epoch=draw(st.integers(0, 32767)),
        last_producer_epoch=draw(st.integers(-1, 32767)),
        timeout_ms=draw(st.integers(1, 2**31 - 1)),
        state=state,
        partitions=frozenset() if state == "Empty" else draw(_partitions),
        txn_start_ms=draw(st.integers(-1, 2**62)),
        last_update_ms=draw(st.integers(-(2**62), 2**62)),
    )


@settings(max_examples=300)
@given(log_values())
def test_value_round_trip_property(v: TxnLogValue) -> None:
    data = encode_value(v)
    assert decode_value(data) == v
    assert encode_value(decode_value(data)) == data


@settings(max_examples=300)
@given(st.text(min_size=1))
def test_key_round_trip_property(tid: str) -> None:
    assert decode_key(encode_key(tid)) == tid


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_decoders_raise_only_value_error_on_random_bytes(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except ValueError:
            pass


_i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300)
@given(st.lists(st.one_of(_i64, st.text(max_size=3), st.none(), st.booleans(),
                          st.lists(_i64, max_size=2)), max_size=12))
def test_decoders_raise_only_value_error_on_random_arrays(items: list) -> None:
    data = msgpack.packb([0, *items])
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except ValueError:
            pass



_edge_ints = st.sampled_from([-(2**63) - 1, -(2**63), -2, -1, 0, 1, 32767, 32768, 2**31 - 1,
                              2**31, 2**63 - 1, 2**63]) | st.booleans()
_changes = st.fixed_dictionaries({}, optional={
    **{name: _edge_ints for name in (
        "producer_id", "previous_producer_id", "next_producer_id", "producer_epoch",
        "last_producer_epoch", "timeout_ms", "txn_start_ms", "last_update_ms",
        "client_transaction_version")},
    "state": st.sampled_from([*PERSISTED_STATES, "Dead", "PrepareEpochFence"]),
    "partitions": st.frozensets(st.tuples(st.sampled_from(["a", "b"]), _edge_ints), max_size=3)
    | st.just(frozenset({("a",)})) | st.just(frozenset({(1, 0)})),
    "txn_first_offsets": st.dictionaries(st.tuples(st.sampled_from(["a", "b"]), _edge_ints),
                                         _edge_ints, max_size=2),
})


@settings(max_examples=500, derandomize=True)
@given(_changes)
def test_the_fast_validity_check_agrees_with_the_detailed_one(changes) -> None:
    # encode_value takes the one-expression check first and calls _validate only when it
    # fails: it must accept nothing _validate refuses, and refuse nothing it accepts.
    from txbroker.coordinator.transaction.records import _plainly_valid, _validate

    v = value(**changes)
    try:
        _validate(v)
        valid = True
    except ValueError:
        valid = False
    assert _plainly_valid(v) == valid
