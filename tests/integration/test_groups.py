"""Consumer groups with real clients: rebalances on join, leave and crash with
commits after processing (no record lost, nothing committed read again), kcat
-G, simple (assign()-style) commits, admin APIs, static membership, compaction
and expiry of ``__consumer_offsets``.

Restarts of a broker process are in test_group_recovery.py.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from txbroker.coordinator.group.coordinator import OFFSETS_TOPIC
from txbroker.coordinator.group.records import GroupMetadataKey, OffsetKey, decode_key
from txbroker.coordinator.internal_topic import partition_for
from txbroker.testing import BrokerThread

from tests.helpers import wait_until

from .clients import KCAT, Msg, produce, stored_records
from .group_util import (
    GROUP_CONFIG,
    Feed,
    History,
    check_history,
    errors_of,
    ownership,
    unique_group,
)
from .group_worker import KAFKA_PYTHON_POLL_MS, Events, Member, MemberProcess, WorkerConfig


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(GROUP_CONFIG)


def committed(txbroker, group: str) -> dict[int, int]:
    error, found = txbroker.call(lambda b: b.groups.fetch_offsets(group, None, False))
    assert error == 0
    return {p: v[0] for (_t, p), v in found.items()}


# --- 1. rebalances on join, leave and crash ----------------------------------------------------

PARTITIONS = 6
CRASH_SESSION_MS = 2500
SESSION_MS = 6000  # the other members' (WorkerConfig's default)
HEARTBEAT_MS = 300


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_rebalances_on_join_leave_and_crash(txbroker, topic, tmp_path, client):
    """A alone; B joins; C (a process) joins; B leaves; C is SIGKILLed and removed
    after its session timeout. Assignments are disjoint and complete each time,
    nothing is lost, nothing committed is read again."""
    txbroker.create_topic(topic, PARTITIONS)
    group = unique_group(topic)

    def cfg(name: str, **kw) -> WorkerConfig:
        return WorkerConfig(client=client, bootstrap=txbroker.bootstrap, topic=topic,
                            group=group, name=name, heartbeat_interval_ms=HEARTBEAT_MS, **kw)

    events = Events()
    history = History(events)
    feed = Feed(txbroker.bootstrap, topic, PARTITIONS).start()
    members: list[Member] = []
    crashing = MemberProcess(cfg("C", session_timeout_ms=CRASH_SESSION_MS),
                             str(tmp_path / "member-C.events"))
    history.processes.append(crashing)
    try:
        members.append(Member(cfg("A"), events).start())
        t = history.wait_stable({"A"}, PARTITIONS)
        history.wait_commits("A", t, 2)

        members.append(Member(cfg("B"), events).start())
        t = history.wait_stable({"A", "B"}, PARTITIONS)
        history.wait_commits("B", t, 2)

        crashing.start()
        t = history.wait_stable({"A", "B", "C"}, PARTITIONS, timeout=45)
        history.wait_commits("C", t, 2)

        t_leave = time.monotonic()
        members[1].stop()  # B leaves (LeaveGroup): a rebalance right away
        t = history.wait_stable({"A", "C"}, PARTITIONS)
        assert t - t_leave < SESSION_MS / 1000 - 1, "the leave did not trigger a rebalance"
        history.wait_commits("C", t, 3)

        t_kill = time.monotonic()
        crashing.kill()
        history.gone.add("C")
        # The broker does not drop a member whose connection closed: it waits
        # for the session timeout.
        time.sleep(0.5)
        d = txbroker.call(lambda b: b.groups.state.describe(group))
        assert len(d.members) == 2, d
        t_alone = history.wait_stable({"A"}, PARTITIONS)
        waited = t_alone - t_kill
        # (its last heartbeat came up to an interval, more on a loaded machine, before the kill)
        assert waited >= CRASH_SESSION_MS / 1000 / 2, waited
        assert waited < CRASH_SESSION_MS / 1000 + 10, waited

        produced = feed.stop()
        ends = feed.end_offsets()

        def drained() -> bool:
            last = {}
            for e in history.all():
                if e["kind"] == "commit" and e["member"] == "A":
                    last.update({int(p): o for p, o in e["offsets"].items()})
            return all(last.get(p, 0) >= ends[p] for p in ends if ends[p])
        assert wait_until(drained, 30), "A did not commit up to the end of every partition"
        members[0].stop()
    finally:
        feed.abort()
        crashing.kill()
        for m in members:
            m.stop_event.set()
        for m in members:
            m.thread.join(30)

    evs = history.all()
    assert not errors_of(evs), errors_of(evs)
    stats = check_history(evs, produced)
    assert stats["delivered"] == len(produced)
    assert committed(txbroker, group) == ends
    d = txbroker.call(lambda b: b.groups.state.describe(group))
    assert d.state == "Empty" and not d.members


# --- 2. kcat -G ---------------------------------------------------------------------------------


def _kcat_group(bootstrap: str, group: str, topic: str) -> list[tuple[int, int, str]]:
    proc = subprocess.run(
        [KCAT, "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
         "-X", "session.timeout.ms=6000", "-e", "-q", "-f", "%p %o %s\n", topic],
        capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    out = []
    for line in proc.stdout.decode().splitlines():
        p, o, v = line.split(" ", 2)
        out.append((int(p), int(o), v))
    return sorted(out)


def test_kcat_balanced_consumer_commits(txbroker, topic):
    """kcat -G reads everything and commits it on exit; a second run of the same
    group gets only what was produced in between."""
    txbroker.create_topic(topic, 3)
    group = unique_group(topic)
    placed = produce("confluent", txbroker.bootstrap, topic,
                     [Msg(None, b"first-%d" % i, partition=i % 3) for i in range(30)])
    got = _kcat_group(txbroker.bootstrap, group, topic)
    assert [(p, o) for p, o, _v in got] == sorted(placed)
    assert committed(txbroker, group) == {0: 10, 1: 10, 2: 10}
    assert _kcat_group(txbroker.bootstrap, group, topic) == []

    more = produce("confluent", txbroker.bootstrap, topic,
                   [Msg(None, b"second-%d" % i, partition=i % 3) for i in range(6)])
    got = _kcat_group(txbroker.bootstrap, group, topic)
    assert [(p, o) for p, o, _v in got] == sorted(more)
    assert all(v.startswith("second-") for _p, _o, v in got)
    assert committed(txbroker, group) == {0: 12, 1: 12, 2: 12}
    d = txbroker.call(lambda b: b.groups.state.describe(group))
    assert d.state == "Empty" and d.protocol_type == "consumer"


# --- 3. simple (assign()-style) commits --------------------------------------------------------


def test_simple_commits_kafka_python(txbroker, topic):
    """Commits without subscribe (generation -1, no member id) and OffsetFetch."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.admin import KafkaAdminClient

    txbroker.create_topic(topic, 2)
    group = unique_group(topic)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 2) for i in range(20)])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=group,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        consumer.assign([tp0, tp1])
        assert consumer.committed(tp0) is None
        consumer.commit({tp0: OffsetAndMetadata(4, "four", -1),
                         tp1: OffsetAndMetadata(7, "", -1)})
        assert consumer.committed(tp0) == 4
        assert consumer.committed(tp1) == 7
        consumer.commit({tp0: OffsetAndMetadata(6, "six", -1)})
        assert consumer.committed(tp0, metadata=True).offset == 6
        assert consumer.committed(tp0, metadata=True).metadata == "six"
    finally:
        consumer.close()
    # A new assign()-style consumer of the group starts at the committed offsets.
    consumer = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=group,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([tp0, tp1])
        got: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 15
        while sum(map(len, got.values())) < 7 and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [m.offset for m in msgs]
        assert got == {0: [6, 7, 8, 9], 1: [7, 8, 9]}
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 6, 1: 7}
        assert offsets[tp0].metadata == "six"
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["protocol_type"] == ""  # offsets only, no membership
        assert listed[group]["group_state"] == "Empty"
    finally:
        admin.close()


def test_simple_commits_confluent(txbroker, topic):
    """The same with librdkafka: commit without subscribe, committed(), resume."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    txbroker.create_topic(topic, 2)
    group = unique_group(topic)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 2) for i in range(20)])
    conf = {"bootstrap.servers": txbroker.bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100}
    consumer = Consumer(conf)
    try:
        consumer.assign([CTP(topic, 0), CTP(topic, 1)])
        before = consumer.committed([CTP(topic, 0), CTP(topic, 1)], timeout=10)
        assert [tp.offset for tp in before] == [-1001, -1001]  # OFFSET_INVALID: none
        result = consumer.commit(offsets=[CTP(topic, 0, 3), CTP(topic, 1, 9)], asynchronous=False)
        assert all(tp.error is None for tp in result), result
        after = consumer.committed([CTP(topic, 0), CTP(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in after] == [(0, 3), (1, 9)]
    finally:
        consumer.close()
    consumer = Consumer(conf)
    try:
        consumer.assign([CTP(topic, 0), CTP(topic, 1)])
        got: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 15
        while sum(map(len, got.values())) < 8 and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=20, timeout=0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append(m.offset())
        assert got == {0: [3, 4, 5, 6, 7, 8, 9], 1: [9]}
    finally:
        consumer.close()


# --- 4. admin: list, describe, delete groups, delete offsets -----------------------------------


def test_group_admin_kafka_python(txbroker, topic):
    import kafka.errors as kerr
    from kafka import OffsetAndMetadata, TopicPartition
    from kafka.admin import KafkaAdminClient

    other = topic + "-other"
    txbroker.create_topic(topic, 2)
    txbroker.create_topic(other, 1)
    group = unique_group(topic)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 2) for i in range(10)])
    events = Events()
    history = History(events)
    member = Member(WorkerConfig(client="kafka-python", bootstrap=txbroker.bootstrap,
                                 topic=topic, group=group, name="M"), events).start()
    admin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    try:
        history.wait_stable({"M"}, 2)
        history.wait_commits("M", 0)
        assert wait_until(lambda: committed(txbroker, group) == {0: 5, 1: 5}, 10)

        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["group_state"] == "Stable"
        assert listed[group]["protocol_type"] == "consumer"
        assert group in {g["group_id"] for g in admin.list_groups(states_filter=["Stable"])}
        assert group not in {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}

        d = admin.describe_groups([group])[group]
        assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer"
        assert d["protocol_data"] in ("range", "roundrobin", "sticky")
        [m] = d["members"]
        assert m["client_id"] == "M" and m["client_host"] == "/127.0.0.1"
        assert m["member_metadata"]["topics"] == [topic]
        [assigned] = m["member_assignment"]["assigned_partitions"]
        assert assigned["topic"] == topic and sorted(assigned["partitions"]) == [0, 1]

        # While the group has members, only they may commit: the admin's commit
        # (generation -1, no member id) is refused, as are deleting the group and
        # deleting offsets of a topic the group consumes.
        res = admin.alter_group_offsets(group, {TopicPartition(other, 0): OffsetAndMetadata(1, "", -1)})
        assert set(res.values()) == {kerr.UnknownMemberIdError}, res
        assert dict(admin.delete_groups([group]))[group] == "NonEmptyGroupError"
        res = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
        assert res == {TopicPartition(topic, 0): kerr.GroupSubscribedToTopicError}, res

        member.stop()
        d = admin.describe_groups([group])[group]
        assert d["group_state"] == "Empty" and d["members"] == []

        res = admin.alter_group_offsets(group, {TopicPartition(other, 0): OffsetAndMetadata(1, "x", -1),
                                                TopicPartition(topic, 1): OffsetAndMetadata(2, "", -1)})
        assert set(res.values()) == {kerr.NoError}, res
        offsets = admin.list_group_offsets({group: None})[group]
        assert {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()} == {
            (topic, 0): 5, (topic, 1): 2, (other, 0): 1}

        res = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
        assert res == {TopicPartition(topic, 0): kerr.NoError}, res
        offsets = admin.list_group_offsets({group: None})[group]
        assert {(tp.topic, tp.partition) for tp in offsets} == {(topic, 1), (other, 0)}

        assert dict(admin.delete_groups([group]))[group] == "OK"
        assert group not in {g["group_id"] for g in admin.list_groups()}
        assert admin.describe_groups([group])[group]["group_state"] == "Dead"
        assert dict(admin.delete_groups([group]))[group] == "GroupIdNotFoundError"
        assert committed(txbroker, group) == {}
    finally:
        member.stop_event.set()
        member.thread.join(30)
        admin.close()


def test_group_admin_confluent(txbroker, topic):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    txbroker.create_topic(topic, 3)
    group = unique_group(topic)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 3) for i in range(9)])
    events = Events()
    history = History(events)
    members = [Member(WorkerConfig(client="confluent", bootstrap=txbroker.bootstrap,
                                   topic=topic, group=group, name=n), events).start()
               for n in ("M1", "M2")]
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    try:
        history.wait_stable({"M1", "M2"}, 3)
        assert wait_until(lambda: committed(txbroker, group) == {0: 3, 1: 3, 2: 3}, 15)

        listing = admin.list_consumer_groups(request_timeout=10).result(20)
        found = {g.group_id: g for g in listing.valid}
        assert found[group].state == ConsumerGroupState.STABLE
        assert not found[group].is_simple_consumer_group

        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
        assert d.state == ConsumerGroupState.STABLE and not d.is_simple_consumer_group
        assert d.partition_assignor in ("range", "roundrobin")
        assert sorted(m.client_id for m in d.members) == ["M1", "M2"]
        assigned = sorted((tp.topic, tp.partition) for m in d.members
                          for tp in m.assignment.topic_partitions)
        assert assigned == [(topic, 0), (topic, 1), (topic, 2)]

        [res] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=10).values()
        got = res.result(20)
        assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [
            (0, 3), (1, 3), (2, 3)]

        fut = admin.delete_consumer_groups([group], request_timeout=10)[group]
        with pytest.raises(KafkaException) as exc:
            fut.result(20)
        assert exc.value.args[0].name() == "NON_EMPTY_GROUP"
        [fut] = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [CTP(topic, 0, 1)])], request_timeout=10).values()
        [tp] = fut.result(20).topic_partitions
        assert tp.error is not None and tp.error.name() == "UNKNOWN_MEMBER_ID", tp.error

        for m in members:
            m.stop()
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
        assert d.state == ConsumerGroupState.EMPTY and not d.members

        [fut] = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [CTP(topic, 0, 1), CTP(topic, 2, 0)])],
            request_timeout=10).values()
        altered = fut.result(20)
        assert all(tp.error is None for tp in altered.topic_partitions)
        [res] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=10).values()
        got = res.result(20)
        assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [
            (0, 1), (1, 3), (2, 0)]

        admin.delete_consumer_groups([group], request_timeout=10)[group].result(20)
        listing = admin.list_consumer_groups(request_timeout=10).result(20)
        assert group not in {g.group_id for g in listing.valid}
        assert committed(txbroker, group) == {}
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.thread.join(30)


# --- 5. static membership (KIP-345) ------------------------------------------------------------


def test_static_member_restart_keeps_assignment(txbroker, topic):
    """A static member (group.instance.id) that restarts within its session timeout
    gets its partitions back; the other member is not rebalanced."""
    txbroker.create_topic(topic, 4)
    group = unique_group(topic)
    feed = Feed(txbroker.bootstrap, topic, 4, rate=100).start()
    events = Events()
    history = History(events)

    def member(name: str, instance: str) -> Member:
        return Member(WorkerConfig(client="confluent", bootstrap=txbroker.bootstrap,
                                   topic=topic, group=group, name=name, instance_id=instance,
                                   session_timeout_ms=6000), events).start()

    members = [member("A", "instance-a"), member("B", "instance-b")]
    try:
        history.wait_stable({"A", "B"}, 4)
        t = max(e["t"] for e in history.all() if e["kind"] == "assign")
        history.wait_commits("A", t)
        history.wait_commits("B", t)
        before = txbroker.call(lambda b: b.groups.state.inspect(group))
        assert before["state"] == "Stable"
        own_before = ownership(history.all(), set())
        revokes_b = sum(1 for e in history.all() if e["member"] == "B" and e["kind"] == "revoke")

        members[0].stop()  # a static member does not send LeaveGroup on close
        mid = txbroker.call(lambda b: b.groups.state.inspect(group))
        assert mid["state"] == "Stable" and len(mid["members"]) == 2
        members.append(member("A2", "instance-a"))
        history.wait_stable({"A2", "B"}, 4)
        t2 = max(e["t"] for e in history.all() if e["member"] == "A2" and e["kind"] == "assign")
        history.wait_commits("A2", t2)

        after = txbroker.call(lambda b: b.groups.state.inspect(group))
        own_after = ownership(history.all(), set())
        assert own_after["A2"] == own_before["A"]
        assert own_after["B"] == own_before["B"]
        assert after["generation_id"] == before["generation_id"]
        assert after["state"] == "Stable"
        assert sum(1 for e in history.all()
                   if e["member"] == "B" and e["kind"] == "revoke") == revokes_b
        ids_before = {m["group_instance_id"]: m["member_id"] for m in before["members"]}
        ids_after = {m["group_instance_id"]: m["member_id"] for m in after["members"]}
        assert ids_after["instance-b"] == ids_before["instance-b"]
        assert ids_after["instance-a"] != ids_before["instance-a"]  # a new member id
        produced = feed.stop()
        ends = feed.end_offsets()
        assert wait_until(lambda: committed(txbroker, group) == ends, 20)
    finally:
        feed.abort()
        for m in members:
            m.stop_event.set()
        for m in members:
            m.thread.join(30)
    check_history(history.all(), produced)


# --- 6. __consumer_offsets is compacted --------------------------------------------------------


def _offsets_records(broker_thread, group: str):
    n = broker_thread.call(lambda b: b.logs.topics[OFFSETS_TOPIC].partitions)
    return stored_records(broker_thread, OFFSETS_TOPIC, partition_for(group, n))


def _offsets_segments(broker_thread, group: str) -> list[list]:
    """The records of each segment of the group's __consumer_offsets partition."""
    from txbroker.protocol.records import decode_records, iter_batches

    def read(broker):
        n = broker.logs.topics[OFFSETS_TOPIC].partitions
        plog = broker.logs.get_log(OFFSETS_TOPIC, partition_for(group, n))
        out = []
        for seg in plog.segments:
            with open(seg.log_path, "rb") as f:
                data = f.read()
            out.append([r for pos, _h in iter_batches(data) for r in decode_records(data, pos)])
        return out

    return broker_thread.call(read)


def test_consumer_offsets_is_compacted(tmp_path, topic):
    """Many commits of the same partitions shrink to the latest record per key once
    the cleaner has run, and a restarted broker loads the latest offsets from the
    cleaned segments."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    overrides = dict(GROUP_CONFIG, **{"offsets.topic.num.partitions": "2",
                                      "offsets.topic.segment.bytes": "4096",
                                      "log.cleaner.backoff.ms": "50"})
    data_dir = str(tmp_path / "data")
    group = unique_group(topic)
    rounds, tail = 300, 100
    expected = {0: rounds * 10, 1: rounds * 10 + 1, 2: tail}
    with BrokerThread(data_dir, overrides) as broker:
        broker.create_topic(topic, 3)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                 enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in range(3)]
        try:
            consumer.assign(tps)
            for i in range(1, rounds + 1):
                consumer.commit({tp: OffsetAndMetadata(i * 10 + tp.partition, "", -1)
                                 for tp in tps[:2]})
            # Then only partition 2, so the latest records of 0 and 1 end up in
            # closed (cleanable) segments.
            for i in range(1, tail + 1):
                consumer.commit({tps[2]: OffsetAndMetadata(i, "", -1)})
        finally:
            consumer.close()
        written = rounds * 2 + tail

        def compacted() -> bool:
            # The cleaner never touches the active segment; below it, one record
            # per key is left (the latest the cleaned range held).
            closed = [r.key for seg in _offsets_segments(broker, group)[:-1] for r in seg]
            return len(closed) == len(set(closed))

        assert wait_until(compacted, 30, interval=0.2), "the cleaner did not compact"
        segs = _offsets_segments(broker, group)
        assert len(segs) > 1
        keys = {decode_key(r.key) for seg in segs for r in seg}
        assert keys == {OffsetKey(group, topic, p) for p in range(3)}
        left = sum(len(seg) for seg in segs)
        # At most one record per key in the closed segments, plus the active segment.
        assert left <= 3 + len(segs[-1]) < written / 5, (left, [len(s) for s in segs])
        latest_closed = {decode_key(r.key).partition for r in segs[0] + [
            r for seg in segs[1:-1] for r in seg]}
        assert {0, 1} <= latest_closed  # restart below must read them from cleaned segments
        assert committed(broker, group) == expected
    with BrokerThread(data_dir, overrides) as broker:
        assert wait_until(lambda: broker.call(lambda b: b.groups.loaded), 10)
        assert committed(broker, group) == expected


# --- 7. offsets expire --------------------------------------------------------------------------


def test_offsets_expire_for_empty_groups(txbroker, topic):
    """Offsets of an Empty group (after its members left, or that only ever committed
    without membership) expire after offsets.retention.minutes: OffsetFetch answers
    -1, tombstones are written and the group is removed. A Stable group keeps the
    offsets of the topics it consumes."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.admin import KafkaAdminClient

    txbroker.create_topic(topic, 2)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 2) for i in range(8)])
    left_group, simple_group, active_group = (unique_group(topic) for _ in range(3))
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    events = Events()
    members = {name: Member(WorkerConfig(client="kafka-python", bootstrap=txbroker.bootstrap,
                                         topic=topic, group=g, name=name), events).start()
               for g, name in ((left_group, "L"), (active_group, "S"))}
    admin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    try:
        simple = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=simple_group,
                               enable_auto_commit=False)
        try:
            simple.assign(tps)
            simple.commit({tp: OffsetAndMetadata(2, "", -1) for tp in tps})
        finally:
            simple.close()
        for g in (left_group, active_group):
            assert wait_until(lambda g=g: committed(txbroker, g) == {0: 4, 1: 4}, 20)
        members["L"].stop()
        assert txbroker.call(lambda b: b.groups.state.describe(left_group)).state == "Empty"

        # Nothing is old enough yet.
        assert txbroker.call(lambda b: b.groups.expire_offsets()) == 0
        retention_ms = txbroker.call(lambda b: b.groups.config.offsets_retention_ms)
        future = int(time.time() * 1000) + retention_ms + 60_000
        expired = txbroker.call(lambda b: b.groups.expire_offsets(future))
        assert expired == 4  # two partitions of left_group and of simple_group

        for g in (left_group, simple_group):
            assert committed(txbroker, g) == {}
            offsets = admin.list_group_offsets({g: tps})[g]
            assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: -1, 1: -1}
            assert g not in {x["group_id"] for x in admin.list_groups()}
            records = _offsets_records(txbroker, g)
            tombstones = {decode_key(r.key) for r in records if r.value is None}
            assert {OffsetKey(g, topic, 0), OffsetKey(g, topic, 1)} <= tombstones
        assert GroupMetadataKey(left_group) in {
            decode_key(r.key) for r in _offsets_records(txbroker, left_group) if r.value is None}
        # The active group keeps its offsets: it still consumes the topic.
        assert committed(txbroker, active_group) == {0: 4, 1: 4}
        assert txbroker.call(lambda b: b.groups.state.describe(active_group)).state == "Stable"
        # A consumer of the expired group starts over (auto.offset.reset=earliest).
        got = consume_group("kafka-python", txbroker.bootstrap, topic, left_group, 8)
        assert sorted(got) == [(p, o) for p in (0, 1) for o in range(4)]
    finally:
        for m in members.values():
            m.stop_event.set()
        for m in members.values():
            m.thread.join(30)
        admin.close()


def consume_group(client: str, bootstrap: str, topic: str, group: str, count: int,
                  timeout: float = 30) -> list[tuple[int, int]]:
    """A subscribe()-style consumer of ``group``: (partition, offset) of the first
    ``count`` records it reads (auto.offset.reset=earliest, no commits)."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    if client == "kafka-python":
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100)
        try:
            while len(got) < count and time.monotonic() < deadline:
                for msgs in consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
                    got += [(m.partition, m.offset) for m in msgs]
        finally:
            consumer.close()
    elif client == "aiokafka":
        import asyncio

        from aiokafka import AIOKafkaConsumer

        async def run() -> None:
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        fetch_max_wait_ms=100)
            await consumer.start()
            try:
                while len(got) < count and time.monotonic() < deadline:
                    for msgs in (await consumer.getmany(timeout_ms=200)).values():
                        got.extend((m.partition, m.offset) for m in msgs)
            finally:
                await consumer.stop()

        asyncio.run(run())
    else:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.wait.max.ms": 100})
        try:
            consumer.subscribe([topic])
            while len(got) < count and time.monotonic() < deadline:
                for m in consumer.consume(num_messages=100, timeout=0.2):
                    assert m.error() is None, m.error()
                    got.append((m.partition(), m.offset()))
        finally:
            consumer.close()
    return sorted(got)


# --- 8. COORDINATOR_LOAD_IN_PROGRESS -------------------------------------------------------------


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_clients_wait_while_the_coordinator_loads(txbroker, topic, client):
    """While the coordinator is (made to look) loading, FindCoordinator, JoinGroup,
    OffsetFetch... answer COORDINATOR_LOAD_IN_PROGRESS; clients retry, and once
    loaded the consumer starts at the committed offsets."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    txbroker.create_topic(topic, 2)
    group = unique_group(topic)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % 2) for i in range(20)])
    start = {0: 4, 1: 6}
    simple = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=group,
                           enable_auto_commit=False)
    try:
        simple.assign([TopicPartition(topic, p) for p in start])
        simple.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                       for p, o in start.items()})
    finally:
        simple.close()

    def set_loaded(value: bool) -> None:
        # Every __consumer_offsets partition loading again (or none).
        def apply(b) -> None:
            b.groups._loading = set() if value else set(
                range(b.logs.topics["__consumer_offsets"].partitions))
        txbroker.call(apply)

    set_loaded(False)
    result: dict = {}

    def run() -> None:
        try:
            result["got"] = consume_group(client, txbroker.bootstrap, topic, group,
                                          20 - sum(start.values()))
        except Exception as e:  # reported below
            result["error"] = e

    consumer = threading.Thread(target=run, daemon=True)
    try:
        consumer.start()
        time.sleep(1.5)
        assert "got" not in result and "error" not in result, result
        d = txbroker.call(lambda b: b.groups.state.describe(group))
        assert not d.members  # nobody got through JoinGroup
    finally:
        set_loaded(True)
    consumer.join(40)
    assert not consumer.is_alive()
    assert "error" not in result, result["error"]
    assert result["got"] == [(p, o) for p in (0, 1) for o in range(start[p], 10)]


def test_disk_error_storing_offsets_is_not_coordinator_and_the_retry_commits(
        txbroker, topic, caplog):
    """An OSError (ENOSPC) appending a group's offsets to __consumer_offsets is a
    storage error: logged once (a disk condition), answered NOT_COORDINATOR (Kafka's answer for
    KAFKA_STORAGE_ERROR), which kafka-python retries after finding the coordinator
    again; the offsets are then committed once."""
    import logging

    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    from .txn_util import fail_appends

    txbroker.create_topic(topic, 1)
    group = unique_group(topic)
    tp0 = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=group,
                             enable_auto_commit=False, retry_backoff_ms=50)
    try:
        consumer.assign([tp0])
        assert consumer.committed(tp0) is None  # the coordinator is found and loaded
        n = txbroker.call(lambda b: b.logs.topics[OFFSETS_TOPIC].partitions)
        failures = fail_appends(txbroker, OFFSETS_TOPIC, partition_for(group, n), 2,
                                control=False)
        with caplog.at_level(logging.ERROR):
            consumer.commit({tp0: OffsetAndMetadata(5, "", -1)})
        assert failures["left"] == 0
        # A full disk is the data directory's condition: said once when it starts (the
        # second refusal is counted for its summary), not once per refused commit.
        assert sum("No space left" in r.getMessage() and group in r.getMessage()
                   for r in caplog.records if r.levelno == logging.ERROR) == 1
        assert consumer.committed(tp0) == 5
    finally:
        consumer.close()
    committed = [r for r in stored_records(txbroker, OFFSETS_TOPIC, partition_for(group, n))
                 if isinstance(decode_key(r.key), OffsetKey)
                 and decode_key(r.key).group_id == group]
    assert len(committed) == 1
