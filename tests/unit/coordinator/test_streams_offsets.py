"""Offset commits and fetches of streams-group members (coordinator/streams/offsets.py),
as Kafka 4.4's StreamsGroup.validateOffsetCommit / validateOffsetFetch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.streams.group import StreamsGroup
from txbroker.coordinator.streams.offsets import validate_offset_commit, validate_offset_fetch
from txbroker.coordinator.streams.reconcile import MemberAssignment, TasksTuple
from txbroker.coordinator.streams.records import MemberMetadata
from txbroker.coordinator.streams.topology import StreamsTopology, Subtopology, TopicInfo


def group() -> StreamsGroup:
    """Member m1 at epoch 5 holds task (0, 0) since epoch 3 and (0, 1) since epoch 5;
    subtopology 0 reads "in" and the repartition topic "rep"."""
    g = StreamsGroup("app")
    g.p.topology = StreamsTopology(1, (Subtopology(
        "0", ("in",), repartition_source_topics=(TopicInfo("rep"),)),))
    g.p.members["m1"] = MemberMetadata(None, None, "c", "/h", 30000, 1, "p1", None, ())
    g.p.current["m1"] = MemberAssignment(
        5, 4, assigned=TasksTuple(frozenset({("0", 0), ("0", 1)})),
        active_epochs=((("0", 0), 3), (("0", 1), 5)))
    return g


def test_the_member_epoch_decides():
    g = group()
    assert validate_offset_commit(g, "m1", 5, False, 9, [("in", 0), ("in", 1)]) == 0
    assert validate_offset_commit(g, "m1", 6, False, 9, [("in", 0)]) == E.stale_member_epoch
    assert validate_offset_commit(g, "m1", 6, True, 0, [("in", 0)]) == E.illegal_generation
    assert validate_offset_commit(g, "m2", 5, False, 9, [("in", 0)]) == E.unknown_member_id
    assert validate_offset_commit(g, "m1", 5, False, 8, [("in", 0)]) == E.unsupported_version
    # An older epoch commits only what was granted at or before it.
    assert validate_offset_commit(g, "m1", 4, False, 9, [("in", 0), ("rep", 0)]) == 0
    assert validate_offset_commit(g, "m1", 4, False, 9, [("in", 1)]) == E.stale_member_epoch
    assert validate_offset_commit(g, "m1", 4, False, 9, [("other", 0)]) == E.stale_member_epoch
    assert validate_offset_fetch(g, "m1", 5) == 0
    assert validate_offset_fetch(g, "m1", 4) == E.stale_member_epoch
    assert validate_offset_fetch(g, "m2", 5) == E.unknown_member_id
    assert validate_offset_fetch(g, None, -1) == 0


def test_an_empty_group_takes_admin_commits():
    g = StreamsGroup("app")
    assert validate_offset_commit(g, "", -1, False, 9, [("in", 0)]) == 0
    assert validate_offset_commit(group(), "", -1, False, 9, [("in", 0)]) == E.unknown_member_id
    assert validate_offset_commit(group(), "", -1, True, 0, [("in", 0)]) == 0
