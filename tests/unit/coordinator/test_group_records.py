"""Versioned msgpack records of __consumer_offsets: round trips, discrimination, evolution."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetKey,
    OffsetValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_key,
    encode_offset_key,
    encode_offset_value,
)

text = st.text(max_size=20)
opt_text = st.none() | text
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

members = st.builds(
    MemberMetadata,
    member_id=text,
    group_instance_id=opt_text,
    client_id=text,
    client_host=text,
    rebalance_timeout_ms=int32,
    session_timeout_ms=int32,
    subscription=st.binary(max_size=50),
    assignment=st.binary(max_size=50),
)
group_values = st.builds(
    GroupMetadataValue,
    protocol_type=text,
    generation_id=int32,
    protocol_name=opt_text,
    leader_id=opt_text,
    current_state_timestamp_ms=st.none() | int64,
    members=st.lists(members, max_size=5).map(tuple),
)
offset_values = st.builds(
    OffsetValue,
    offset=int64,
    leader_epoch=st.none() | int32,
    metadata=text,
    commit_timestamp_ms=int64,
    expire_timestamp_ms=st.none() | int64,
)
keys = st.builds(GroupMetadataKey, text) | st.builds(OffsetKey, text, text, int32)


@settings(max_examples=200)
@given(keys)
def test_keys_round_trip_and_discriminate(key):
    assert decode_key(encode_key(key)) == key


@settings(max_examples=200)
@given(group_values)
def test_group_metadata_value_round_trip(value):
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@settings(max_examples=200)
@given(offset_values)
def test_offset_value_round_trip(value):
    assert decode_offset_value(encode_offset_value(value)) == value


def test_tombstones():
    assert encode_group_metadata_value(None) is None
    assert decode_group_metadata_value(None) is None
    assert encode_offset_value(None) is None
    assert decode_offset_value(None) is None


def test_keys_are_stable_bytes():
    # Compaction compares key bytes: the same logical key must always encode the same.
    assert encode_group_metadata_key("g") == encode_key(GroupMetadataKey("g"))
    assert encode_offset_key("g", "t", 3) == encode_key(OffsetKey("g", "t", 3))
    assert encode_group_metadata_key("g") == msgpack.packb([0, 2, "g"])
    assert encode_offset_key("g", "t", 3) == msgpack.packb([0, 1, "g", "t", 3])
    assert encode_group_metadata_key("g") != encode_offset_key("g", "", 0)


def test_newer_value_versions_with_appended_fields_still_decode():
    v = OffsetValue(5, 1, "m", 100, None)
    raw = msgpack.unpackb(encode_offset_value(v))
    newer = msgpack.packb([1, *raw[1:], "a field from the future"])
    assert decode_offset_value(newer) == v
    g = GroupMetadataValue("consumer", 3, "range", "m1", 7, ())
    raw = msgpack.unpackb(encode_group_metadata_value(g))
    newer = msgpack.packb([4, *raw[1:], {"x": 1}])
    assert decode_group_metadata_value(newer) == g


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb({"a": 1}),
        msgpack.packb([]),
        msgpack.packb([1, 2, "g"]),  # unknown key version
        msgpack.packb([0, 9, "g"]),  # unknown kind
        msgpack.packb([0, 2, 5]),  # group id not a string
        msgpack.packb([0, 1, "g", "t"]),  # offset key too short
        msgpack.packb([0, 1, "g", "t", True]),  # bool is not a partition
    ],
)
def test_bad_keys_are_rejected(data):
    with pytest.raises(ValueError):
        decode_key(data)


@pytest.mark.parametrize(
    "data",
    [
        msgpack.packb([0, 1, None, "m"]),
        msgpack.packb([-1, 1, None, "m", 1, None]),
        msgpack.packb([0, "x", None, "m", 1, None]),
        msgpack.packb([0, 1, None, b"bytes", 1, None]),
    ],
)
def test_bad_offset_values_are_rejected(data):
    with pytest.raises(ValueError):
        decode_offset_value(data)


def test_bad_group_values_are_rejected():
    with pytest.raises(ValueError):
        decode_group_metadata_value(msgpack.packb([0, "consumer", 1, None, None, None, [["m"]]]))
    with pytest.raises(ValueError):
        decode_group_metadata_value(msgpack.packb([0, "consumer", 1, None, None, None, "members"]))


@settings(max_examples=300)
@given(st.binary(max_size=40))
def test_garbage_never_crashes_the_decoders(data):
    for decode in (decode_key, decode_offset_value, decode_group_metadata_value):
        try:
            decode(data)
        except ValueError:
            pass
