"""StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071) on the wire, on txbroker and
on Apache Kafka 4.4: the same raw requests get the same error codes, messages and
statuses (a missing source topic, Kafka's internal topics and invalid names in a
topology, an unknown member, a fenced epoch, a group id of another type)."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.integration.test_streams_groups_wire import (
    describe,
    heartbeat,
    join_group,
    join_until_stable,
    topology,
)
from tests.integration.txn_util import unique

from .test_kafka_streams_protocol import streams_broker  # noqa: F401  (the fixture)

RETRIABLE = (E.coordinator_load_in_progress, E.coordinator_not_available, E.not_coordinator)


def ready(broker, *groups: str) -> None:
    """As a client retries: until each group's coordinator serves it (Kafka loads a
    partition of __consumer_offsets after FindCoordinator already answers)."""
    client = broker.raw()
    try:
        for g in groups:
            broker.wait_coordinator(g, key_type=0)
            deadline = time.monotonic() + 30
            while describe(client, g)[0].error_code in RETRIABLE:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        client.close()


def statuses(r) -> list[tuple[int, str]]:
    return [(s.status_code, s.status_detail) for s in r.status or ()]


def test_heartbeat_errors_and_statuses_as_kafka(streams_broker):  # noqa: F811
    broker = streams_broker
    group, source = unique("sg"), unique("src")
    other, bad, missing, classic = unique("sg"), unique("sg"), unique("nope"), unique("classic")
    ready(broker, group, other, bad, missing, classic)
    client = broker.raw()
    try:
        r = heartbeat(client, group, "m1", 0, topo=topology(source=source,
                                                              changelog=f"{group}-changelog"))
        assert r.error_code == 0
        assert statuses(r) == [(1, f"Source topics {source} are missing.")]
        (g,) = describe(client, group)
        assert (g.error_code, g.group_state, len(g.members)) == (0, "NotReady", 1)
        lm = request_module(16, 5)
        listed = client.request(16, 5, build(lm.ListGroupsRequest, states_filter=(),
                                             types_filter=("streams",)))
        assert [(x.protocol_type, x.group_state, x.group_type) for x in listed.groups
                if x.group_id == group] == [("streams", "NotReady", "streams")]
        dm = request_module(15, 6)
        (d,) = client.request(15, 6, build(dm.DescribeGroupsRequest, groups=(group,),
                                           include_authorized_operations=False)).groups
        assert (d.error_code, d.error_message, d.group_state) == (
            E.group_id_not_found, f"Group {group} is not a classic group.", "Dead")
        assert heartbeat(client, group, "nobody", 1, owned=()).error_code == E.unknown_member_id
        assert heartbeat(client, group, "m1", r.member_epoch + 1,
                         owned=()).error_code == E.fenced_member_epoch
        r = heartbeat(client, other, "m1", 0, topo=topology(source="__consumer_offsets"))
        assert (r.error_code, r.error_message) == (
            E.streams_invalid_topology, "Use of Kafka internal topics __consumer_offsets in a "
            "Kafka Streams topology is prohibited.")
        r = heartbeat(client, bad, "m1", 0, topo=topology(source="a b"))
        assert (r.error_code, r.error_message) == (
            E.streams_invalid_topology, "Topic names a b are not valid topic names.")
        (g,) = describe(client, missing)
        assert (g.error_code, g.error_message) == (E.group_id_not_found,
                                                   f"Group {missing} not found.")
        j = join_group(client, classic)
        assert j.error_code == E.member_id_required
        assert join_group(client, classic, j.member_id).error_code == 0
        r = heartbeat(client, classic, "m1", 0)
        assert (r.error_code, r.error_message) == (E.group_id_not_found,
                                                   f"Group {classic} is not a streams group.")
    finally:
        client.close()


def test_offset_commit_by_a_streams_member_as_kafka(streams_broker):  # noqa: F811
    broker = streams_broker
    group, source = unique("sgc"), unique("src")
    ready(broker, group)
    broker.create_topic(source, 1)
    broker.create_topic(f"{group}-changelog", 1)
    client = broker.raw()
    try:
        epoch, _owned = join_until_stable(client, group, "m1", topo=topology(
            source=source, changelog=f"{group}-changelog"))

        def commit(member: str, member_epoch: int, version: int = 9) -> int:
            m = request_module(8, version)
            r = client.request(8, version, build(
                m.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=member_epoch,
                member_id=member, group_instance_id=None, retention_time=-1, topics=(build(
                    m.OffsetCommitRequestTopic, name=source, partitions=(build(
                        m.OffsetCommitRequestPartition, partition_index=0, committed_offset=1,
                        committed_leader_epoch=-1, committed_metadata=None),)),)))
            return r.topics[0].partitions[0].error_code

        assert commit("m1", epoch + 1) == E.stale_member_epoch
        assert commit("other", epoch) == E.unknown_member_id
        assert commit("m1", epoch, version=8) == E.unsupported_version
        assert commit("m1", epoch) == 0
    finally:
        client.close()
