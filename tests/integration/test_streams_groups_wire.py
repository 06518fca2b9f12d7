"""Streams groups (KIP-1071, behind streams.version) on the wire: StreamsGroupHeartbeat
(88) and StreamsGroupDescribe (89) built with kio against the in-process broker, for the
error codes and statuses Kafka 4.4 answers, the other group APIs on a streams group, and
the group's state after a crash (replayed from ``__consumer_offsets``)."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module
from txbroker.testing.broker_thread import BrokerThread

from tests.integration.wire_util import API_VERSIONS, api_versions_request, connect

ENABLED = {"txbroker.streams.version": "1", "group.streams.initial.rebalance.delay.ms": "0"}
OFF = {"txbroker.streams.version": "0"}
STREAMS_APIS = {88, 89}
HB = request_module(88, 0)
DESCRIBE = request_module(89, 0)
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS = 1, 3


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def topology(source: str = "input", changelog: str = "app-store-changelog", configs=()):
    """One stateful subtopology reading ``source`` with one changelog topic (with the
    topic ``configs``)."""
    return build(HB.Topology, epoch=1, subtopologies=(build(
        HB.Subtopology, subtopology_id="0", source_topics=(source,), source_topic_regex=(),
        state_changelog_topics=(build(HB.TopicInfo, name=changelog, partitions=0,
                                      replication_factor=0, topic_configs=tuple(
                                          build(HB.KeyValue, key=k, value=v)
                                          for k, v in configs)),),
        repartition_sink_topics=(), repartition_source_topics=(), copartition_groups=()),))


def tasks(pairs) -> tuple:
    by: dict[str, list[int]] = {}
    for s, p in pairs:
        by.setdefault(s, []).append(p)
    return tuple(build(HB.TaskIds, subtopology_id=s, partitions=tuple(sorted(ps)))
                 for s, ps in sorted(by.items()))


def heartbeat(client, group: str, member: str, epoch: int, **kwargs):
    return client.request(88, 0, heartbeat_request(group, member, epoch, **kwargs))


def heartbeat_request(group: str, member: str, epoch: int, *, topo=None, owned=None,
                      instance_id: str | None = None, shutdown: bool = False):
    join = epoch == 0
    return build(HB.StreamsGroupHeartbeatRequest, group_id=group, member_id=member,
                member_epoch=epoch, endpoint_information_epoch=0, instance_id=instance_id,
                rack_id=None,
                rebalance_timeout=datetime.timedelta(milliseconds=30_000 if join else -1),
                topology=(topo or topology()) if join else None,
                active_tasks=tasks(owned) if owned is not None else (() if join else None),
                standby_tasks=() if join or owned is not None else None,
                warmup_tasks=() if join or owned is not None else None,
                process_id=str(uuid.uuid5(uuid.NAMESPACE_OID, member)) if join else None,
                user_endpoint=None, client_tags=() if join else None, task_offsets=None,
                task_end_offsets=None, shutdown_application=shutdown)


def describe(client, *groups: str):
    return client.request(89, 0, build(DESCRIBE.StreamsGroupDescribeRequest, group_ids=groups,
                                       include_authorized_operations=False)).groups


def active(response) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in response.active_tasks or () for p in t.partitions}


def join_until_stable(client, group: str, member: str, topo=None) -> tuple[int, set]:
    """Join, then heartbeat with the tasks given until the member owns its target."""
    r = heartbeat(client, group, member, 0, topo=topo)
    assert r.error_code == 0, r.error_message
    owned = active(r)
    epoch = r.member_epoch
    deadline = time.monotonic() + 20  # the internal topics are created in the background
    while time.monotonic() < deadline:
        time.sleep(0.02)
        r = heartbeat(client, group, member, epoch, owned=owned)
        assert r.error_code == 0, r.error_message
        epoch = r.member_epoch
        if r.active_tasks is not None:
            owned = active(r)
        if owned and not r.status:
            return epoch, owned
    raise AssertionError(f"member {member} never got its tasks: {r}")


def settle(client, group: str, members: list[str], topo=None,
           timeout: float = 20) -> tuple[dict[str, int], dict[str, set]]:
    """Join ``members`` (with ``topo``, else the default topology) and heartbeat each in
    turn, with the tasks it was given, until the group is Stable (a task moves only once
    its previous owner revoked it); returns each member's epoch and tasks."""
    epochs, owned = {}, {}
    for m in members:
        r = heartbeat(client, group, m, 0, topo=topo)
        assert r.error_code == 0, r.error_message
        epochs[m], owned[m] = r.member_epoch, active(r)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            r = heartbeat(client, group, m, epochs[m], owned=owned[m])
            assert r.error_code == 0, r.error_message
            epochs[m] = r.member_epoch
            if r.active_tasks is not None:
                owned[m] = active(r)
        if describe(client, group)[0].group_state == "Stable" and all(owned.values()):
            return epochs, owned
        time.sleep(0.02)
    raise AssertionError(f"group {group} never got Stable: {describe(client, group)}")


def join_group(client, group: str, member: str = ""):
    jm = request_module(11, 9)
    return client.request(11, 9, build(
        jm.JoinGroupRequest, group_id=group, session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30), member_id=member,
        group_instance_id=None, protocol_type="consumer",
        protocols=(build(jm.JoinGroupRequestProtocol, name="range", metadata=b""),),
        reason=None))


def advertised(broker) -> set[int]:
    client = connect(broker)
    try:
        return {k.api_key for k in client.request(API_VERSIONS, 3,
                                                  api_versions_request(3)).api_keys}
    finally:
        client.close()


def test_on_by_default_as_kafka(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {}) as b:  # Kafka 4.4 finalizes streams.version 1
        assert STREAMS_APIS <= advertised(b)


def test_off_at_streams_version_0_not_advertised_and_refused(tmp_path):
    with BrokerThread(str(tmp_path / "d"), OFF) as b:
        assert not STREAMS_APIS & advertised(b)
        client = connect(b)
        try:
            r = heartbeat(client, "app", "m1", 0)
            assert r.error_code == E.unsupported_version
            (g,) = describe(client, "app")
            assert g.error_code == E.unsupported_version
        finally:
            client.close()


def test_enabled_by_update_features_and_disabled_again(tmp_path):
    from tests.integration.test_update_features import SAFE, UPGRADE, update

    with BrokerThread(str(tmp_path / "d"), OFF) as b:
        client = connect(b)
        try:
            assert update(client, [("streams.version", 1, UPGRADE)]).error_code == 0
            assert STREAMS_APIS <= advertised(b)
            r = update(client, [("streams.version", 2, UPGRADE)])
            assert r.error_code == E.invalid_update_version  # Kafka 4.4 knows 0-1
        finally:
            client.close()
    with BrokerThread(str(tmp_path / "d"), OFF) as b:  # the stored level survives a restart
        assert STREAMS_APIS <= advertised(b)
        client = connect(b)
        try:
            assert update(client, [("streams.version", 0, SAFE)]).error_code == 0
            assert not STREAMS_APIS & advertised(b)
        finally:
            client.close()


def test_advertised_at_streams_version_1(txbroker):
    assert STREAMS_APIS <= advertised(txbroker)


def test_missing_source_topic_is_a_status_then_tasks_once_it_exists(txbroker):
    client = connect(txbroker)
    try:
        r = heartbeat(client, "app", "m1", 0)
        assert r.error_code == 0 and r.member_epoch >= 1
        assert [(s.status_code, s.status_detail) for s in r.status] == [
            (MISSING_SOURCE_TOPICS, "Source topics input are missing.")]
        assert active(r) == set()
        (g,) = describe(client, "app")
        assert (g.error_code, g.group_state) == (0, "NotReady")
        txbroker.create_topic("input", 2)
        epoch, owned = join_until_stable(client, "app", "m2")
        assert owned  # m2 holds tasks of subtopology 0
        # The changelog topic was created in the background with the tasks' count.
        assert txbroker.call(lambda b: b.logs.topics["app-store-changelog"].partitions) == 2
    finally:
        client.close()


def test_unknown_member_fenced_epoch_and_another_group_type(txbroker):
    txbroker.create_topic("input", 1)
    client = connect(txbroker)
    try:
        epoch, _owned = join_until_stable(client, "app", "m1")
        r = heartbeat(client, "app", "nobody", 1, owned=())
        assert r.error_code == E.unknown_member_id
        r = heartbeat(client, "app", "m1", epoch + 5, owned=())
        assert r.error_code == E.fenced_member_epoch
        # A group id of another type: a classic group with a member.
        joined = join_group(client, "classic")
        if joined.error_code == E.member_id_required:
            joined = join_group(client, "classic", joined.member_id)
        assert joined.error_code == 0
        r = heartbeat(client, "classic", "m1", 0)
        assert (r.error_code, r.error_message) == (E.group_id_not_found,
                                                   "Group classic is not a streams group.")
        (g,) = describe(client, "classic")
        assert g.error_code == E.group_id_not_found
        # ... and a JoinGroup for the id of a streams group with members is refused too.
        assert join_group(client, "app").error_code == E.inconsistent_group_protocol
    finally:
        client.close()


def test_invalid_topologies(txbroker):
    client = connect(txbroker)
    try:
        r = heartbeat(client, "app", "m1", 0, topo=topology(source="__consumer_offsets"))
        assert (r.error_code, r.error_message) == (
            E.streams_invalid_topology, "Use of Kafka internal topics __consumer_offsets in a "
            "Kafka Streams topology is prohibited.")
        r = heartbeat(client, "app", "m1", 0, topo=topology(source="bad topic"))
        assert (r.error_code, r.error_message) == (
            E.streams_invalid_topology, "Topic names bad topic are not valid topic names.")
        (g,) = describe(client, "app")
        assert g.error_code == E.group_id_not_found  # nothing was created
    finally:
        client.close()


def test_listed_described_and_deleted_only_when_empty(txbroker):
    txbroker.create_topic("input", 2)
    client = connect(txbroker)
    try:
        epoch, owned = join_until_stable(client, "app", "m1")
        lm = request_module(16, 5)
        listed = client.request(16, 5, build(lm.ListGroupsRequest, states_filter=(),
                                             types_filter=("streams",)))
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type)
                for g in listed.groups] == [("app", "streams", "Stable", "streams")]
        dm = request_module(42, 2)
        deleted = client.request(42, 2, build(dm.DeleteGroupsRequest, groups_names=("app",)))
        assert deleted.results[0].error_code == E.non_empty_group
        assert heartbeat(client, "app", "m1", -1).error_code == 0
        (g,) = describe(client, "app")
        assert (g.group_state, g.members) == ("Empty", ())
        deleted = client.request(42, 2, build(dm.DeleteGroupsRequest, groups_names=("app",)))
        assert deleted.results[0].error_code == 0
        (g,) = describe(client, "app")
        assert g.error_code == E.group_id_not_found
    finally:
        client.close()
    # The tombstones were written: the group does not come back after a crash.
    txbroker.crash()
    txbroker.restart()
    assert describe_after_load(txbroker, "app").error_code == E.group_id_not_found


def describe_after_load(broker, group: str):
    client = connect(broker)
    try:
        for _ in range(100):
            (g,) = describe(client, group)
            if g.error_code != E.coordinator_load_in_progress:
                return g
            time.sleep(0.05)
        raise AssertionError("__consumer_offsets never loaded")
    finally:
        client.close()


def test_offset_commit_checks_the_member_epoch(txbroker):
    txbroker.create_topic("input", 1)
    client = connect(txbroker)
    try:
        epoch, _owned = join_until_stable(client, "app", "m1")
        cm = request_module(8, 9)

        def commit(member: str, member_epoch: int) -> int:
            r = client.request(8, 9, build(
                cm.OffsetCommitRequest, group_id="app", generation_id_or_member_epoch=member_epoch,
                member_id=member, group_instance_id=None, topics=(build(
                    cm.OffsetCommitRequestTopic, name="input", partitions=(build(
                        cm.OffsetCommitRequestPartition, partition_index=0, committed_offset=5,
                        committed_leader_epoch=-1, committed_metadata=None),)),)))
            return r.topics[0].partitions[0].error_code

        assert commit("m1", epoch + 1) == E.stale_member_epoch
        assert commit("other", epoch) == E.unknown_member_id
        assert commit("m1", epoch) == 0
        om = request_module(47, 0)

        def offset_delete() -> int:
            r = client.request(47, 0, build(om.OffsetDeleteRequest, group_id="app", topics=(
                build(om.OffsetDeleteRequestTopic, name="input", partitions=(
                    build(om.OffsetDeleteRequestPartition, partition_index=0),)),)))
            return r.error_code or r.topics[0].partitions[0].error_code

        assert offset_delete() == E.group_subscribed_to_topic
        # A week and more later: a source topic's offsets stay while the group has
        # members (Kafka's isSubscribedToTopic), and expire once it is Empty.
        future = int(time.time() * 1000) + 8 * 24 * 3600 * 1000
        assert txbroker.call(lambda b: b.groups.expire_offsets(future)) == 0
        assert heartbeat(client, "app", "m1", -1).error_code == 0
        assert commit("", -1) == 0  # an admin commit to the Empty group
        assert offset_delete() == 0
        assert commit("", -1) == 0
        assert txbroker.call(lambda b: b.groups.expire_offsets(future)) == 1
        # ... and the Empty group without offsets goes too, as Kafka's cleanup.
        assert describe(client, "app")[0].error_code == E.group_id_not_found
    finally:
        client.close()


def test_a_crash_keeps_members_epochs_and_assignment(txbroker):
    txbroker.create_topic("input", 4)
    client = connect(txbroker)
    try:
        settle(client, "app", ["m1", "m2"])
        before = describe(client, "app")[0]
    finally:
        client.close()
    assert before.error_code == 0 and len(before.members) == 2
    txbroker.crash()
    txbroker.restart()
    after = describe_after_load(txbroker, "app")
    assert after.error_code == 0

    def view(g):
        return (g.group_state, g.group_epoch, g.assignment_epoch, g.topology, sorted(
            (m.member_id, m.member_epoch, m.process_id, m.assignment, m.target_assignment)
            for m in g.members))

    assert view(after) == view(before)


def test_sigkill_keeps_members_epochs_and_assignment_and_members_go_on(tmp_path):
    """A broker process killed with SIGKILL: what was answered was fsynced, and the
    members heartbeat on with the epochs they had."""
    from txbroker.testing.broker_process import BrokerProcess

    broker = BrokerProcess(str(tmp_path / "d"), ENABLED)
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("input", 2, 1)])["input"].result(10)
        client = connect(broker)
        try:
            epoch, owned = join_until_stable(client, "app", "m1")
            before = describe(client, "app")[0]
        finally:
            client.close()
        broker.kill()
        broker.start()
        after = describe_after_load(broker, "app")
        assert (after.group_state, after.group_epoch, after.members) == \
            (before.group_state, before.group_epoch, before.members)
        client = connect(broker)
        try:
            r = heartbeat(client, "app", "m1", epoch, owned=owned)
            assert (r.error_code, r.member_epoch) == (0, epoch)
        finally:
            client.close()
    finally:
        broker.kill()


def test_a_silent_member_is_removed_after_the_session_timeout(tmp_path):
    """The coordinator's wake timer fences a member that stopped heartbeating; its
    tasks go to the member that is left."""
    with BrokerThread(str(tmp_path / "d"), {**ENABLED,
                                            "group.streams.session.timeout.ms": "1000"}) as b:
        b.create_topic("input", 2)
        client = connect(b)
        try:
            epochs, tasks = settle(client, "app", ["m1", "m2"])
            epoch, owned = epochs["m2"], tasks["m2"]
            assert len(owned) == 1
            deadline = time.monotonic() + 20
            while len(owned) < 2:  # m1 is silent: only m2 heartbeats
                assert time.monotonic() < deadline, describe(client, "app")
                time.sleep(0.1)
                r = heartbeat(client, "app", "m2", epoch, owned=owned)
                assert r.error_code == 0, r.error_message
                epoch = r.member_epoch
                if r.active_tasks is not None:
                    owned = active(r)
            (g,) = describe(client, "app")
            assert [m.member_id for m in g.members] == ["m2"]
        finally:
            client.close()


def test_a_failed_write_is_undone(txbroker):
    """The join's records cannot be appended (a full disk): the member gets the error
    and the group is as the log says (memory never runs ahead of it); joining again
    works."""
    from txbroker.coordinator.internal_topic import OFFSETS_TOPIC, partition_for

    from tests.integration.txn_util import fail_appends

    txbroker.create_topic("input", 2)
    client = connect(txbroker)
    try:
        epoch, _owned = join_until_stable(client, "app", "m1")
        before = describe(client, "app")[0]
        n = txbroker.call(lambda b: b.logs.topics[OFFSETS_TOPIC].partitions)
        failures = fail_appends(txbroker, OFFSETS_TOPIC, partition_for("app", n), 1,
                                control=False)
        r = heartbeat(client, "app", "m2", 0)
        assert failures["left"] == 0 and r.error_code == E.not_coordinator
        assert describe(client, "app")[0] == before  # m2 is not a member
        assert heartbeat(client, "app", "m2", 0).error_code == 0
        assert len(describe(client, "app")[0].members) == 2
    finally:
        client.close()


def test_a_refused_internal_topic_is_tried_once_a_minute(txbroker, caplog):
    """Every heartbeat asks for the missing internal topics: a creation the broker
    refuses (a bad topic config) is logged once and tried again a minute later, not at
    every heartbeat."""
    txbroker.create_topic("input", 1)
    bad = topology(configs=(("cleanup.policy", "nonsense"),))
    client = connect(txbroker)

    def refusals() -> int:
        return sum("cannot create streams internal topic" in r.getMessage()
                   for r in caplog.records)

    try:
        r = heartbeat(client, "app", "m1", 0, topo=bad)
        deadline = time.monotonic() + 20
        while refusals() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(5):
            time.sleep(0.1)  # (room for a retry, were there one)
            r = heartbeat(client, "app", "m1", r.member_epoch, owned=())
            assert [s.status_code for s in r.status] == [MISSING_INTERNAL_TOPICS]
        assert refusals() == 1
        assert "app-store-changelog" not in txbroker.call(lambda b: set(b.logs.topics))
    finally:
        client.close()


def test_a_static_member_rejoins_with_its_tasks(txbroker):
    """A static member (group.instance.id) leaves with epoch -2 and its new incarnation
    joins with the same instance id: it gets the same tasks, nobody else took them."""
    txbroker.create_topic("input", 2)
    txbroker.create_topic("app-store-changelog", 2)  # ready at once: no status
    client = connect(txbroker)
    try:
        r = heartbeat(client, "app", "m1", 0, instance_id="i1")
        tasks = {("0", 0), ("0", 1)}
        assert (r.error_code, r.status, active(r)) == (0, (), tasks)
        r = heartbeat(client, "app", "m1", r.member_epoch, owned=tasks, instance_id="i1")
        assert r.error_code == 0
        r = heartbeat(client, "app", "m1", -2, instance_id="i1")
        assert (r.error_code, r.member_epoch) == (0, -2)
        r = heartbeat(client, "app", "m1-again", 0, instance_id="i1")
        assert r.error_code == 0 and active(r) == tasks
        (g,) = describe(client, "app")
        assert [(m.member_id, m.instance_id) for m in g.members] == [("m1-again", "i1")]
        # The instance id is owned: another member cannot take it while m1-again is in.
        r = heartbeat(client, "app", "intruder", 0, instance_id="i1")
        assert r.error_code == E.unreleased_instance_id
    finally:
        client.close()


def test_streams_groups_on_metrics(tmp_path):
    """/metrics counts streams groups by state once streams.version is 1."""
    from tests.integration.test_metrics import scrape, value

    with BrokerThread(str(tmp_path / "d"), {**ENABLED, "admin.http.port": "0"}) as b:
        assert value(scrape(b), "txbroker_groups", protocol="streams", state="NotReady") == 0
        client = connect(b)
        try:
            assert heartbeat(client, "app", "m1", 0).error_code == 0  # no source topic yet
        finally:
            client.close()
        assert value(scrape(b), "txbroker_groups", protocol="streams", state="NotReady") == 1
    with BrokerThread(str(tmp_path / "off"), {**OFF, "admin.http.port": "0"}) as b:
        assert not [s for s in scrape(b)["txbroker_groups"][1]
                    if s[1]["protocol"] == "streams"]


def test_a_member_asks_the_application_to_shut_down(txbroker):
    txbroker.create_topic("input", 2)
    client = connect(txbroker)
    try:
        epochs, tasks = settle(client, "app", ["m1", "m2"])
        r = heartbeat(client, "app", "m1", epochs["m1"], owned=tasks["m1"], shutdown=True)
        assert r.error_code == 0
        r = heartbeat(client, "app", "m2", epochs["m2"], owned=tasks["m2"])
        assert [(s.status_code, s.status_detail) for s in r.status] == [
            (4, "Streams group member m1 encountered a fatal error and requested a shutdown "
                "for the entire application.")]
    finally:
        client.close()


def test_acls_as_kafka_checks_them(tmp_path):
    from confluent_kafka.admin import AclOperation, ResourceType

    from tests.integration.security.test_acls import (
        SECURE,
        allow,
        create_acls,
        raw_request,
        secured_broker,
    )

    with secured_broker(str(tmp_path / "d"), {**SECURE, **ENABLED}) as b:
        b.create_topic("input", 1)

        def join():
            return raw_request(b, 88, 0, heartbeat_request("app", "m1", 0))

        def describe_as_alice():
            (g,) = raw_request(b, 89, 0, build(DESCRIBE.StreamsGroupDescribeRequest,
                                               group_ids=("app",),
                                               include_authorized_operations=False)).groups
            return g

        assert join().error_code == E.group_authorization_failed  # READ on the group
        assert describe_as_alice().error_code == E.group_authorization_failed
        create_acls(b, allow("app", AclOperation.READ, ResourceType.GROUP))
        assert join().error_code == E.topic_authorization_failed  # DESCRIBE on the topics
        create_acls(b, allow("input", AclOperation.DESCRIBE),
                    allow("app-store-changelog", AclOperation.DESCRIBE))
        r = join()
        assert r.error_code == 0
        assert [(s.status_code, s.status_detail) for s in r.status] == [(
            MISSING_INTERNAL_TOPICS, "Internal topics are missing: app-store-changelog; "
            "Unauthorized to CREATE on topics app-store-changelog.")]
        assert describe_as_alice().error_code == 0  # READ implies DESCRIBE
        create_acls(b, allow("app-store-changelog", AclOperation.CREATE))
        r = raw_request(b, 88, 0, heartbeat_request("app", "m1", r.member_epoch, owned=()))
        assert r.error_code == 0
        deadline = time.monotonic() + 20  # created in the background
        while "app-store-changelog" not in b.call(lambda broker: set(broker.logs.topics)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
