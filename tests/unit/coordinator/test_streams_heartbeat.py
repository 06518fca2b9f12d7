"""StreamsGroupHeartbeat paths of the streams-group state machine: joining, statuses,
reconciliation through revocation, fencing errors, static membership, leave, timeouts
and the request checks Kafka 4.4 makes."""

from __future__ import annotations

from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.group import (
    ASSIGNING,
    EMPTY,
    NOT_READY,
    RECONCILING,
    STABLE_GROUP,
)
from txbroker.coordinator.streams.groups import StreamsGroups
from txbroker.coordinator.streams.heartbeat import (
    ASSIGNMENT_DELAYED,
    INITIAL_DELAY_DETAIL,
    INTERVAL_DETAIL,
)
from txbroker.coordinator.streams.reconcile import UNREVOKED_TASKS, TasksTuple
from txbroker.coordinator.streams.results import (
    EndpointPartitions,
    StreamsGroupConfig,
    StreamsHeartbeat,
)
from txbroker.coordinator.streams.topology import (
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)

G = "app"
TOPO = StreamsTopology(1, (Subtopology("0", ("in",), state_changelog_topics=(
    TopicInfo("app-s-changelog"),)),))
TOPICS = {"in": 4, "app-s-changelog": 4}
NONE = frozenset()
# Kafka's initial rebalance delay and assignment interval off: every heartbeat assigns.
AT_ONCE = dict(initial_rebalance_delay_ms=0, assignment_interval_ms=0)


def groups(**config) -> StreamsGroups:
    return StreamsGroups(lambda _g: StreamsGroupConfig(**{**AT_ONCE, **config}))


def join(gs, member, process="p1", topics=TOPICS, now=0, topology=TOPO, **kw):
    return gs.heartbeat(StreamsHeartbeat(G, member, 0, rebalance_timeout_ms=500,
                                         topology=topology, process_id=process, **kw),
                        topics, now)


def beat(gs, member, epoch, owned=None, now=0, topics=TOPICS, **kw):
    tasks = {} if owned is None else dict(active_tasks=owned.active, standby_tasks=owned.standby,
                                          warmup_tasks=owned.warmup)
    return gs.heartbeat(StreamsHeartbeat(G, member, epoch, **tasks, **kw), topics, now)


def test_first_member_gets_every_task_and_records() -> None:
    gs = groups()
    r = join(gs, "m1")
    assert r.error == 0 and r.member_epoch == 2 and r.heartbeat_interval_ms == 5000  # as Kafka
    assert r.assignment == TasksTuple(frozenset(("0", p) for p in range(4)))
    kinds = [k.record_type for k, _ in r.records]
    assert kinds == [R.MEMBER_METADATA, R.TOPOLOGY, R.GROUP_METADATA,
                     R.TARGET_ASSIGNMENT_MEMBER, R.TARGET_ASSIGNMENT_METADATA,
                     R.CURRENT_MEMBER_ASSIGNMENT]
    assert gs.get(G).state == STABLE_GROUP
    again = beat(gs, "m1", 2, r.assignment)
    assert again.error == 0 and again.assignment is None and again.records == ()


def test_not_ready_until_internal_topics_exist() -> None:
    gs = groups()
    r = join(gs, "m1", topics={"in": 4})
    assert [s.code for s in r.statuses] == [MISSING_INTERNAL_TOPICS]
    assert [(t.name, t.partitions) for t in r.internal_topics_to_create] == [("app-s-changelog", 4)]
    assert r.assignment == TasksTuple() and gs.get(G).state == NOT_READY
    r = beat(gs, "m1", r.member_epoch, TasksTuple())
    assert r.statuses == () and len(r.assignment.active) == 4


def test_missing_source_topics_status() -> None:
    r = join(groups(), "m1", topics={})
    assert [s.code for s in r.statuses] == [MISSING_SOURCE_TOPICS]
    assert r.internal_topics_to_create == ()


def test_a_task_moves_only_after_its_owner_revoked_it() -> None:
    gs = groups()
    r1 = join(gs, "m1", "p1")
    owned1 = r1.assignment
    r2 = join(gs, "m2", "p2", now=1)
    assert r2.assignment == TasksTuple()  # m1 still runs everything
    assert gs.get(G).state == RECONCILING
    r1 = beat(gs, "m1", r1.member_epoch, owned1, now=2)
    m1 = gs.get(G).member_assignment("m1")
    assert m1.state == UNREVOKED_TASKS and len(m1.pending_revocation.active) == 2
    assert r1.member_epoch == 2 and len(r1.assignment.active) == 2
    r2 = beat(gs, "m2", r2.member_epoch, TasksTuple(), now=3)
    assert r2.assignment is None  # still held by m1
    kept = r1.assignment
    r1 = beat(gs, "m1", r1.member_epoch, kept, now=4)  # revoked
    assert r1.member_epoch == 3 and r1.assignment is None  # its tasks did not change
    r2 = beat(gs, "m2", r2.member_epoch, TasksTuple(), now=5)
    assert len(r2.assignment.active) == 2 and r2.member_epoch == 3
    assert not r2.assignment.active & kept.active
    assert gs.get(G).state == STABLE_GROUP


def test_fencing_errors() -> None:
    gs = groups()
    r = join(gs, "m1")
    assert beat(gs, "m1", 5, r.assignment).error == 110  # FENCED_MEMBER_EPOCH: ahead
    assert beat(gs, "nobody", 2).error == 25  # UNKNOWN_MEMBER_ID
    assert beat(groups(), "m1", 2).error == 69  # GROUP_ID_NOT_FOUND
    # One epoch behind with a subset of its tasks: accepted (a lost response).
    join(gs, "m2", "p2")
    r = beat(gs, "m1", 2, r.assignment)
    kept = r.assignment
    r = beat(gs, "m1", r.member_epoch, kept)
    assert r.member_epoch == 3
    assert beat(gs, "m1", 2, kept).error == 0
    assert beat(gs, "m1", 2, None).error == 110  # behind without its tasks
    assert beat(gs, "m1", 2, TasksTuple(frozenset({("0", 3), ("0", 2), ("0", 1),
                                                        ("0", 0)}))).error == 110


def test_request_checks() -> None:
    gs = groups()
    r = gs.heartbeat(StreamsHeartbeat(G, "m1", 0, topology=TOPO), TOPICS, 0)
    assert (r.error, r.message) == (42, "RebalanceTimeoutMs must be provided in first request.")
    bad = StreamsTopology(1, (Subtopology("0", ("in",), state_changelog_topics=(
        TopicInfo("c", 3),)),))
    assert join(gs, "m1", topology=bad).error == 130  # STREAMS_INVALID_TOPOLOGY
    regex = StreamsTopology(1, (Subtopology("0", (), ("in.*",)),))
    assert join(gs, "m1", topology=regex).message == \
        "Regular expressions for source topics are not supported yet."
    loop = StreamsTopology(1, (Subtopology("0", (), repartition_source_topics=(TopicInfo("r"),)),))
    assert join(gs, "m1", topology=loop).error == 130 and gs.get(G) is None  # nothing written
    r = join(gs, "m1")
    changed = StreamsTopology(1, (Subtopology("0", ("in", "more")),))
    assert join(gs, "m2", topology=changed).message == "Topology updates are not supported yet."
    assert beat(gs, "m1", 2, TasksTuple(frozenset({("9", 0)}))).message == \
        "Subtopology 9 does not exist in the topology."
    assert beat(gs, "m1", 2, TasksTuple(frozenset({("0", 4)}))).error == 42
    assert gs.heartbeat(StreamsHeartbeat(G, "m1", -3), TOPICS, 0).error == 42
    assert gs.heartbeat(StreamsHeartbeat(G, "m1", 1, active_tasks=NONE), TOPICS, 0).message == \
        "If one task-type is non-null, all must be non-null."


def test_stale_topology_and_shutdown_statuses() -> None:
    gs = groups()
    join(gs, "m1")
    old = StreamsTopology(0, TOPO.subtopologies)
    r = join(gs, "m2", "p2", topology=old)
    assert r.error == 0 and [s.code for s in r.statuses] == [STALE_TOPOLOGY]
    assert r.statuses[0].detail == ("The member's topology epoch 0 is behind the group's "
                                    "topology epoch 1.")
    r = beat(gs, "m2", r.member_epoch, TasksTuple(), shutdown_application=True)
    assert [s.code for s in r.statuses] == [STALE_TOPOLOGY, SHUTDOWN_APPLICATION]
    r = beat(gs, "m1", 2)
    assert [s.code for s in r.statuses] == [SHUTDOWN_APPLICATION]


def test_leave_session_and_rebalance_timeouts() -> None:
    gs = groups(session_timeout_ms=100)
    r1 = join(gs, "m1", now=0)
    join(gs, "m2", "p2", now=0)
    r = beat(gs, "m2", 3, TasksTuple(), now=0)
    assert r.error == 0
    assert gs.next_deadline_ms() == 100
    r1 = beat(gs, "m1", 2, r1.assignment, now=50)  # m1 must revoke: rebalance deadline 550
    assert gs.get(G).member_assignment("m1").state == UNREVOKED_TASKS
    beat(gs, "m2", 3, TasksTuple(), now=60)
    expired = gs.expire(160)
    assert {g: e.member_ids for g, e in expired.items()} == {G: ("m1", "m2")}
    assert gs.get(G).state == EMPTY
    left = join(gs, "m3", now=200)
    assert left.member_epoch > 3
    r = gs.heartbeat(StreamsHeartbeat(G, "m3", -1), TOPICS, 210)
    assert (r.error, r.member_epoch) == (0, -1) and gs.get(G).state == EMPTY
    kinds = [(k.record_type, v is None) for k, v in r.records]
    assert kinds == [(R.CURRENT_MEMBER_ASSIGNMENT, True), (R.TARGET_ASSIGNMENT_MEMBER, True),
                     (R.MEMBER_METADATA, True), (R.GROUP_METADATA, False),
                     (R.TARGET_ASSIGNMENT_METADATA, False)]


def test_static_member_leaves_and_rejoins_with_its_tasks() -> None:
    gs = groups()
    r = join(gs, "s1", instance_id="i")
    tasks = r.assignment
    assert join(gs, "s2", instance_id="i").error == 111  # UNRELEASED_INSTANCE_ID
    assert beat(gs, "other", 2, instance_id="i").error == 82  # FENCED_INSTANCE_ID
    r = gs.heartbeat(StreamsHeartbeat(G, "s1", -2, instance_id="i"), TOPICS, 0)
    assert (r.error, r.member_epoch) == (0, -2)
    g = gs.get(G)
    assert g.member_assignment("s1").assigned == tasks and g.state == RECONCILING
    r = join(gs, "s2", instance_id="i")
    assert r.error == 0 and r.assignment == tasks and r.member_epoch == 2
    assert set(g.p.members) == {"s2"} and g.state == STABLE_GROUP
    assert g.p.group_epoch == 2  # no rebalance for a static rejoin


def test_group_max_size_and_assigning_state() -> None:
    config = [StreamsGroupConfig(max_size=1, **AT_ONCE)]
    gs = StreamsGroups(lambda _g: config[0])
    join(gs, "m1")
    assert join(gs, "m2").error == 81  # GROUP_MAX_SIZE_REACHED
    g = gs.get(G)
    g.fence("m1")
    config[0] = StreamsGroupConfig(**AT_ONCE)  # group configs are read at every heartbeat
    join(gs, "m2")
    join(gs, "m3", "p3")
    g.fence("m2")
    assert g.state == ASSIGNING  # the next heartbeat computes the target


def test_initial_rebalance_delay_holds_the_first_assignment() -> None:
    """Kafka 4.4: a member joining an Empty group starts the delay; until it ends the
    members reconcile towards no tasks at the group's assignment epoch (1 for a new
    group) with ASSIGNMENT_DELAYED; then the coordinator's timer assigns."""
    delayed = [(ASSIGNMENT_DELAYED, INITIAL_DELAY_DETAIL)]
    gs = groups(initial_rebalance_delay_ms=500)
    r1 = join(gs, "m1", now=0)
    r2 = join(gs, "m2", "p2", now=100)
    for r in (r1, r2):
        assert (r.member_epoch, [(s.code, s.detail) for s in r.statuses], r.assignment) == (
            1, delayed, TasksTuple())
    g = gs.get(G)
    assert (g.state, g.p.group_epoch, g.p.assignment_epoch) == (ASSIGNING, 3, 1)
    assert gs.next_deadline_ms() == 500
    assert gs.expire(499) == {}
    assert beat(gs, "m1", 1, TasksTuple(), now=499).statuses[0].code == ASSIGNMENT_DELAYED
    fired = gs.expire(500)[G]
    assert fired.member_ids == () and [k.record_type for k, _ in fired.records] == [
        R.TARGET_ASSIGNMENT_MEMBER, R.TARGET_ASSIGNMENT_MEMBER, R.TARGET_ASSIGNMENT_METADATA]
    assert g.p.assignment_epoch == 3 and g.initial_delay_deadline is None
    r1 = beat(gs, "m1", 1, TasksTuple(), now=510)
    assert r1.statuses == () and r1.member_epoch == 3 and len(r1.assignment.active) == 2
    # A heartbeat after the deadline, before the timer fired, assigns at once.
    gs = groups(initial_rebalance_delay_ms=500)
    join(gs, "m1", now=0)
    r = beat(gs, "m1", 1, TasksTuple(), now=600)
    assert r.statuses == () and len(r.assignment.active) == 4
    # Kafka's defaults: a 3 s delay, then assignments at most every second.
    assert StreamsGroupConfig().initial_rebalance_delay_ms == 3000
    gs = StreamsGroups()
    join(gs, "m1", now=0)
    assert gs.next_deadline_ms() == 3000


def test_assignment_interval_holds_a_new_assignment() -> None:
    delayed = [(ASSIGNMENT_DELAYED, INTERVAL_DETAIL)]
    gs = groups(assignment_interval_ms=1000)
    r1 = join(gs, "m1", now=1000)
    assert len(r1.assignment.active) == 4
    r2 = join(gs, "m2", "p2", now=1500)
    assert (r2.member_epoch, [(s.code, s.detail) for s in r2.statuses], r2.assignment) == (
        2, delayed, TasksTuple())
    assert gs.get(G).state == ASSIGNING
    r1 = beat(gs, "m1", 2, r1.assignment, now=1999)
    assert r1.statuses[0].detail == INTERVAL_DETAIL and r1.assignment is None
    r1 = beat(gs, "m1", 2, r1.assignment or TasksTuple(frozenset(("0", p) for p in range(4))),
              now=2000)
    assert r1.statuses == () and len(r1.assignment.active) == 2  # two to revoke
    assert gs.get(G).p.assignment_timestamp == 2000


def test_user_endpoints_and_their_partitions() -> None:
    """Kafka 4.4: the endpoint information epoch moves when a member's endpoint changes
    or the tasks of a member with one; a member with another epoch gets every member's
    endpoint with the input-topic partitions of its active and standby tasks."""
    gs = groups(num_standby_replicas=1)
    r1 = join(gs, "m1", user_endpoint=("h1", 1))
    # A new group: the answer says 0 (Kafka answers before the group exists) and the
    # group's epoch stays 0, but the member's 0 differs from the new group's 1.
    assert r1.endpoint_information_epoch == 0 and gs.get(G).endpoint_epoch == 0
    assert r1.partitions_by_endpoint == (EndpointPartitions("h1", 1, (("in", (0, 1, 2, 3)),)),)
    assert beat(gs, "m1", 2, r1.assignment).partitions_by_endpoint is None
    r2 = join(gs, "m2", "p2", user_endpoint=("h2", 2))
    assert r2.endpoint_information_epoch == 1
    standby = tuple(sorted(p for _s, p in r2.assignment.standby))  # of tasks m1 keeps
    assert r2.partitions_by_endpoint == (EndpointPartitions("h1", 1, (("in", (0, 1, 2, 3)),)),
                                         EndpointPartitions("h2", 2, (), (("in", standby),)))
    r1 = beat(gs, "m1", 2, r1.assignment, endpoint_information_epoch=1)  # revokes two
    assert r1.endpoint_information_epoch == 2 and len(r1.assignment.active) == 2
    kept = tuple(sorted(p for _s, p in r1.assignment.active))
    assert r1.partitions_by_endpoint[-1] == EndpointPartitions("h1", 1, (("in", kept),))  # last
    r1 = beat(gs, "m1", r1.member_epoch, r1.assignment, endpoint_information_epoch=2)
    assert r1.partitions_by_endpoint is None
    r2 = beat(gs, "m2", r2.member_epoch, TasksTuple(), endpoint_information_epoch=2)
    moved = tuple(sorted({0, 1, 2, 3} - set(kept)))
    assert r2.endpoint_information_epoch == 3 and standby == kept
    assert r2.partitions_by_endpoint == (
        EndpointPartitions("h1", 1, (("in", kept),)),
        EndpointPartitions("h2", 2, (("in", moved),), (("in", kept),)))
    # A member without an endpoint is not listed; leaving moves nothing.
    r3 = join(gs, "m3", "p3")
    assert r3.endpoint_information_epoch == 3 and len(r3.partitions_by_endpoint) == 2
    gs.heartbeat(StreamsHeartbeat(G, "m1", -1), TOPICS, 0)
    assert gs.get(G).endpoint_epoch == 3


def test_a_static_members_client_id_is_written_without_a_group_epoch_bump() -> None:
    """Kafka 4.4: a static member's metadata change bumps the group epoch only if the
    assignment reads it (client tags, rack, process, topology epoch); a dynamic one's
    always."""
    gs = groups()
    r = join(gs, "s1", instance_id="i1")
    epoch = gs.get(G).p.group_epoch
    r = beat(gs, "s1", r.member_epoch, instance_id="i1", client_id="renamed")
    assert [k.record_type for k, _ in r.records] == [R.MEMBER_METADATA]
    assert gs.get(G).p.group_epoch == epoch
    r = beat(gs, "s1", r.member_epoch, instance_id="i1", client_tags=(("zone", "a"),))
    assert R.GROUP_METADATA in [k.record_type for k, _ in r.records]
    assert gs.get(G).p.group_epoch == epoch + 1
    r = join(gs, "d1", process="p2")
    r = beat(gs, "d1", r.member_epoch, client_id="renamed")
    assert gs.get(G).p.group_epoch == epoch + 3  # d1's join, then its client id
