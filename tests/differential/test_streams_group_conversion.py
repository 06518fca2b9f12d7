"""One group id, several group types (KIP-1071), on txbroker and on Apache Kafka 4.4.0:
a StreamsGroupHeartbeat join on the id of an Empty classic group (committed offsets
only), a classic group with a member, a consumer group (empty and not) and a share
group; and the other way round, a classic JoinGroup, a ConsumerGroupHeartbeat and a
ShareGroupHeartbeat on a streams group, empty and not. The same error codes and
messages, the same committed offsets afterwards and the same DescribeGroups / ListGroups
answers on both brokers.

Kafka 4.4 (GroupMetadataManager): the streams join deletes an Empty classic group
(maybeDeleteEmptyClassicGroup: the group's records only, its offsets stay) and makes the
id a streams group; every other group type is "not a streams group". A classic JoinGroup
deletes an Empty streams group the same way (classicGroupJoinToClassicGroup:
maybeDeleteEmptyStreamsGroup) and the id becomes a classic group; a consumer or share
heartbeat converts nothing."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.differential import share_util
from tests.integration.test_streams_groups_wire import heartbeat, join_group, topology
from tests.integration.tools.test_streams_group_tools import commit_offset
from tests.integration.txn_util import unique

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from .test_streams_group_bounds import big_topology
from .test_streams_group_wire import ready

CONFIG = {
    "txbroker": {**COMMON_CONFIG, "txbroker.streams.version": "1",
                 "txbroker.share.version": "1"},
    "kafka": {**COMMON_CONFIG, "group.streams.initial.rebalance.delay.ms": "0"},
}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def broker(request, tmp_path_factory) -> Iterator[Broker]:
    yield from running_broker(request.param, tmp_path_factory, CONFIG[request.param])


def simple_commit(client, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v9 as a simple consumer does (no member, generation -1)."""
    m = request_module(8, 9)
    r = client.request(8, 9, build(
        m.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(build(
            m.OffsetCommitRequestTopic, name=topic, partitions=(build(
                m.OffsetCommitRequestPartition, partition_index=0, committed_offset=offset,
                committed_leader_epoch=-1, committed_metadata=None),)),)))
    return r.topics[0].partitions[0].error_code


def committed(client, group: str, topic: str) -> tuple[int, int]:
    """(error, committed offset of partition 0) by OffsetFetch v8."""
    m = request_module(9, 8)
    (g,) = client.request(9, 8, build(
        m.OffsetFetchRequest, require_stable=False, groups=(build(
            m.OffsetFetchRequestGroup, group_id=group, topics=(build(
                m.OffsetFetchRequestTopics, name=topic, partition_indexes=(0,)),)),))).groups
    return g.error_code, g.topics[0].partitions[0].committed_offset


def seen(client, group: str) -> tuple:
    """What DescribeGroups v5 and ListGroups v5 show of ``group``: (error, message, state,
    protocol type) and the listing's (state, group type, protocol type)."""
    dm = request_module(15, 6)
    (d,) = client.request(15, 6, build(dm.DescribeGroupsRequest, groups=(group,),
                                       include_authorized_operations=False)).groups
    lm = request_module(16, 5)
    listed = client.request(16, 5, build(lm.ListGroupsRequest, states_filter=(),
                                         types_filter=())).groups
    return ((d.error_code, d.error_message, d.group_state, d.protocol_type),
            [(x.group_state, x.group_type, x.protocol_type) for x in listed
             if x.group_id == group])


def consumer_heartbeat(client, group: str, member: str, epoch: int, topic: str):
    m = request_module(68, 1)
    return client.request(68, 1, build(
        m.ConsumerGroupHeartbeatRequest, group_id=group, member_id=member, member_epoch=epoch,
        instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=5 if epoch == 0 else -1),
        subscribed_topic_names=(topic,) if epoch == 0 else None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=() if epoch == 0 else None))


def other_joins(client, consumer_group: str, share_group: str, topic: str) -> None:
    """A ConsumerGroupHeartbeat join on ``consumer_group`` and a ShareGroupHeartbeat join
    on ``share_group`` (both streams groups) are refused with Kafka's messages."""
    c = consumer_heartbeat(client, consumer_group, str(uuid.uuid4()), 0, topic)
    s = share_util.heartbeat(client, share_group, str(uuid.uuid4()), 0, (topic,))
    assert [(c.error_code, c.error_message), (s.error_code, s.error_message)] == [
        (E.group_id_not_found, f"Group {consumer_group} is not a consumer group."),
        (E.group_id_not_found, f"Group {share_group} is not a share group.")]


def streams_join(client, group: str, topic: str):
    r = heartbeat(client, group, "m1", 0, topo=topology(source=topic,
                                                        changelog=f"{group}-changelog"))
    return r, (r.error_code, r.error_message)


def test_a_group_id_changes_type_as_in_kafka(broker):
    topic = broker.topic("conv", 1)
    names = ("classic", "refused", "busy", "cg", "cgempty", "share", "sg", "sgempty", "sgcg", "sgshare")
    g = {n: unique(n) for n in names}
    ready(broker, *g.values())
    client = broker.raw()
    not_streams = E.group_id_not_found, "Group {} is not a streams group."
    try:
        # (a) An Empty classic group (a simple consumer's offsets): a streams group now.
        assert simple_commit(client, g["classic"], topic, 5) == 0
        assert seen(client, g["classic"]) == ((0, None, "Empty", ""),
                                              [("Empty", "classic", "")])
        r, answer = streams_join(client, g["classic"], topic)
        assert answer == (0, None)
        assert committed(client, g["classic"], topic) == (0, 5)
        assert seen(client, g["classic"]) == (
            (E.group_id_not_found, f"Group {g['classic']} is not a classic group.", "Dead",
             ""), [("NotReady", "streams", "streams")])
        # The new streams group's member commits over the simple consumer's offset.
        commit_offset(client, g["classic"], "m1", r.member_epoch, topic, 0, 6)
        assert committed(client, g["classic"], topic) == (0, 6)

        # ... but not by a join that is refused (a topology too large for a record):
        # the classic group and its offsets stay.
        assert simple_commit(client, g["refused"], topic, 4) == 0
        r = heartbeat(client, g["refused"], "m1", 0, topo=big_topology(2500))
        assert (r.error_code, r.error_message) == (E.unknown_server_error, None)
        described, listed = seen(client, g["refused"])
        # (Kafka 4.4 lists the group twice after the refused write: not copied.)
        assert (described, set(listed)) == ((0, None, "Empty", ""), {("Empty", "classic", "")})
        assert committed(client, g["refused"], topic) == (0, 4)

        # (b) A classic group with a member stays classic.
        member = join_group(client, g["busy"]).member_id
        assert join_group(client, g["busy"], member).error_code == 0
        _r, answer = streams_join(client, g["busy"], topic)
        assert answer == (not_streams[0], not_streams[1].format(g["busy"]))

        # (c) A consumer group, with a member, then empty, stays a consumer group.
        for name in ("cg", "cgempty"):
            c = consumer_heartbeat(client, g[name], str(uuid.uuid4()), 0, topic)
            assert c.error_code == 0, c
            if name == "cgempty":
                assert simple_commit(client, g[name], topic, 7) == E.unknown_member_id
                assert consumer_heartbeat(client, g[name], c.member_id, -1,
                                          topic).error_code == 0
            _r, answer = streams_join(client, g[name], topic)
            assert answer == (not_streams[0], not_streams[1].format(g[name]))
        assert seen(client, g["cgempty"])[1] == [("Empty", "consumer", "consumer")]

        # (d) A share group stays a share group.
        s = share_util.heartbeat(client, g["share"], str(uuid.uuid4()), 0, (topic,))
        assert s.error_code == 0, s
        _r, answer = streams_join(client, g["share"], topic)
        assert answer == (not_streams[0], not_streams[1].format(g["share"]))

        # (e) A streams group with a member: no other protocol joins it.
        for name in ("sg", "sgempty", "sgcg", "sgshare"):
            r, answer = streams_join(client, g[name], topic)
            assert answer == (0, None)
            commit_offset(client, g[name], "m1", r.member_epoch, topic, 0, 3)
        j = join_group(client, g["sg"])
        assert (j.error_code, j.member_id) == (E.inconsistent_group_protocol, "")
        other_joins(client, g["sg"], g["sg"], topic)

        # (f) An Empty streams group: a classic JoinGroup makes it a classic group (its
        # offsets stay); a consumer or share heartbeat is refused.
        for name in ("sgempty", "sgcg", "sgshare"):
            assert heartbeat(client, g[name], "m1", -1).error_code == 0
        assert seen(client, g["sgempty"])[1] == [("Empty", "streams", "streams")]
        j = join_group(client, g["sgempty"])
        assert j.error_code == E.member_id_required
        assert committed(client, g["sgempty"], topic) == (0, 3)
        assert seen(client, g["sgempty"]) == ((0, None, "Empty", ""), [("Empty", "classic", "")])
        other_joins(client, g["sgcg"], g["sgshare"], topic)
        for name in ("sgcg", "sgshare"):
            assert seen(client, g[name])[1] == [("Empty", "streams", "streams")]
            assert committed(client, g[name], topic) == (0, 3)
    finally:
        client.close()
