"""Share-group offsets admin (KIP-932): DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets, what ``kafka-share-groups.sh
--describe --offsets / --reset-offsets / --delete-offsets`` send, against the
in-process broker with share.version 1, the records consumed by confluent-kafka's
ShareConsumer. confluent-kafka 2.16's AdminClient has no share-group offsets calls:
the admin requests go on the wire (RawClient)."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module
from txbroker.testing.broker_thread import BrokerThread

from tests.integration.test_share_groups import (
    ENABLED,
    accept,
    advertised,
    poll_until,
    produce,
    share_consumer,
)
from tests.integration.wire_util import connect

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

OFFSET_APIS = {90, 91, 92}


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def describe(broker, group: str, topics=None, version: int = 1):
    m = request_module(90, version)
    ts = None if topics is None else tuple(
        build(m.DescribeShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(ps))
        for t, ps in topics.items())
    client = connect(broker)
    try:
        r = client.request(90, version, build(m.DescribeShareGroupOffsetsRequest, groups=(
            build(m.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=ts),)))
    finally:
        client.close()
    (g,) = r.groups
    return g


def spso(group_result) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.start_offset
            for t in group_result.topics for p in t.partitions}


def alter(broker, group: str, offsets: dict[tuple[str, int], int]):
    m = request_module(91, 0)
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(
            build(m.AlterShareGroupOffsetsRequestPartition, partition_index=p, start_offset=o))
    client = connect(broker)
    try:
        return client.request(91, 0, build(m.AlterShareGroupOffsetsRequest, group_id=group,
                                           topics=tuple(
            build(m.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(ps))
            for t, ps in by_topic.items())))
    finally:
        client.close()


def delete(broker, group: str, topics: list[str]):
    m = request_module(92, 0)
    client = connect(broker)
    try:
        return client.request(92, 0, build(m.DeleteShareGroupOffsetsRequest, group_id=group,
                                           topics=tuple(
            build(m.DeleteShareGroupOffsetsRequestTopic, topic_name=t) for t in topics)))
    finally:
        client.close()


def wait_empty(broker, group: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while broker.call(lambda b: b.shares.share_group_state(group)) != "Empty":
        assert time.monotonic() < deadline, "the share group did not become empty"
        time.sleep(0.05)


def consume_accepting(broker, group: str, topic: str, n: int) -> list[int]:
    c = share_consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        got = poll_until(c, n, ack=accept)
    finally:
        c.close()
    wait_empty(broker, group)
    return sorted(m.offset() for m in got)


def test_describe_shows_the_start_offset_after_consuming(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 10)
    assert consume_accepting(txbroker, "g", "t", 10) == list(range(10))
    g = describe(txbroker, "g")  # null topics: every partition with a state
    assert g.error_code == 0
    (t,) = g.topics
    (p,) = t.partitions
    assert (t.topic_name, p.partition_index, p.start_offset, p.leader_epoch, p.lag,
            p.error_code) == ("t", 0, 10, 0, 0, 0)
    assert t.topic_id == txbroker.call(lambda b: b.logs.topics["t"].topic_id)
    # v0 (no lag), named topics: an unknown topic and a partition without share state
    # are "no offset information" (start offset -1, no error), as Kafka answers.
    g0 = describe(txbroker, "g", {"t": [0, 5], "nope": [0]}, version=0)
    assert spso(g0) == {("t", 0): 10, ("t", 5): -1, ("nope", 0): -1}
    assert [p.error_code for t in g0.topics for p in t.partitions] == [0, 0, 0]
    # Kafka checks no group here: an unknown group has no offsets, with no error.
    missing = describe(txbroker, "missing")
    assert (missing.error_code, missing.topics) == (0, ())


def test_alter_is_refused_while_the_group_has_members(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 5)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        assert len(poll_until(c, 5, ack=accept)) == 5
        r = alter(txbroker, "g", {("t", 0): 0})
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        assert delete(txbroker, "g", ["t"]).error_code == E.non_empty_group
    finally:
        c.close()
    assert spso(describe(txbroker, "g")) == {("t", 0): 5}


def test_alter_on_an_empty_group_then_a_consumer_starts_there(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 10)
    assert consume_accepting(txbroker, "g", "t", 10) == list(range(10))
    r = alter(txbroker, "g", {("t", 0): 4, ("t", 7): 0, ("nope", 0): 0})
    assert r.error_code == 0
    assert {(t.topic_name, p.partition_index): p.error_code
            for t in r.responses for p in t.partitions} == {
        ("t", 0): 0, ("t", 7): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition}
    assert spso(describe(txbroker, "g")) == {("t", 0): 4}
    # Durable: a crash keeps the altered start offset.
    txbroker.crash()
    txbroker.restart()
    assert spso(describe(txbroker, "g")) == {("t", 0): 4}
    assert consume_accepting(txbroker, "g", "t", 6) == list(range(4, 10))


def test_alter_creates_the_group(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 10)
    assert alter(txbroker, "new", {("t", 0): 7}).error_code == 0
    assert spso(describe(txbroker, "new")) == {("t", 0): 7}
    assert consume_accepting(txbroker, "new", "t", 3) == [7, 8, 9]
    # -1, Kafka's "uninitialized" start offset: no state, the next consumer starts
    # afresh from share.auto.offset.reset (earliest here).
    assert alter(txbroker, "new", {("t", 0): -1}).error_code == 0
    assert spso(describe(txbroker, "new", {"t": [0]})) == {("t", 0): -1}
    assert consume_accepting(txbroker, "new", "t", 10) == list(range(10))


def test_delete_removes_the_share_state(txbroker):
    txbroker.create_topic("t")
    txbroker.create_topic("u")
    produce(txbroker.bootstrap, "t", 10)
    assert consume_accepting(txbroker, "g", "t", 10) == list(range(10))
    r = delete(txbroker, "g", ["t", "nope"])
    assert r.error_code == 0
    assert [(t.topic_name, t.error_code) for t in r.responses] == [  # Kafka 4.4's order
        ("t", 0), ("nope", E.unknown_topic_or_partition)]
    again = delete(txbroker, "g", ["t"])  # nothing left to delete
    assert [(t.topic_name, t.error_code, t.error_message) for t in again.responses] == [
        ("t", E.unknown_topic_or_partition, "There is no offset information to delete.")]
    g = describe(txbroker, "g")
    assert g.error_code == 0 and g.topics == ()
    assert spso(describe(txbroker, "g", {"t": [0]})) == {("t", 0): -1}
    txbroker.crash()
    txbroker.restart()
    # The tombstones are durable.
    assert spso(describe(txbroker, "g", {"t": [0]})) == {("t", 0): -1}
    # The next consumer starts afresh (share.auto.offset.reset=earliest here).
    assert consume_accepting(txbroker, "g", "t", 10) == list(range(10))
    assert delete(txbroker, "missing", ["t"]).error_code == E.group_id_not_found


def test_off_at_share_version_0_not_advertised_and_refused(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {"txbroker.share.version": "0"}) as b:
        assert not OFFSET_APIS & advertised(b)
        b.create_topic("t")
        assert describe(b, "g").error_code == E.unsupported_version
        assert alter(b, "g", {("t", 0): 0}).error_code == E.unsupported_version
        assert delete(b, "g", ["t"]).error_code == E.unsupported_version


def test_advertised_at_share_version_1(txbroker):
    assert OFFSET_APIS <= advertised(txbroker)


def test_advertised_by_default(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {}) as b:
        assert OFFSET_APIS <= advertised(b)


def test_acls_as_kafka_checks_them(tmp_path):
    from confluent_kafka.admin import AclOperation, ResourceType

    from tests.integration.security.test_acls import (
        LISTENER,
        SECURE,
        USERS,
        allow,
        create_acls,
        raw_request,
    )

    with BrokerThread(str(tmp_path / "d"), {**SECURE, **ENABLED}, listeners=[LISTENER],
                      users=USERS) as b:
        b.create_topic("t")
        b.create_topic("u")
        create_acls(b, allow("g", AclOperation.DESCRIBE, ResourceType.GROUP),
                    allow("t", AclOperation.DESCRIBE))
        m = request_module(90, 1)

        def describe_as_alice(group, topics):
            ts = None if topics is None else tuple(
                build(m.DescribeShareGroupOffsetsRequestTopic, topic_name=t, partitions=(0,))
                for t in topics)
            (g,) = raw_request(b, 90, 1, build(m.DescribeShareGroupOffsetsRequest, groups=(
                build(m.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=ts),))).groups
            return g

        assert describe_as_alice("h", None).error_code == E.group_authorization_failed
        g = describe_as_alice("g", ["t", "u"])
        assert [(t.topic_name, t.partitions[0].error_code) for t in g.topics] == [
            ("t", 0), ("u", E.topic_authorization_failed)]

        am = request_module(91, 0)

        def alter_as_alice(topics):
            return raw_request(b, 91, 0, build(am.AlterShareGroupOffsetsRequest, group_id="g",
                                               topics=tuple(
                build(am.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=(
                    build(am.AlterShareGroupOffsetsRequestPartition, partition_index=0,
                          start_offset=0),)) for t in topics)))

        assert alter_as_alice(["t"]).error_code == E.group_authorization_failed  # READ
        create_acls(b, allow("g", AclOperation.READ, ResourceType.GROUP),
                    allow("t", AclOperation.READ))
        r = alter_as_alice(["t", "u"])
        assert r.error_code == 0
        assert {t.topic_name: t.partitions[0].error_code for t in r.responses} == {
            "t": 0, "u": E.topic_authorization_failed}

        dm = request_module(92, 0)
        delete_g = build(dm.DeleteShareGroupOffsetsRequest, group_id="g", topics=(
            build(dm.DeleteShareGroupOffsetsRequestTopic, topic_name="t"),))
        assert raw_request(b, 92, 0, delete_g).error_code == E.group_authorization_failed
        create_acls(b, allow("g", AclOperation.DELETE, ResourceType.GROUP))
        r = raw_request(b, 92, 0, delete_g)
        assert (r.error_code, [(t.topic_name, t.error_code) for t in r.responses]) == \
            (0, [("t", 0)])
