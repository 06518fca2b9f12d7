"""KIP-848 consumer-protocol groups, txbroker vs Kafka 4.4.0: the versions served, the
``group.version`` feature, and what a confluent-kafka consumer with
``group.protocol=consumer`` sees."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer
from txbroker.protocol.messages import build, request_module

from tests.differential.util import describe_group
from tests.integration.consumer_util import owned, poll_until

API_VERSIONS = 18


def _api_versions(broker, version: int):
    m = request_module(API_VERSIONS, version)
    client = broker.raw()
    try:
        return client.request(API_VERSIONS, version, build(
            m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_versions_and_group_version_feature(broker):
    """ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0-1 are served, and
    ``group.version`` is supported 0-1 (listed from ApiVersions v4: v3 leaves out
    features whose minimum is 0) and finalized at 1, as on Kafka 4.3.1."""
    r = _api_versions(broker, 4)
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    supported = {f.name: (int(f.min_version), int(f.max_version)) for f in r.supported_features}
    finalized = {f.name: (int(f.min_version_level), int(f.max_version_level))
                 for f in r.finalized_features}
    assert ranges[68] == (0, 1)
    assert ranges[69] == (0, 1)
    assert supported["group.version"] == (0, 1)
    assert finalized["group.version"] == (1, 1)
    # Streams groups (KIP-1071): a new Kafka 4.4 cluster finalizes streams.version 1 and
    # advertises StreamsGroupHeartbeat / StreamsGroupDescribe 0-1.
    assert (supported["streams.version"], finalized["streams.version"]) == ((0, 1), (1, 1))
    assert (ranges[88], ranges[89]) == ((0, 1), (0, 1))


def test_two_members_split_then_one_takes_all(broker):
    """A consumer gets every partition; a second one joins and each ends with half,
    never sharing one; the first leaves and the second has them all again."""
    topic = broker.topic("cp-split", partitions=4)
    group = topic + "-g"
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "group.protocol": "consumer", "auto.offset.reset": "earliest"}
    a, b = Consumer(conf), Consumer(conf)
    shared = []
    try:
        a.subscribe([topic])
        assert poll_until([a], lambda: owned(a) == {0, 1, 2, 3})
        b.subscribe([topic])

        def halves():
            if owned(a) & owned(b):
                shared.append((owned(a), owned(b)))
            return len(owned(a)) == 2 and len(owned(b)) == 2

        assert poll_until([a, b], halves), (owned(a), owned(b))
        a.close()
        assert poll_until([b], lambda: owned(b) == {0, 1, 2, 3})
        assert not shared
    finally:
        b.close()


def test_transactional_offsets_with_member_epochs(broker):
    """TxnOffsetCommit with a consumer-protocol member's group metadata (Kafka 4.3,
    KIP-1251): an older member epoch still commits a partition the member has held since
    then, not one it gave up (ILLEGAL_GENERATION, abortable); after it left the group,
    UNKNOWN_MEMBER_ID."""
    from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

    topic = broker.topic("cp-eos", partitions=2)
    group = topic + "-g"
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "group.protocol": "consumer", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    first, second = Consumer(conf), Consumer(conf)
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": topic + "-tid"})
    try:
        first.subscribe([topic])
        assert poll_until([first], lambda: owned(first) == {0, 1})
        old = first.consumer_group_metadata()
        second.subscribe([topic])
        assert poll_until([first, second],
                           lambda: len(owned(first)) == 1 == len(owned(second)))
        kept, = owned(first)
        given, = owned(second)
        producer.init_transactions(30)

        def send(offsets, metadata):
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, p, o) for p, o in offsets.items()], metadata, 30)

        producer.begin_transaction()
        with pytest.raises(KafkaException) as excinfo:
            send({given: 5}, old)
        err = excinfo.value.args[0]
        assert err.code() == KafkaError.ILLEGAL_GENERATION and err.txn_requires_abort(), err
        producer.abort_transaction(30)

        producer.begin_transaction()
        send({kept: 7}, old)
        send({kept: 8}, first.consumer_group_metadata())
        producer.commit_transaction(30)
        got = second.committed([TopicPartition(topic, kept), TopicPartition(topic, given)], 30)
        assert {tp.partition: tp.offset for tp in got} == {kept: 8, given: -1001}

        current = first.consumer_group_metadata()
        first.close()
        first = None
        producer.begin_transaction()
        with pytest.raises(KafkaException) as excinfo:
            send({kept: 9}, current)
        assert excinfo.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        producer.abort_transaction(30)
    finally:
        for c in (first, second):
            if c is not None:
                c.close()


def test_admin_sees_a_consumer_protocol_group(broker):
    """ListGroups with the type filter lists the group as `consumer` (not `classic`),
    Stable; describe_consumer_groups (ConsumerGroupDescribe) shows the member with its
    assignment; DescribeGroups v5 answers it as Kafka does."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    topic = broker.topic("cp-admin", partitions=2)
    group = topic + "-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "client.id": "cp-admin-client"})
    try:
        c.subscribe([topic])
        assert poll_until([c], lambda: owned(c) == {0, 1})

        def listed(types):
            r = broker.admin.list_consumer_groups(types=types, request_timeout=30).result()
            return {g.group_id: g for g in r.valid}

        assert poll_until([c], lambda: getattr(
            listed({ConsumerGroupType.CONSUMER}).get(group), "state", None)
            == ConsumerGroupState.STABLE)
        g = listed({ConsumerGroupType.CONSUMER})[group]
        assert g.type == ConsumerGroupType.CONSUMER and not g.is_simple_consumer_group
        assert group not in listed({ConsumerGroupType.CLASSIC})

        d = broker.admin.describe_consumer_groups([group], request_timeout=30)[group].result()
        assert d.type == ConsumerGroupType.CONSUMER
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "uniform"
        (member,) = d.members
        assert member.client_id == "cp-admin-client"
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        assert {tp.topic for tp in member.assignment.topic_partitions} == {topic}

        assert describe_group(broker, group) == (0, "Dead", "", 0)
    finally:
        c.close()


def test_static_member_restart_keeps_its_assignment(broker):
    """A static member (group.instance.id) closes (leave with epoch -2) and a new
    consumer with the same instance id comes back: it gets the same partitions, and the
    other member's partitions never move."""
    topic = broker.topic("cp-static", partitions=4)
    group = topic + "-g"

    def member(instance):
        return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "group.instance.id": instance})

    a, b = member("a"), member("b")
    moved = []
    try:
        a.subscribe([topic])
        assert poll_until([a], lambda: owned(a) == {0, 1, 2, 3})
        b.subscribe([topic])
        assert poll_until([a, b], lambda: len(owned(a)) == 2 == len(owned(b)))
        mine, theirs = owned(a), owned(b)
        a.close()
        a = member("a")
        a.subscribe([topic])

        def back():
            if owned(b) != theirs:
                moved.append(owned(b))
            return owned(a) == mine

        assert poll_until([a, b], back), (owned(a), mine)
        assert not moved, moved
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_regex_subscription_picks_up_a_new_topic(broker):
    """A consumer subscribed by regular expression gets the matching topics, and a
    matching topic created later within the coordinator's regex refresh (Kafka: at most
    every 10 s); a regex that does not compile is INVALID_REGULAR_EXPRESSION."""
    import datetime
    import uuid

    prefix = broker.topic("cp-rx", partitions=2)
    group = prefix + "-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.protocol": "consumer"})
    try:
        c.subscribe([f"^{prefix}.*"])
        assert poll_until([c], lambda: len(c.assignment()) == 2)
        broker.create_topic(prefix + "-two", 1)
        assert poll_until([c], lambda: len(c.assignment()) == 3, timeout=40)
        assert {tp.topic for tp in c.assignment()} == {prefix, prefix + "-two"}
    finally:
        c.close()
    m = request_module(68, 1)
    client = broker.raw()
    try:
        broker.wait_coordinator(group + "-bad", key_type=0)
        r = client.request(68, 1, build(
            m.ConsumerGroupHeartbeatRequest, group_id=group + "-bad",
            member_id=str(uuid.uuid4()), member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=1), subscribed_topic_names=None,
            subscribed_topic_regex="(a", topic_partitions=()))
    finally:
        client.close()
    assert int(r.error_code) == 128, r
    assert r.error_message.startswith("SubscribedTopicRegex `(a` is not a valid regular "
                                      "expression: "), r


def test_offset_commit_and_fetch_v10_by_topic_id(broker):
    """OffsetCommit v10 and OffsetFetch v10 name topics by id: a simple commit (member
    epoch -1) is read back by id; an id no topic has is UNKNOWN_TOPIC_ID."""
    import uuid

    from tests.integration.wire_util import metadata_request

    topic = broker.topic("cp-v10", partitions=2)
    group = topic + "-g"
    broker.wait_coordinator(group, key_type=0)
    client = broker.raw()
    try:
        md = client.request(3, 12, metadata_request([topic]))
        (tid,) = [t.topic_id for t in md.topics if t.name == topic]
        ghost = uuid.uuid4()
        oc = request_module(8, 10)
        r = client.request(8, 10, build(
            oc.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None, topics=tuple(
                build(oc.OffsetCommitRequestTopic, topic_id=t, partitions=(build(
                    oc.OffsetCommitRequestPartition, partition_index=1, committed_offset=42,
                    committed_leader_epoch=-1, committed_metadata="m"),))
                for t in (tid, ghost))))
        # Kafka answers the unknown ids first, then what the coordinator wrote.
        assert [(t.topic_id, [(int(p.partition_index), int(p.error_code)) for p in t.partitions])
                for t in r.topics] == [(ghost, [(1, 100)]), (tid, [(1, 0)])]
        of = request_module(9, 10)
        r = client.request(9, 10, build(of.OffsetFetchRequest, require_stable=True, groups=(
            build(of.OffsetFetchRequestGroup, group_id=group, member_id=None, member_epoch=-1,
                  topics=tuple(build(of.OffsetFetchRequestTopics, topic_id=t,
                                     partition_indexes=(0, 1)) for t in (tid, ghost))),)))
        (g,) = r.groups
        assert int(g.error_code) == 0
        got = {(t.topic_id, int(p.partition_index)): (int(p.committed_offset), int(p.error_code))
               for t in g.topics for p in t.partitions}
        assert got == {(tid, 0): (-1, 0), (tid, 1): (42, 0),
                       (ghost, 0): (-1, 100), (ghost, 1): (-1, 100)}
    finally:
        client.close()


def test_kafka_consumer_groups_tool_on_a_consumer_protocol_group(broker, jvm_classes, tmp_path):
    """Kafka's console consumer with group.protocol=consumer reads and commits; then
    kafka-consumer-groups lists the group, describes its offsets and its state (the
    Admin client's describeConsumerGroups: ConsumerGroupDescribe) and deletes it."""
    from confluent_kafka import Producer

    from tests.differential.jvm import run_tools

    b = ["--bootstrap-server", broker.bootstrap]
    topic = broker.topic("cp-tool")
    group = topic + "-g"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in ("v1", "v2", "v3"):
        p.produce(topic, v.encode(), partition=0)
    p.flush(30)
    r = run_tools(jvm_classes, tmp_path / "run", [
        ["kafka-console-consumer", *b, "--topic", topic, "--from-beginning", "--group", group,
         "--max-messages", "3", "--timeout-ms", "20000",
         "--consumer-property", "group.protocol=consumer"],
        ["kafka-consumer-groups", *b, "--list", "--type", "consumer"],
        ["kafka-consumer-groups", *b, "--describe", "--group", group],
        ["kafka-consumer-groups", *b, "--describe", "--group", group, "--state"],
        ["kafka-consumer-groups", *b, "--delete", "--group", group],
    ])
    for result in r:
        assert result.exit == 0, result
    consumed, listed, described, state, deleted = r
    assert "Processed a total of 3 messages" in consumed.output
    assert [group, "Consumer"] in [line.split() for line in listed.lines()], listed.output
    row = [line.split() for line in described.lines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert [x[1:6] for x in row] == [[topic, "0", "3", "3", "0"]], described.output
    srow = [line.split() for line in state.lines() if line.startswith(group)]
    # GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS
    assert [x[-3:] for x in srow] == [["uniform", "Empty", "0"]], state.output
    assert deleted.lines() == [f"Deletion of requested consumer groups ('{group}') was successful."]


def test_groups_describe_of_a_live_consumer_protocol_member(broker, jvm_classes, tmp_path):
    """A live group.protocol=consumer member: Kafka's kafka-consumer-groups --describe
    --members --verbose and --state --verbose, and txbroker groups describe (which
    falls back to ConsumerGroupDescribe when DescribeGroups answers Dead), show the
    same member, epochs and assignment, on either broker."""
    from tests.differential.jvm import run_tools
    from tests.integration.tools.test_tools import cli

    topic = broker.topic("cp-describe", partitions=2)
    group = topic + "-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "client.id": "cp-describe-client"})
    b = ["--bootstrap-server", broker.bootstrap]
    try:
        c.subscribe([topic])

        def stable():
            out = cli("groups", *b, "describe", "--group", group, "--state").stdout
            return owned(c) == {0, 1} and "Stable" in out.split()

        assert poll_until([c], stable)
        kafka_members, kafka_state = run_tools(jvm_classes, tmp_path / "run", [
            ["kafka-consumer-groups", *b, "--describe", "--group", group, "--members",
             "--verbose"],
            ["kafka-consumer-groups", *b, "--describe", "--group", group, "--state",
             "--verbose"],
        ])
        ours_members = cli("groups", *b, "describe", "--group", group, "--members",
                           "--verbose")
        ours_state = cli("groups", *b, "describe", "--group", group, "--state", "--verbose")
    finally:
        c.close()

    def rows(text: str, header_start: str) -> list[dict[str, str]]:
        lines = [line for line in text.splitlines() if line.strip()]
        i = next(n for n, line in enumerate(lines) if line.startswith(header_start))
        header = lines[i].split()
        return [dict(zip(header, line.split(), strict=True)) for line in lines[i + 1:]]

    assert kafka_members.exit == 0 and ours_members.returncode == 0, (kafka_members,
                                                                     ours_members.stderr)
    [k], [o] = rows(kafka_members.output, "GROUP"), rows(ours_members.stdout, "GROUP")
    same = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
            "TARGET-EPOCH"]
    assert {n: o[n] for n in same} == {n: k[n] for n in same}, (kafka_members.output,
                                                               ours_members.stdout)
    assert o["CLIENT-ID"] == "cp-describe-client" and o["#PARTITIONS"] == "2"
    assert int(o["CURRENT-EPOCH"]) >= 1
    both = f"{topic}-0,{topic}-1"
    assert o["CURRENT-ASSIGNMENT"] == o["TARGET-ASSIGNMENT"] == both, ours_members.stdout
    def state_row(text: str) -> dict[str, str]:
        # The coordinator column differs (Kafka: host:port (id)); the last five agree.
        lines = [line.split() for line in text.splitlines() if line.strip()]
        i = next(n for n, line in enumerate(lines) if line[0] == "GROUP")
        [row] = lines[i + 1:]
        return dict(zip(lines[i][-5:], row[-5:], strict=True)) | {"GROUP": row[0]}

    k, o = state_row(kafka_state.output), state_row(ours_state.stdout)
    assert kafka_state.exit == 0 and o == k, (kafka_state.output, ours_state.stdout)
    assert (o["ASSIGNMENT-STRATEGY"], o["STATE"], o["#MEMBERS"]) == ("uniform", "Stable", "1")
    assert o["GROUP-EPOCH"] == o["TARGET-ASSIGNMENT-EPOCH"] != "-"
