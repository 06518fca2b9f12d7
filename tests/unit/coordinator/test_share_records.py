"""``__share_group_state`` records (``coordinator/share/records.py``) and the share
coordinator's merge of state batches (``coordinator/share/state.py``).

The golden bytes were produced by Kafka 4.4.0's own ShareCoordinatorRecordSerde
(kafka-share-coordinator-4.4.0.jar, the generated ShareSnapshotKey/Value and
ShareUpdateKey/Value classes) from the values written next to them."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from txbroker.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    decode_key,
    decode_snapshot_value,
    decode_update_value,
    decode_value,
    encode_key,
    encode_snapshot_value,
    encode_update_value,
    replay,
)
from txbroker.coordinator.share.state import (
    PersistedShareState,
    ShareStateWrite,
    StateBatch,
    apply_write,
    combine_state_batches,
)

TOPIC = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
KAFKA_SNAPSHOT_KEY = "0000000267310102030405060708090a0b0c0d0e0f1000000003"
KAFKA_UPDATE_KEY = "0001000267310102030405060708090a0b0c0d0e0f1000000003"
KAFKA_SNAPSHOT_VALUE = (
    "000000000002000000010000000700000000000000640000018bcfe568000000018bcfe569f403"
    "00000000000000640000000000000068000001000000000000000069000000000000006c02000200"
    "01000400000004")
KAFKA_SNAPSHOT_VALUE_NO_COUNT = (
    "00000000000000000000ffffffffffffffffffffffff0000000000000005000000000000000501"
    "00")
KAFKA_UPDATE_VALUE = (
    "00000000000200000007000000000000006902000000000000006d000000000000006d04000500"
    "01000400000000")


def test_keys_are_kafkas_bytes() -> None:
    snap = ShareStateKey(SHARE_SNAPSHOT, "g1", TOPIC, 3)
    upd = ShareStateKey(SHARE_UPDATE, "g1", TOPIC, 3)
    assert encode_key(snap).hex() == KAFKA_SNAPSHOT_KEY
    assert encode_key(upd).hex() == KAFKA_UPDATE_KEY
    assert decode_key(bytes.fromhex(KAFKA_SNAPSHOT_KEY)) == snap
    assert decode_key(bytes.fromhex(KAFKA_UPDATE_KEY)) == upd


def test_values_are_kafkas_bytes() -> None:
    snap = ShareSnapshotValue(2, 1, 7, 100, 1700000000000, 1700000000500,
                              (StateBatch(100, 104, 0, 1), StateBatch(105, 108, 2, 2)), 4)
    assert encode_snapshot_value(snap).hex() == KAFKA_SNAPSHOT_VALUE
    assert decode_snapshot_value(bytes.fromhex(KAFKA_SNAPSHOT_VALUE)) == snap
    bare = ShareSnapshotValue(0, 0, -1, -1, 5, 5)
    assert encode_snapshot_value(bare).hex() == KAFKA_SNAPSHOT_VALUE_NO_COUNT
    assert decode_snapshot_value(bytes.fromhex(KAFKA_SNAPSHOT_VALUE_NO_COUNT)) == bare
    upd = ShareUpdateValue(2, 7, 105, (StateBatch(109, 109, 4, 5),), 0)
    assert encode_update_value(upd).hex() == KAFKA_UPDATE_VALUE
    assert decode_update_value(bytes.fromhex(KAFKA_UPDATE_VALUE)) == upd


_batches = st.lists(st.builds(StateBatch, st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1),
                              st.integers(-128, 127), st.integers(-2**15, 2**15 - 1)), max_size=5).map(tuple)
_i32 = st.integers(-2**31, 2**31 - 1)
_i64 = st.integers(-2**63, 2**63 - 1)


@given(st.builds(ShareSnapshotValue, _i32, _i32, _i32, _i64, _i64, _i64, _batches, _i32))
def test_snapshot_values_round_trip(value: ShareSnapshotValue) -> None:
    assert decode_snapshot_value(encode_snapshot_value(value)) == value


@given(st.builds(ShareUpdateValue, _i32, _i32, _i64, _batches, _i32),
       st.text(max_size=20), st.uuids(), _i32)
def test_update_values_and_keys_round_trip(value: ShareUpdateValue, group: str, topic: uuid.UUID,
                                           partition: int) -> None:
    assert decode_update_value(encode_update_value(value)) == value
    key = ShareStateKey(SHARE_UPDATE, group, topic, partition)
    assert decode_key(encode_key(key)) == key


def test_malformed_records_raise_value_error() -> None:
    good = bytes.fromhex(KAFKA_SNAPSHOT_VALUE)
    for bad in (good[:-1], good + b"\0", b"\x00\x01" + good[2:], b"", b"\x00"):
        with pytest.raises(ValueError):
            decode_snapshot_value(bad)
    with pytest.raises(ValueError):
        decode_key(bytes.fromhex(KAFKA_SNAPSHOT_KEY)[:-1])
    with pytest.raises(ValueError):
        decode_key(b"\x00\x05" + bytes.fromhex(KAFKA_SNAPSHOT_KEY)[2:])
    with pytest.raises(ValueError):
        decode_value(ShareStateKey(SHARE_UPDATE, "g", TOPIC, 0), None)
    # a huge declared batch count is refused before any allocation
    with pytest.raises(ValueError):
        decode_update_value(bytes.fromhex("0000" "00000000" "00000000" "0000000000000000" "ffffffff0f00"))


def test_unknown_tagged_fields_are_skipped() -> None:
    upd = bytes.fromhex(KAFKA_UPDATE_VALUE)
    # replace the tag section (1 field: tag 0) with 2 fields: tag 0, then tag 5 (2 bytes)
    extra = upd[:-7] + bytes.fromhex("02" "00" "04" "00000009" "05" "02" "abcd")
    assert decode_update_value(extra).delivery_complete_count == 9


def test_combine_keeps_the_further_state_and_prunes() -> None:
    so_far = (StateBatch(10, 19, 0, 1),)
    new = (StateBatch(12, 13, 2, 1), StateBatch(15, 25, 0, 2))
    assert combine_state_batches(so_far, new, 11) == (
        StateBatch(11, 11, 0, 1), StateBatch(12, 13, 2, 1), StateBatch(14, 14, 0, 1),
        StateBatch(15, 25, 0, 2))
    # an older write arriving later does not undo a further state
    assert combine_state_batches((StateBatch(0, 4, 2, 1),), (StateBatch(0, 4, 0, 1),), 0) == \
        (StateBatch(0, 4, 2, 1),)
    # adjacent equal ranges coalesce
    assert combine_state_batches((StateBatch(0, 4, 4, 1),), (StateBatch(5, 9, 4, 1),), -1) == \
        (StateBatch(0, 9, 4, 1),)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), st.sampled_from((0, 2, 4)),
                          st.integers(0, 4)), max_size=8),
       st.integers(-1, 20))
def test_combine_matches_a_per_offset_oracle(raw, start: int) -> None:
    batches = [StateBatch(a, a + n, s, c) for a, n, s, c in raw]
    got = combine_state_batches(batches[:3], batches[3:], start)
    expect: dict[int, tuple[int, int]] = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            if start == -1 or o >= start:
                expect[o] = max(expect.get(o, (-1, -1)), (b.delivery_count, b.delivery_state))
    have = {o: (b.delivery_count, b.delivery_state) for b in got
            for o in range(b.first_offset, b.last_offset + 1)}
    assert have == expect
    for x, y in zip(got, got[1:], strict=False):
        assert x.last_offset < y.first_offset
        assert not (x.last_offset + 1 == y.first_offset and x.delivery_state == y.delivery_state
                    and x.delivery_count == y.delivery_count)


def test_replay_snapshot_then_updates() -> None:
    snap = ShareSnapshotValue(0, 3, 1, 10, 0, 0, (StateBatch(10, 14, 0, 1),), 0)
    state = replay(None, snap)
    state = replay(state, ShareUpdateValue(0, 1, -1, (StateBatch(10, 11, 2, 1),), 2))
    assert state == PersistedShareState(3, 1, 10, 2, (StateBatch(10, 11, 2, 1), StateBatch(12, 14, 0, 1)))
    state = replay(state, ShareUpdateValue(0, -1, 12, (StateBatch(12, 12, 4, 1),), 1))
    assert state == PersistedShareState(3, 1, 12, 1, (StateBatch(12, 12, 4, 1), StateBatch(13, 14, 0, 1)))
    assert replay(state, None) is None


def test_apply_write_never_moves_the_start_offset_back() -> None:
    state = PersistedShareState(0, 0, 20, 3, (StateBatch(20, 22, 2, 1),))
    new = apply_write(state, ShareStateWrite(0, 2, 15, 0, (StateBatch(23, 24, 0, 1),)))
    assert (new.start_offset, new.leader_epoch, new.delivery_complete_count) == (20, 2, 3)
    assert new.state_batches == (StateBatch(20, 22, 2, 1), StateBatch(23, 24, 0, 1))
