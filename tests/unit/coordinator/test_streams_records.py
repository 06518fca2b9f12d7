"""Streams-group records (KIP-1071) in __consumer_offsets: byte-compatible with Kafka
4.4 (golden bytes produced by Kafka's own generated classes and MessageUtil, version-
and type-prefixed as its CoordinatorRecordSerde writes them), round trips, strictness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.reconcile import MemberAssignment, TasksTuple
from txbroker.coordinator.streams.records import (
    GroupMetadata,
    MemberMetadata,
    StreamsRecordKey,
    TargetAssignmentMetadata,
)
from txbroker.coordinator.streams.topology import (
    CopartitionGroup,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)

_TOPOLOGY = StreamsTopology(1, (
    Subtopology("0", ("in",), (), (TopicInfo("cl", 0, 0, (("cleanup.policy", "compact"),)),),
                ("rep",), (), ()),
    Subtopology("1", (), (), (), (), (TopicInfo("rep", 4, 3),), (CopartitionGroup((), (), (0,)),)),
))

# name: (key, value, key hex, value hex) -- hex from a throwaway Java program over the
# Kafka 4.4.0 jars (org.apache.kafka.coordinator.group.generated.*).
GOLDEN = {
    "meta1": (StreamsRecordKey(R.GROUP_METADATA, "grp"),
              GroupMetadata(5, 0x0102030405060708, 3, (("num.standby.replicas", "1"),)),
              "00110003677270",
              "000000000005010203040506070802000400000003011902156e756d2e7374616e6462792e7265"
              "706c69636173023100"),
    "meta2": (StreamsRecordKey(R.GROUP_METADATA, "grp"), GroupMetadata(1, -2),
              "00110003677270", "000000000001fffffffffffffffe00"),
    "member1": (StreamsRecordKey(R.MEMBER_METADATA, "grp", "m1"),
                MemberMetadata("i1", None, "c", "/1.2.3.4", 30000, 2, "p1", ("h", 8080),
                               (("a", "b"),)),
                "0013000367727000026d31",
                "0000036931000263092f312e322e332e3400007530000000020370310102681f90000202610262"
                "0000"),
    "member2": (StreamsRecordKey(R.MEMBER_METADATA, "grp", "m2"),
                MemberMetadata(None, "r", "", "", -1, 0, "p2", None, ()),
                "0013000367727000026d32", "00000002720101ffffffff00000000037032ff0100"),
    "target": (StreamsRecordKey(R.TARGET_ASSIGNMENT_MEMBER, "grp", "m1"),
               TasksTuple(frozenset({("0", 0), ("0", 2), ("1", 1)}), frozenset({("1", 0)})),
               "0015000367727000026d31",
               "00000302300300000000000000020002310200000001000202310200000000000100"),
    "tmeta1": (StreamsRecordKey(R.TARGET_ASSIGNMENT_METADATA, "grp"),
               TargetAssignmentMetadata(7, 1234), "00140003677270",
               "00000000000701000800000000000004d2"),
    "tmeta2": (StreamsRecordKey(R.TARGET_ASSIGNMENT_METADATA, "grp"),
               TargetAssignmentMetadata(7), "00140003677270", "00000000000700"),
    "current": (StreamsRecordKey(R.CURRENT_MEMBER_ASSIGNMENT, "grp", "m1"),
                MemberAssignment(4, 3, 2, TasksTuple(frozenset({("0", 0), ("0", 1)}),
                                                     frozenset({("1", 2)})),
                                 TasksTuple(frozenset({("0", 2)})),
                                 ((("0", 0), 3), (("0", 1), 4), (("0", 2), 2))),
                "0016000367727000026d31",
                "00000000000400000003020202300300000000000000010100090300000003000000040202310200"
                "000002000102023002000000020100050200000002010100"),
    "topology": (StreamsRecordKey(R.TOPOLOGY, "grp"), _TOPOLOGY, "00170003677270",
                 "0000000000010302300203696e010203636c000000000000020f636c65616e75702e706f6c6963"
                 "7908636f6d706163740000020472657001010002310101010102047265700000000400030100020"
                 "101020000000000"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_bytes(name: str) -> None:
    key, value, key_hex, value_hex = GOLDEN[name]
    k, v = R.encode_record((key, value))
    assert k.hex() == key_hex
    assert v is not None and v.hex() == value_hex
    assert R.decode_record(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == (key, value)


def test_tombstone() -> None:
    key = StreamsRecordKey(R.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert R.encode_record((key, None)) == (R.encode_key(key), None)
    assert R.decode_record(R.encode_key(key), None) == (key, None)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_malformed_values_raise_value_error(name: str) -> None:
    key, _, _, value_hex = GOLDEN[name]
    data = bytes.fromhex(value_hex)
    for cut in range(len(data)):
        with pytest.raises(ValueError):
            R.decode_value(key.record_type, data[:cut])
    with pytest.raises(ValueError):
        R.decode_value(key.record_type, data + b"\x00")


def test_unknown_key_type_and_version() -> None:
    with pytest.raises(ValueError):
        R.decode_key(bytes.fromhex("00120003677270"))  # 18: gone from Kafka 4.4
    with pytest.raises(ValueError):
        R.decode_value(R.GROUP_METADATA, bytes.fromhex("0001000000010000000000000000000"
                                                       "0"))


def test_unknown_tagged_fields_are_skipped() -> None:
    # StreamsGroupMetadataValue with an unknown tag 9 after a known one.
    value = bytes.fromhex("0000" "00000001" "0000000000000002" "02" "00" "04" "00000003"
                          "09" "01" "ff")
    assert R.decode_value(R.GROUP_METADATA, value) == GroupMetadata(1, 2, 3)


_tasks = st.frozensets(st.tuples(st.sampled_from(["0", "1", "10"]), st.integers(0, 40)),
                       max_size=12)
_name = st.text(min_size=0, max_size=8)


@settings(max_examples=60)
@given(epoch=st.integers(-2, 2**31 - 1), prev=st.integers(-2, 2**31 - 1),
       state=st.sampled_from([1, 2, 3]), a=_tasks, s=_tasks, w=_tasks, pa=_tasks,
       epochs=st.integers(0, 99))
def test_current_assignment_round_trip(epoch, prev, state, a, s, w, pa, epochs) -> None:
    pa = pa - a
    value = MemberAssignment(epoch, prev, state, TasksTuple(a, s, w), TasksTuple(pa),
                             tuple(sorted((t, epochs) for t in a | pa)))
    data = R.encode_value(R.CURRENT_MEMBER_ASSIGNMENT, value)
    assert R.decode_value(R.CURRENT_MEMBER_ASSIGNMENT, data) == value


@settings(max_examples=60)
@given(instance=st.none() | _name, rack=st.none() | _name, client=_name, host=_name,
       timeout=st.integers(-1, 2**31 - 1), process=_name,
       endpoint=st.none() | st.tuples(_name, st.integers(0, 65535)),
       tags=st.lists(st.tuples(_name, _name), max_size=3))
def test_member_metadata_round_trip(instance, rack, client, host, timeout, process, endpoint,
                                    tags) -> None:
    value = MemberMetadata(instance, rack, client, host, timeout, 3, process, endpoint,
                           tuple(tags))
    data = R.encode_value(R.MEMBER_METADATA, value)
    assert R.decode_value(R.MEMBER_METADATA, data) == value


@settings(max_examples=40)
@given(epoch=st.integers(0, 2**31 - 1), h=st.integers(-2**63, 2**63 - 1),
       validated=st.integers(-1, 9), configs=st.none() | st.lists(st.tuples(_name, _name),
                                                                   max_size=2))
def test_group_metadata_round_trip(epoch, h, validated, configs) -> None:
    value = GroupMetadata(epoch, h, validated, None if configs is None else tuple(configs))
    assert R.decode_value(R.GROUP_METADATA, R.encode_value(R.GROUP_METADATA, value)) == value
