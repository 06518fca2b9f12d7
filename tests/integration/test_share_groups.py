"""Share groups (KIP-932, a preview behind share.version) with a real client:
confluent-kafka's ShareConsumer (librdkafka 2.16) against the in-process broker.

Each record of a share group goes to one member at a time: acknowledged (ACCEPT) it is
never delivered again, released (RELEASE) or left past its acquisition lock it comes
back with a higher delivery count, and the delivery state survives a crash
(``__share_group_state``). share.version is 2 by default, as on a new Kafka 4.4
cluster; at 0 the APIs are neither advertised nor served."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module
from txbroker.testing.broker_thread import BrokerThread

from tests.integration.wire_util import API_VERSIONS, api_versions_request, connect

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

ENABLED = {"txbroker.share.version": "1", "txbroker.share.auto.offset.reset": "earliest"}
SHARE_APIS = {76, 77, 78, 79}
N = 20


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def produce(bootstrap: str, topic: str, n: int = N, start: int = 0) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(10) == 0


def share_consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False,
                   **extra: str) -> ck.ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **extra}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ck.ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll_once(c, timeout: float = 1.0) -> list:
    return [m for m in c.poll(timeout) if m.error() is None]


def poll_until(c, want: int, timeout: float = 20, ack=None) -> list:
    """Messages until ``want`` arrived (or the timeout); ``ack(c, msgs)`` after each poll
    (explicit mode must acknowledge a poll's records before the next poll)."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msgs = poll_once(c)
        got += msgs
        if ack is not None and msgs:
            ack(c, msgs)
    return got


def accept(c, msgs) -> None:
    for m in msgs:
        c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    c.commit_sync(10)


def offsets(msgs) -> list[int]:
    return sorted(m.offset() for m in msgs)


def nothing_more(c, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if poll_once(c, 0.5):
            return False
    return True


def release_each_delivery(c, deliveries: int) -> None:
    """Offset 0, the only record, delivered ``deliveries`` times (delivery counts 1, 2,
    ...), each delivery RELEASEd."""
    for count in range(1, deliveries + 1):
        (m,) = poll_until(c, 1)
        assert (m.offset(), m.delivery_count()) == (0, count)
        c.acknowledge(m, ck.AcknowledgeType.RELEASE)
        c.commit_sync(10)


def test_explicit_accept_delivers_each_record_once(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t")
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        got = poll_until(c, N, ack=accept)
        assert offsets(got) == list(range(N))
        assert [m.value() for m in sorted(got, key=lambda m: m.offset())] == \
            [f"v{i}".encode() for i in range(N)]
        assert {m.delivery_count() for m in got} == {1}
        assert nothing_more(c)
    finally:
        c.close()
    # A new member of the group: everything was accepted, nothing comes back.
    c2 = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        produce(txbroker.bootstrap, "t", 1, start=N)
        got = poll_until(c2, 1, ack=accept)
        assert offsets(got) == [N]
        assert nothing_more(c2)
    finally:
        c2.close()


def test_implicit_mode_accepts_on_the_next_poll(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t")
    c = share_consumer(txbroker.bootstrap, "g", "t")
    try:
        got = poll_until(c, N)
        assert offsets(got) == list(range(N))
        assert nothing_more(c)  # (these polls accepted what the last one returned)
    finally:
        c.close()
    c2 = share_consumer(txbroker.bootstrap, "g", "t")
    try:
        assert nothing_more(c2, 3.0)
    finally:
        c2.close()


def test_two_consumers_share_one_partition_without_duplicates(txbroker):
    txbroker.create_topic("t")
    a = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    b = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    seen: dict[str, list] = {"a": [], "b": []}
    try:
        # Both join (and are both assigned partition 0) before records arrive.
        for c in (a, b):
            poll_once(c)
        total = 0
        deadline = time.monotonic() + 30
        for round_ in range(5):
            produce(txbroker.bootstrap, "t", 10, start=round_ * 10)
            total += 10
            while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
                for name, c in (("a", a), ("b", b)):
                    msgs = poll_once(c, 0.3)
                    seen[name] += msgs
                    if msgs:
                        accept(c, msgs)
        every = offsets(seen["a"] + seen["b"])
        assert every == list(range(total)), "a record lost or delivered twice"
    finally:
        a.close()
        b.close()


def test_release_redelivers_with_a_higher_delivery_count(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 5)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        first = poll_until(c, 5)
        assert offsets(first) == list(range(5)) and {m.delivery_count() for m in first} == {1}
        for m in first:
            c.acknowledge(m, ck.AcknowledgeType.RELEASE)
        c.commit_sync(10)
        again = poll_until(c, 5, ack=accept)
        assert offsets(again) == list(range(5))
        assert {m.delivery_count() for m in again} == {2}
        assert nothing_more(c)
    finally:
        c.close()


@pytest.mark.parametrize("txbroker_config", [
    {**ENABLED, "group.share.record.lock.duration.ms": "1000"}])
def test_lock_expiry_redelivers_to_another_member(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 5)
    a = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    b = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        held = poll_until(a, 5)  # acquired by a, never acknowledged
        assert offsets(held) == list(range(5))
        again = poll_until(b, 5, ack=accept)  # once a's locks expired (1 s)
        assert offsets(again) == list(range(5))
        assert {m.delivery_count() for m in again} == {2}
    finally:
        b.close()
        a.close()


def test_crash_keeps_accepted_records_and_redelivers_acquired_ones(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 10)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True,
                       **{"socket.timeout.ms": "2000"})
    got = poll_until(c, 10)
    assert offsets(got) == list(range(10))
    first, rest = got[:5], got[5:]
    for m in first:
        c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    # Explicit mode sends only what was acknowledged: the rest stays acquired.
    assert all(v is None for v in c.commit_sync(10).values())
    txbroker.crash()
    txbroker.restart()
    c2 = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        back = poll_until(c2, 5, timeout=30, ack=accept)
        assert offsets(back) == offsets(rest), "an ACCEPTed record came back, or one was lost"
        assert {m.delivery_count() for m in back} == {2}
        assert nothing_more(c2)
    finally:
        c2.close()
        del c  # its broker is gone; closing would wait for it


def advertised(broker) -> set[int]:
    client = connect(broker)
    try:
        r = client.request(API_VERSIONS, 3, api_versions_request(3))
        return {k.api_key for k in r.api_keys}
    finally:
        client.close()


def test_on_by_default_at_share_version_2_as_a_new_kafka_44_cluster(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {}) as b:
        client = connect(b)
        try:
            r = client.request(API_VERSIONS, 3, api_versions_request(3))
        finally:
            client.close()
        assert SHARE_APIS | {90, 91, 92} <= {k.api_key for k in r.api_keys}
        finalized = {f.name: (f.min_version_level, f.max_version_level)
                     for f in r.finalized_features}
        assert finalized["share.version"] == (2, 2)


def test_off_at_share_version_0_not_advertised_and_refused(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {"txbroker.share.version": "0",
                                            "txbroker.share.auto.offset.reset": "earliest"}) as b:
        assert not SHARE_APIS & advertised(b)
        b.create_topic("t")
        produce(b.bootstrap, "t", 3)
        c = share_consumer(b.bootstrap, "g", "t")
        try:
            assert nothing_more(c, 3.0)
        finally:
            c.close()
        # Sent anyway: UNSUPPORTED_VERSION in the answer, as Kafka's handler answers.
        m = request_module(76, 1)
        client = connect(b)
        try:
            r = client.request(76, 1, build(m.ShareGroupHeartbeatRequest, group_id="g",
                                            member_id=str(uuid.uuid4()), member_epoch=0,
                                            rack_id=None, subscribed_topic_names=("t",)))
            assert r.error_code == E.unsupported_version
        finally:
            client.close()
        assert b.call(lambda broker: broker.shares.listing()) == []


def test_enabled_by_update_features(tmp_path):
    from tests.integration.test_update_features import UPGRADE, update

    off = {"txbroker.share.version": "0"}
    with BrokerThread(str(tmp_path / "d"), off) as b:
        client = connect(b)
        try:
            assert update(client, [("share.version", 1, UPGRADE)]).error_code == 0
        finally:
            client.close()
        assert SHARE_APIS <= advertised(b)
    with BrokerThread(str(tmp_path / "d"), off) as b:  # the stored level survives a restart
        assert SHARE_APIS <= advertised(b)


def test_listed_and_described_as_a_share_group(txbroker):
    txbroker.create_topic("t", 2)
    c = share_consumer(txbroker.bootstrap, "sg", "t")
    try:
        deadline = time.monotonic() + 10
        while not txbroker.call(lambda b: b.shares.listing()) and time.monotonic() < deadline:
            poll_once(c, 0.2)
        m = request_module(77, 1)
        client = connect(txbroker)
        try:
            lm = request_module(16, 5)
            listed = client.request(16, 5, build(lm.ListGroupsRequest, states_filter=(),
                                                 types_filter=("share",)))
            assert [(g.group_id, g.protocol_type, g.group_state, g.group_type)
                    for g in listed.groups] == [("sg", "share", "Stable", "share")]
            r = client.request(77, 1, build(m.ShareGroupDescribeRequest, group_ids=("sg", "nope"),
                                            include_authorized_operations=False))
        finally:
            client.close()
        g, missing = r.groups
        assert (g.error_code, g.group_state, g.assignor_name) == (0, "Stable", "simple")
        assert len(g.members) == 1 and g.members[0].subscribed_topic_names == ("t",)
        assert sorted(g.members[0].assignment.topic_partitions[0].partitions) == [0, 1]
        assert missing.error_code == E.group_id_not_found
    finally:
        c.close()


def produce_transactions(bootstrap: str, topic: str) -> None:
    """Three committed, three aborted, three committed records (offsets 0-2, 4-6, 8-10;
    the markers at 3, 7 and 11)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx"})
    p.init_transactions(10)
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for j in range(3):
            p.produce(topic, value=f"{'c' if commit else 'a'}{i}{j}".encode())
        p.flush(10)
        if commit:
            p.commit_transaction(10)
        else:
            p.abort_transaction(10)


@pytest.mark.parametrize("txbroker_config", [
    {**ENABLED, "txbroker.share.isolation.level": "read_committed"}])
def test_read_committed_skips_aborted_records_and_markers(txbroker):
    txbroker.create_topic("t")
    produce_transactions(txbroker.bootstrap, "t")
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        got = poll_until(c, 6, ack=accept)
        assert offsets(got) == [0, 1, 2, 8, 9, 10]
        assert nothing_more(c)
    finally:
        c.close()


def test_read_uncommitted_delivers_aborted_records_but_no_markers(txbroker):
    txbroker.create_topic("t")
    produce_transactions(txbroker.bootstrap, "t")
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        got = poll_until(c, 9, ack=accept)
        assert offsets(got) == [0, 1, 2, 4, 5, 6, 8, 9, 10]
        assert nothing_more(c)
    finally:
        c.close()


def share_fetch(client, member: str, epoch: int, topic_id, *, max_wait_ms: int = 0,
                acks=(), version: int = 2):
    m = request_module(78, version)
    parts = (build(m.FetchPartition, partition_index=0, acknowledgement_batches=tuple(
        build(m.AcknowledgementBatch, first_offset=a, last_offset=b, acknowledge_types=(t,))
        for a, b, t in acks)),)
    return client.request(78, version, build(
        m.ShareFetchRequest, group_id="g", member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, max_records=100, batch_size=100,
        topics=(build(m.FetchTopic, topic_id=topic_id, partitions=parts),),
        forgotten_topics_data=()))


def share_ack(client, member: str, epoch: int, topic_id, acks, version: int = 2):
    m = request_module(79, version)
    return client.request(79, version, build(
        m.ShareAcknowledgeRequest, group_id="g", member_id=member, share_session_epoch=epoch,
        topics=(build(m.AcknowledgeTopic, topic_id=topic_id, partitions=(build(
            m.AcknowledgePartition, partition_index=0, acknowledgement_batches=tuple(
                build(m.AcknowledgementBatch, first_offset=a, last_offset=b,
                      acknowledge_types=(t,)) for a, b, t in acks)),)),)))


def test_share_session_epochs_on_the_wire(txbroker):
    topic_id = txbroker.create_topic("t").topic_id
    produce(txbroker.bootstrap, "t", 3)
    client = connect(txbroker)
    member = str(uuid.uuid4())
    try:
        r = share_fetch(client, member, 1, topic_id)
        assert r.error_code == E.share_session_not_found
        assert share_fetch(client, "", 0, topic_id).error_code == E.invalid_request
        assert share_fetch(client, member, 0, topic_id, acks=[(0, 0, 1)]).error_code == \
            E.invalid_request
        assert share_ack(client, "", 1, topic_id, ()).error_code == E.invalid_request
        assert share_ack(client, member, 0, topic_id, ()).error_code == E.invalid_share_session_epoch
        r = share_fetch(client, member, 0, topic_id)
        assert r.error_code == 0
        (part,) = r.responses[0].partitions
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in part.acquired_records] == [(0, 2, 1)]
        assert r.acquisition_lock_timeout.total_seconds() == 30
        assert share_fetch(client, member, 5, topic_id).error_code == E.invalid_share_session_epoch
        # Acknowledge offset 0 (ACCEPT) and 1 (RELEASE) on the session's epoch 1.
        r = share_ack(client, member, 1, topic_id, [(0, 0, 1), (1, 1, 2)])
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
        # Offset 1 was released: the member holds it no more (INVALID_RECORD_STATE).
        r = share_ack(client, member, 2, topic_id, [(1, 1, 1)])
        assert r.responses[0].partitions[0].error_code == E.invalid_record_state
        # Epoch 3: offset 1 comes back (count 2), 2 is still held; then nothing new
        # arrives within the long poll.
        started = time.monotonic()
        r = share_fetch(client, member, 3, topic_id, max_wait_ms=300)
        (part,) = r.responses[0].partitions
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in part.acquired_records] == [(1, 1, 2)]
        r = share_fetch(client, member, 4, topic_id, max_wait_ms=300)
        assert r.responses == () and time.monotonic() - started >= 0.3
        # Close (-1) with piggy-backed acknowledgements; the session is gone after.
        r = share_fetch(client, member, -1, topic_id, acks=[(1, 1, 1)])
        assert r.error_code == 0 and r.responses[0].partitions[0].acknowledge_error_code == 0
        assert share_fetch(client, member, 5, topic_id).error_code == E.share_session_not_found
    finally:
        client.close()


def test_a_share_group_id_is_not_a_consumer_group(txbroker):
    txbroker.create_topic("t")
    s = share_consumer(txbroker.bootstrap, "g", "t")
    try:
        deadline = time.monotonic() + 10
        while not txbroker.call(lambda b: b.shares.listing()) and time.monotonic() < deadline:
            poll_once(s, 0.2)
        m = request_module(68, 1)
        client = connect(txbroker)
        try:
            r = client.request(68, 1, build(
                m.ConsumerGroupHeartbeatRequest, group_id="g", member_id=str(uuid.uuid4()),
                member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("t",),
                subscribed_topic_regex=None, server_assignor=None, topic_partitions=()))
        finally:
            client.close()
        assert (r.error_code, r.error_message) == (E.group_id_not_found,
                                                   "Group g is not a consumer group.")
        # Nor a classic group, and it has no committed offsets (Kafka refuses all three).
        c = ck.Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g"})
        try:
            tp = ck.TopicPartition("t", 0, 1)
            with pytest.raises(ck.KafkaException, match="GROUP_ID_NOT_FOUND"):
                c.commit(offsets=[tp], asynchronous=False)
            with pytest.raises(ck.KafkaException, match="GROUP_ID_NOT_FOUND"):
                c.committed([ck.TopicPartition("t", 0)], timeout=10)
            p = ck.Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "x"})
            p.init_transactions(10)
            p.begin_transaction()
            with pytest.raises(ck.KafkaException, match="GROUP_ID_NOT_FOUND|not a consumer"):
                p.send_offsets_to_transaction([tp], c.consumer_group_metadata(), 10)
        finally:
            c.close()
        m = request_module(11, 9)
        client = connect(txbroker)
        try:
            r = client.request(11, 9, build(
                m.JoinGroupRequest, group_id="g", session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                group_instance_id=None, protocol_type="consumer", protocols=(), reason=None))
        finally:
            client.close()
        assert r.error_code == E.group_id_not_found
    finally:
        s.close()


def test_a_dropped_connection_releases_its_records_at_once(txbroker):
    """As Kafka's share-session cache: the session of a connection that closes goes, and
    what its member held is offered again without waiting for the lock (30 s here)."""
    topic_id = txbroker.create_topic("t").topic_id
    produce(txbroker.bootstrap, "t", 3)
    gone = connect(txbroker)
    r = share_fetch(gone, str(uuid.uuid4()), 0, topic_id)
    assert [(a.first_offset, a.last_offset) for a in r.responses[0].partitions[0].acquired_records] \
        == [(0, 2)]
    gone.close()
    client = connect(txbroker)
    try:
        deadline = time.monotonic() + 5
        while True:
            r = share_fetch(client, str(uuid.uuid4()), 0, topic_id, max_wait_ms=200)
            acquired = [(a.first_offset, a.last_offset, a.delivery_count)
                        for p in (r.responses[0].partitions if r.responses else ())
                        for a in p.acquired_records]
            if acquired or time.monotonic() > deadline:
                break
        assert acquired == [(0, 2, 2)]
    finally:
        client.close()


def test_sigkill_keeps_accepted_records_and_redelivers_acquired_ones(tmp_path):
    """The same as the crash above with a broker process killed by SIGKILL: what was
    answered was fsynced."""
    from txbroker.testing.broker_process import BrokerProcess

    broker = BrokerProcess(str(tmp_path / "d"), {**ENABLED, "group.initial.rebalance.delay.ms": "0"})
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
        produce(broker.bootstrap, "t", 10)
        c = share_consumer(broker.bootstrap, "g", "t", explicit=True)
        got = poll_until(c, 10)
        assert offsets(got) == list(range(10))
        for m in got[:5]:
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        assert all(v is None for v in c.commit_sync(10).values())
        broker.kill()
        broker.start()
        c2 = share_consumer(broker.bootstrap, "g", "t", explicit=True)
        try:
            back = poll_until(c2, 5, timeout=30, ack=accept)
            assert offsets(back) == offsets(got[5:])
            assert {m.delivery_count() for m in back} == {2}
            assert nothing_more(c2)
        finally:
            c2.close()
            del c
    finally:
        broker.kill()


def test_a_failed_state_write_delivers_nothing_and_is_undone(txbroker):
    """The acquisition's record cannot be appended (a full disk): the partition gets the
    write's error and no records, and the next fetch acquires them as if that one had
    not happened (delivery count 1): memory never runs ahead of the log."""
    from txbroker.coordinator.internal_topic import partition_for
    from txbroker.coordinator.share.persister import SHARE_STATE_TOPIC, coordinator_key

    from tests.integration.txn_util import fail_appends

    topic_id = txbroker.create_topic("t").topic_id
    client = connect(txbroker)
    member = str(uuid.uuid4())
    try:
        assert share_fetch(client, member, 0, topic_id).error_code == 0  # state initialized
        produce(txbroker.bootstrap, "t", 3)
        n = txbroker.call(lambda b: b.logs.topics[SHARE_STATE_TOPIC].partitions)
        failures = fail_appends(txbroker, SHARE_STATE_TOPIC,
                                partition_for(coordinator_key(("g", topic_id, 0)), n), 1,
                                control=False)
        r = share_fetch(client, member, 1, topic_id)
        assert failures["left"] == 0
        (part,) = r.responses[0].partitions
        assert part.error_code == E.not_coordinator and part.acquired_records == ()
        r = share_fetch(client, member, 2, topic_id)
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in r.responses[0].partitions[0].acquired_records] == [(0, 2, 1)]
    finally:
        client.close()


def heartbeat(client, group: str, member: str, epoch: int, topics=("t",)):
    m = request_module(76, 1)
    return client.request(76, 1, build(m.ShareGroupHeartbeatRequest, group_id=group,
                                       member_id=member, member_epoch=epoch, rack_id=None,
                                       subscribed_topic_names=topics))


def test_an_empty_group_is_forgotten_unless_it_has_delivery_state(txbroker):
    topic_id = txbroker.create_topic("t").topic_id
    client = connect(txbroker)
    try:
        for group in ("never-fetched", "g"):
            member = str(uuid.uuid4())
            r = heartbeat(client, group, member, 0)
            assert (r.error_code, r.member_epoch) == (0, 1)
            assert r.assignment.topic_partitions[0].topic_id == topic_id
            if group == "g":  # (share_fetch's group)
                assert share_fetch(client, member, 0, topic_id).error_code == 0
            assert heartbeat(client, group, member, -1, None).member_epoch == -1
        assert txbroker.call(lambda b: b.shares.listing()) == [("g", "Empty")]
    finally:
        client.close()


def test_after_a_restart_the_group_is_listed_and_deleting_it_deletes_its_state(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 3)
    c = share_consumer(txbroker.bootstrap, "g", "t")
    try:
        assert offsets(poll_until(c, 3)) == [0, 1, 2]
        assert nothing_more(c, 1.0)  # (accepts them)
    finally:
        c.close()
    txbroker.restart()
    assert txbroker.call(lambda b: b.shares.listing()) == [("g", "Empty")]
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    admin.delete_consumer_groups(["g"])["g"].result(10)
    assert txbroker.call(lambda b: b.shares.listing()) == []
    # Its delivery state is gone: the group starts again (earliest here).
    c = share_consumer(txbroker.bootstrap, "g", "t")
    try:
        assert offsets(poll_until(c, 3)) == [0, 1, 2]
    finally:
        c.close()


@pytest.mark.parametrize("txbroker_config", [
    {**ENABLED, "group.share.delivery.count.limit": "2"}])
def test_a_record_released_up_to_the_delivery_count_limit_is_archived(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 1)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        release_each_delivery(c, 2)
        assert nothing_more(c)  # archived after its second delivery
        produce(txbroker.bootstrap, "t", 1, start=1)
        assert offsets(poll_until(c, 1, ack=accept)) == [1]
    finally:
        c.close()


def test_a_rejected_record_is_never_delivered_again(txbroker):
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 2)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        got = poll_until(c, 2)
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.RELEASE)
        c.commit_sync(10)
        again = poll_until(c, 1, ack=accept)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(got[1].offset(), 2)]
        assert nothing_more(c)
    finally:
        c.close()
