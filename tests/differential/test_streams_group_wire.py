"""StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071) on the wire, on txbroker and
on Apache Kafka 4.4: the same raw requests get the same error codes, messages and
statuses (a missing source topic, Kafka's internal topics and invalid names in a
topology, an unknown member, a fenced epoch, a group id of another type)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.integration.test_streams_groups_wire import describe, heartbeat, join_group, topology
from tests.integration.txn_util import unique

from .test_kafka_streams_protocol import streams_broker  # noqa: F401  (the fixture)


def statuses(r) -> list[tuple[int, str]]:
    return [(s.status_code, s.status_detail) for s in r.status or ()]


def test_heartbeat_errors_and_statuses_as_kafka(streams_broker):  # noqa: F811
    broker = streams_broker
    group, source = unique("sg"), unique("src")
    other, bad, missing, classic = unique("sg"), unique("sg"), unique("nope"), unique("classic")
    for g in (group, other, bad, missing, classic):
        broker.wait_coordinator(g, key_type=0)  # Kafka creates __consumer_offsets first
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
