"""StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071) on the wire, on txbroker and
on Apache Kafka 4.4: the same raw requests get the same error codes, messages and
statuses (a missing source topic, Kafka's internal topics and invalid names in a
topology, an unknown member, a fenced epoch, a group id of another type)."""

from __future__ import annotations

import dataclasses
import time

from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.integration.test_streams_groups_wire import (
    HB,
    active,
    describe,
    heartbeat,
    heartbeat_request,
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


def new_group(broker, prefix: str, partitions: int) -> tuple[str, str]:
    """A group id whose coordinator serves it, with its source topic and the changelog
    topic of ``topology(source, changelog=f"{group}-changelog")`` created."""
    group, source = unique(prefix), unique("src")
    ready(broker, group)
    broker.create_topic(source, partitions)
    broker.create_topic(f"{group}-changelog", partitions)
    return group, source


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
    group, source = new_group(broker, "sgc", 1)
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


def test_v1_fields_as_kafka(streams_broker):  # noqa: F811
    """Version 1 of both APIs (Kafka 4.4 serves 0-1): the group's acceptable recovery
    lag, MISSING_CLIENT_TAGS for a member without a tag of the group's
    streams.rack.aware.assignment.tags, -1 in an error answer; describe v1's assignor
    name and topology description status (no description plugin on either broker)."""
    from tests.differential.test_group_configs import SET, _alter, _describe_settled
    from tests.integration.test_streams_group_configs import DESCRIBE1, HB1, as_v1
    from tests.integration.test_streams_groups_wire import heartbeat_request

    broker = streams_broker
    group, source = unique("sg"), unique("src")
    ready(broker, group)
    client = broker.raw()
    try:
        assert _alter(client, group, [("streams.rack.aware.assignment.tags", SET, "zone,rack"),
                                      ("streams.acceptable.recovery.lag", SET, "12345")]) == (0, None)
        _describe_settled(client, group, "streams.acceptable.recovery.lag", "12345")
        request = as_v1(heartbeat_request(group, "m1", 0),
                        topology=topology(source=source, changelog=f"{group}-changelog"),
                        client_tags=(HB1.KeyValue(key="rack", value="r1"),))
        r = client.request(88, 1, request)
        assert (r.error_code, r.acceptable_recovery_lag, r.topology_description_required) == (
            0, 12345, False), r
        assert statuses(r) == [
            (1, f"Source topics {source} are missing."),
            (6, "Missing required client tags for rack-aware standby assignment: [zone]. "
                "Configure them via 'client.tag.<tagKey>' in your Streams config.")]
        r = client.request(88, 1, as_v1(request, member_id="nobody", member_epoch=3,
                                        topology=None))
        assert (r.error_code, r.acceptable_recovery_lag) == (E.unknown_member_id, -1)
        for include, status in ((True, 1), (False, 0)):
            (g,) = client.request(89, 1, DESCRIBE1.StreamsGroupDescribeRequest(
                group_ids=(group,), include_authorized_operations=False,
                include_topology_description=include)).groups
            assert (g.error_code, g.assignor_name, g.topology_description_status,
                    g.topology_description) == (0, "sticky", status, None)
    finally:
        client.close()


def test_initial_rebalance_delay_and_assignment_interval_as_kafka(streams_broker):  # noqa: F811
    """A member joining an Empty group starts the group's streams.initial.rebalance.delay.ms
    (here 500 ms): until it ends the members are at the group's first assignment epoch
    (1) with no tasks and the ASSIGNMENT_DELAYED status (5); then the tasks are
    assigned. A member joining within the group's streams.assignment.interval.ms (here
    2 s) of that assignment waits for the interval the same way, with its own detail."""
    from tests.differential.test_group_configs import SET, _alter, _describe_settled

    broker = streams_broker
    group, source = new_group(broker, "sgd", 2)
    client = broker.raw()
    try:
        assert _alter(client, group, [("streams.initial.rebalance.delay.ms", SET, "500"),
                                      ("streams.assignment.interval.ms", SET, "2000")]) == (0, None)
        _describe_settled(client, group, "streams.assignment.interval.ms", "2000")
        topo = topology(source=source, changelog=f"{group}-changelog")
        initial = [(5, "Assignment delayed due to the configured initial rebalance delay.")]
        interval = [(5, "Assignment delayed due to the configured assignment interval.")]
        began = time.monotonic()
        for m in ("m1", "m2"):
            r = heartbeat(client, group, m, 0, topo=topo)
            assert (r.error_code, r.member_epoch, statuses(r), r.active_tasks) == (
                0, 1, initial, ()), r
        (g,) = describe(client, group)
        assert (g.group_state, g.group_epoch, g.assignment_epoch,
                sorted((m.member_id, m.member_epoch) for m in g.members)) == (
            "Assigning", 3, 1, [("m1", 1), ("m2", 1)])
        epochs, owned = {"m1": 1, "m2": 1}, {"m1": set(), "m2": set()}
        while not (owned["m1"] and owned["m2"]):
            assert time.monotonic() < began + 15, (epochs, owned)
            for m in ("m1", "m2"):
                r = heartbeat(client, group, m, epochs[m], owned=owned[m])
                assert r.error_code == 0, r
                if r.active_tasks is not None:
                    owned[m] = active(r)
                if not owned[m]:
                    assert (r.member_epoch, statuses(r)) in ((1, initial), (3, [])), r
                epochs[m] = r.member_epoch
            time.sleep(0.05)
        assert time.monotonic() - began >= 0.45
        assert epochs == {"m1": 3, "m2": 3} and owned["m1"] | owned["m2"] == {("0", 0), ("0", 1)}
        (g,) = describe(client, group)
        assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Stable", 3, 3)
        assigned = time.monotonic()
        r = heartbeat(client, group, "m3", 0, topo=topo)
        assert (r.error_code, r.member_epoch, statuses(r), r.active_tasks) == (
            0, 3, interval, ()), r
        (g,) = describe(client, group)
        assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Assigning", 4, 3)
        while statuses(r):
            assert statuses(r) == interval and r.member_epoch == 3, r
            assert time.monotonic() < assigned + 15
            time.sleep(0.1)
            r = heartbeat(client, group, "m3", r.member_epoch, owned=set())
            assert r.error_code == 0, r
        assert time.monotonic() - assigned >= 1.0  # the interval, not the next heartbeat
        assert r.member_epoch == 4
        (g,) = describe(client, group)
        assert (g.group_epoch, g.assignment_epoch) == (4, 4)
        # Once the group is Empty again, the next member to join waits the delay again.
        for m in ("m1", "m2", "m3"):
            assert heartbeat(client, group, m, -1).error_code == 0
        (g,) = describe(client, group)
        assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Empty", 7, 7)
        r = heartbeat(client, group, "m4", 0, topo=topo)
        assert (r.member_epoch, statuses(r), r.active_tasks) == (7, initial, ()), r
    finally:
        client.close()


def _heartbeat_with_endpoint(client, group, member, epoch, endpoint=None, info=0,
                             offsets=None, end_offsets=None, **kwargs):
    """StreamsGroupHeartbeat with a user endpoint (application.server), the member's
    EndpointInformationEpoch and its TaskOffsets / TaskEndOffsets ((subtopology,
    partition) -> offset)."""
    import dataclasses

    from tests.integration.test_streams_groups_wire import HB, heartbeat_request

    def task_offsets(pairs):
        return None if pairs is None else tuple(
            HB.TaskOffset(subtopology_id=s, partition=p, offset=o)
            for (s, p), o in sorted(pairs.items()))

    request = heartbeat_request(group, member, epoch, **kwargs)
    return client.request(88, 0, dataclasses.replace(
        request, endpoint_information_epoch=info, task_offsets=task_offsets(offsets),
        task_end_offsets=task_offsets(end_offsets),
        user_endpoint=None if endpoint is None else HB.Endpoint(host=endpoint[0],
                                                                port=endpoint[1])))


def _endpoints(r):
    if r.partitions_by_user_endpoint is None:
        return None
    return sorted(((e.user_endpoint.host, e.user_endpoint.port),
                   sorted((t.topic, list(t.partitions)) for t in e.active_partitions),
                   sorted((t.topic, list(t.partitions)) for t in e.standby_partitions))
                  for e in r.partitions_by_user_endpoint)


def test_user_endpoints_as_kafka(streams_broker):  # noqa: F811
    """Interactive queries (KIP-1071): a member's UserEndpoint; the group's
    EndpointInformationEpoch moves when a member's endpoint changes, or the tasks of a
    member with one; a member whose epoch is another gets PartitionsByUserEndpoint:
    every member with an endpoint and the source-topic partitions of its active tasks."""
    from tests.differential.test_group_configs import SET, _alter, _describe_settled

    broker = streams_broker
    group, source = new_group(broker, "sge", 2)
    client = broker.raw()
    try:
        assert _alter(client, group, [("streams.assignment.interval.ms", SET, "0")]) == (0, None)
        _describe_settled(client, group, "streams.assignment.interval.ms", "0")
        topo = topology(source=source, changelog=f"{group}-changelog")
        h1, h2 = ("h1.example", 8001), ("h2.example", 8002)
        r = _heartbeat_with_endpoint(client, group, "m1", 0, h1, topo=topo)
        # The group's first heartbeat: the answer says epoch 0 and lists the endpoints.
        assert r.error_code == 0 and r.endpoint_information_epoch == 0, r
        assert _endpoints(r) == [(h1, [(source, sorted(p for _s, p in active(r)))], [])]
        epoch, owned, info = r.member_epoch, active(r), 0
        deadline = time.monotonic() + 15
        while len(owned) < 2:
            assert time.monotonic() < deadline, r
            time.sleep(0.05)
            r = _heartbeat_with_endpoint(client, group, "m1", epoch, info=info, owned=owned)
            assert r.error_code == 0, r
            epoch = r.member_epoch
            if r.active_tasks is not None:
                owned = active(r)
            if r.partitions_by_user_endpoint is not None:
                info = r.endpoint_information_epoch
        r = _heartbeat_with_endpoint(client, group, "m1", epoch, info=info, owned=owned)
        assert (r.endpoint_information_epoch, r.partitions_by_user_endpoint) == (info, None)
        if info:
            r = _heartbeat_with_endpoint(client, group, "m1", epoch, info=0, owned=owned)
            assert r.endpoint_information_epoch == info
            assert _endpoints(r) == [(h1, [(source, [0, 1])], [])]
        r2 = _heartbeat_with_endpoint(client, group, "m2", 0, h2, topo=topo)
        assert r2.endpoint_information_epoch == info + 1
        assert _endpoints(r2) == [(h1, [(source, [0, 1])], []), (h2, [], [])]
        epochs, tasks = settle_two(client, group, {"m1": epoch, "m2": r2.member_epoch},
                                   {"m1": owned, "m2": set()}, info + 1)
        r3 = _heartbeat_with_endpoint(client, group, "m3", 0, topo=topo)  # no endpoint
        # m2's join, m1's revocation of a task and m2's new task moved it.
        assert r3.endpoint_information_epoch == info + 3, r3
        listed = _endpoints(r3)
        assert listed == sorted([(h1, [(source, sorted(p for _s, p in tasks["m1"]))], []),
                                 (h2, [(source, sorted(p for _s, p in tasks["m2"]))], [])])
        assert len(tasks["m1"]) == len(tasks["m2"]) == 1
    finally:
        client.close()


def settle_two(client, group, epochs, owned, info):
    """Heartbeat m1 and m2 with the tasks they were given until each owns one."""
    deadline = time.monotonic() + 15
    while not (len(owned["m1"]) == 1 and len(owned["m2"]) == 1):
        assert time.monotonic() < deadline, (epochs, owned)
        for m in ("m1", "m2"):
            r = _heartbeat_with_endpoint(client, group, m, epochs[m], info=info, owned=owned[m])
            assert r.error_code == 0, r
            epochs[m] = r.member_epoch
            if r.active_tasks is not None:
                owned[m] = active(r)
        time.sleep(0.05)
    return epochs, owned


def test_task_offsets_rank_the_candidates_as_kafka(streams_broker):  # noqa: F811
    """A member's TaskOffsets (the state it has on disk) are kept in memory: describe
    lists them with its TaskEndOffsets, and the sticky assignor takes the member for a
    task it reported an offset for (after the previous owners), as Kafka 4.4's standby
    candidates. m1 holds both tasks; m2 and m3 join within the assignment interval, m3
    with offsets for both tasks: the moving task goes to m3 (without them, to the least
    loaded process, m2's)."""
    from tests.differential.test_group_configs import SET, _alter, _describe_settled

    broker = streams_broker
    group, source = new_group(broker, "sgo", 2)
    client = broker.raw()
    try:
        assert _alter(client, group, [("streams.assignment.interval.ms", SET, "1500"),
                                      ("streams.num.standby.replicas", SET, "1")]) == (0, None)
        _describe_settled(client, group, "streams.num.standby.replicas", "1")
        topo = topology(source=source, changelog=f"{group}-changelog")
        epoch, owned = join_until_stable(client, group, "m1", topo=topo)
        assert owned == {("0", 0), ("0", 1)}
        r = _heartbeat_with_endpoint(client, group, "m2", 0, topo=topo)
        assert statuses(r) == [(5, "Assignment delayed due to the configured assignment "
                                   "interval.")], r
        offsets, ends = {("0", 0): 100, ("0", 1): 200}, {("0", 0): 150, ("0", 1): 250}
        r = _heartbeat_with_endpoint(client, group, "m3", 0, topo=topo, offsets=offsets,
                                     end_offsets=ends)
        assert r.error_code == 0 and r.active_tasks == (), r
        (g,) = describe(client, group)
        listed = {m.member_id: ({(o.subtopology_id, o.partition): o.offset for o in m.task_offsets},
                                {(o.subtopology_id, o.partition): o.offset
                                 for o in m.task_end_offsets}) for m in g.members}
        assert listed == {"m1": ({}, {}), "m2": ({}, {}), "m3": (offsets, ends)}
        deadline = time.monotonic() + 15
        while g.assignment_epoch < g.group_epoch:
            assert time.monotonic() < deadline, g
            time.sleep(0.1)
            r = _heartbeat_with_endpoint(client, group, "m1", epoch, owned=owned)
            assert r.error_code == 0, r
            (g,) = describe(client, group)
        targets = {m.member_id: (
            sorted((t.subtopology_id, p) for t in m.target_assignment.active_tasks
                   for p in t.partitions),
            sorted((t.subtopology_id, p) for t in m.target_assignment.standby_tasks
                   for p in t.partitions)) for m in g.members}
        assert targets == {"m1": ([("0", 0)], [("0", 1)]), "m2": ([], [("0", 0)]),
                           "m3": ([("0", 1)], [])}, targets
    finally:
        client.close()


def test_a_static_members_metadata_bumps_the_group_epoch_as_kafka(streams_broker):  # noqa: F811
    """Any change of a dynamic member's metadata (here its client id) bumps the group
    epoch; a static member's only if it is one the assignment reads (client tags, not
    the client id), as Kafka 4.4's hasStreamsMemberMetadataChanged."""
    broker = streams_broker
    group, source = new_group(broker, "sgm", 2)
    client = broker.raw()
    topo = topology(source=source, changelog=f"{group}-changelog")

    def group_epoch() -> int:
        (g,) = describe(client, group)
        return g.group_epoch

    def again(member: str, epoch: int, client_id: str, instance_id=None, tags=None) -> None:
        request = heartbeat_request(group, member, epoch, owned=(), instance_id=instance_id)
        if tags is not None:
            request = dataclasses.replace(request, client_tags=tuple(
                build(HB.KeyValue, key=k, value=v) for k, v in tags))
        r = client.request(88, 0, request, client_id=client_id)
        assert r.error_code == 0, r.error_message

    try:
        s1 = heartbeat(client, group, "s1", 0, topo=topo, instance_id="i1")
        d1 = heartbeat(client, group, "d1", 0, topo=topo)
        assert (s1.error_code, d1.error_code) == (0, 0)
        epoch = group_epoch()
        again("s1", s1.member_epoch, "renamed", instance_id="i1")
        assert group_epoch() == epoch
        again("s1", s1.member_epoch, "renamed", instance_id="i1", tags=[("zone", "a")])
        assert group_epoch() == epoch + 1
        again("d1", d1.member_epoch, "renamed")
        assert group_epoch() == epoch + 2
        (g,) = describe(client, group)
        assert sorted((m.member_id, m.client_id, [(t.key, t.value) for t in m.client_tags])
                      for m in g.members) == [("d1", "renamed", []),
                                              ("s1", "renamed", [("zone", "a")])]
    finally:
        client.close()
