"""Dead-letter topics of share groups (KIP-1191, share.version 2) with real clients:
confluent-kafka's ShareConsumer REJECTs a record, or releases one up to the delivery count
limit, and a plain Consumer reads the dead-letter topic the group config
``errors.deadletterqueue.topic.name`` names (set with AdminClient on the GROUP resource):
one record per archived record, with Kafka's ``__dlq.errors.*`` headers, and the original
key and value only with ``errors.deadletterqueue.copy.record.enable``."""

from __future__ import annotations

import time

import pytest

from tests.integration.share_progress import wait_start_offset
from tests.integration.test_share_group_configs import set_group_configs
from tests.integration.test_share_groups import (
    ck,
    offsets,
    poll_until,
    release_each_delivery,
    share_consumer,
)

CONFIG = {"txbroker.share.version": "2", "txbroker.share.auto.offset.reset": "earliest",
          "group.share.delivery.count.limit": "2"}
DLQ = "dlq.t"


@pytest.fixture
def txbroker_config():
    return dict(CONFIG)


def dead_letter_group(txbroker, group: str = "g", copy: bool = True) -> None:
    txbroker.create_topic("t")
    txbroker.create_topic(DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})
    set_group_configs(txbroker.bootstrap, group, **{
        "errors.deadletterqueue.topic.name": DLQ,
        "errors.deadletterqueue.copy.record.enable": "true" if copy else "false"})


def produce_keyed(bootstrap: str, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce("t", key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"x")])
    assert p.flush(10) == 0


def read_dead_letters(bootstrap: str, want: int, timeout: float = 20) -> list:
    """The dead-letter topic's records once ``want`` arrived and every record it holds
    (its high watermark) was read; fewer after the timeout."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(DLQ, 0, ck.OFFSET_BEGINNING)])  # no group join to wait for
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            high = c.get_watermark_offsets(ck.TopicPartition(DLQ, 0), timeout=10)[1]
            if len(got) >= max(want, high):
                break
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    return got


def headers(m) -> dict[str, bytes]:
    return dict(m.headers() or [])


def test_a_rejected_record_is_written_to_the_dead_letter_topic(txbroker):
    dead_letter_group(txbroker)
    produce_keyed(txbroker.bootstrap, 2)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        got = sorted(poll_until(c, 2), key=lambda m: m.offset())
        assert offsets(got) == [0, 1]
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.ACCEPT)
        assert all(v is None for v in c.commit_sync(10).values())
        (dead,) = read_dead_letters(txbroker.bootstrap, 1)
        assert headers(dead) == {
            "__dlq.errors.topic": b"t", "__dlq.errors.partition": b"0",
            "__dlq.errors.offset": b"0", "__dlq.errors.group": b"g",
            "__dlq.errors.delivery.count": b"1",
            "__dlq.errors.message": b"Offset rejected by client."}
        # The original key and value (copy.record.enable), not its headers.
        assert (dead.key(), dead.value()) == (b"k0", b"v0")
        assert dead.timestamp()[0] == ck.TIMESTAMP_CREATE_TIME
        wait_start_offset(txbroker, "g", "t", 2)  # archived: never delivered again
    finally:
        c.close()


def test_a_record_over_the_delivery_count_limit_is_written_without_its_data(txbroker):
    dead_letter_group(txbroker, copy=False)
    produce_keyed(txbroker.bootstrap, 1)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        release_each_delivery(c, 2)
        (dead,) = read_dead_letters(txbroker.bootstrap, 1)
        assert headers(dead)["__dlq.errors.delivery.count"] == b"2"
        assert headers(dead)["__dlq.errors.message"] == \
            b"Offset delivery count exceeded the threshold."
        assert (dead.key(), dead.value()) == (None, None)
        wait_start_offset(txbroker, "g", "t", 1)
    finally:
        c.close()


def test_without_the_group_config_nothing_is_dead_lettered(txbroker):
    txbroker.create_topic("t")
    txbroker.create_topic(DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})
    produce_keyed(txbroker.bootstrap, 1)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        (m,) = poll_until(c, 1)
        c.acknowledge(m, ck.AcknowledgeType.REJECT)
        c.commit_sync(10)
        wait_start_offset(txbroker, "g", "t", 1)  # archived, and nothing written first
    finally:
        c.close()
    assert read_dead_letters(txbroker.bootstrap, 0) == []


@pytest.mark.parametrize("action", ["crash", "power_loss"])
def test_a_dead_letter_record_is_never_lost_to_a_crash(txbroker, action):
    """The broker dies once the REJECT (ARCHIVING) is durable, before it answers: after
    the restart the dead-letter record is there, at least once (Kafka's guarantee: a
    crash between the dead-letter write and the ARCHIVED state writes it again)."""
    dead_letter_group(txbroker)
    produce_keyed(txbroker.bootstrap, 1)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True,
                       **{"socket.timeout.ms": "2000"})
    (m,) = poll_until(c, 1)
    c.acknowledge(m, ck.AcknowledgeType.REJECT)
    txbroker.faults.arm("after_share_acknowledge_durable", action)
    try:
        c.commit_sync(5)
    except ck.KafkaException:
        pass  # its answer never comes
    txbroker.wait_crashed()
    txbroker.restart()
    c2 = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        # (its fetches load the share-partition, which writes the record again)
        wait_start_offset(txbroker, "g", "t", 1, consumer=c2)
        dead = read_dead_letters(txbroker.bootstrap, 1)
        assert len(dead) >= 1
        assert {(d.key(), d.value(), headers(d)["__dlq.errors.offset"]) for d in dead} == \
            {(b"k0", b"v0", b"0")}
    finally:
        c2.close()
        del c  # its broker is gone; closing would wait for it


def test_share_version_2_gates_dead_letters_and_update_features_sets_it(tmp_path):
    """At share.version 1 the group config is there and a REJECT is archived without a
    dead-letter record; UpdateFeatures to 2 (3 is refused) turns them on for the next
    REJECT, as Kafka asks the finalized level at each archive."""
    from txbroker.testing.broker_thread import BrokerThread

    from tests.integration.test_update_features import INVALID_UPDATE_VERSION, UPGRADE, update
    from tests.integration.wire_util import connect

    with BrokerThread(str(tmp_path / "d"), {**CONFIG, "txbroker.share.version": "1"}) as b:
        dead_letter_group(b)
        produce_keyed(b.bootstrap, 2)
        c = share_consumer(b.bootstrap, "g", "t", explicit=True)
        try:
            got = sorted(poll_until(c, 2), key=lambda m: m.offset())
            c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
            c.acknowledge(got[1], ck.AcknowledgeType.RELEASE)
            c.commit_sync(10)
            client = connect(b)
            try:
                r = update(client, [("share.version", 3, UPGRADE)])
                assert r.error_code == INVALID_UPDATE_VERSION
                assert r.error_message.endswith("Local controller 1 only supports versions 0-2")
                assert update(client, [("share.version", 2, UPGRADE)]).error_code == 0
            finally:
                client.close()
            (again,) = poll_until(c, 1)
            assert (again.offset(), again.delivery_count()) == (1, 2)
            c.acknowledge(again, ck.AcknowledgeType.REJECT)
            c.commit_sync(10)
            dead = read_dead_letters(b.bootstrap, 1)
            assert [headers(d)["__dlq.errors.offset"] for d in dead] == [b"1"]
        finally:
            c.close()


def test_a_lock_expiring_at_the_delivery_count_limit_is_dead_lettered(tmp_path):
    """No acknowledgement at all: the second acquisition lock runs out at the limit (2)
    and the broker's own timer archives the record through the dead-letter topic."""
    from txbroker.testing.broker_thread import BrokerThread

    config = {**CONFIG, "group.share.record.lock.duration.ms": "1000"}
    with BrokerThread(str(tmp_path / "d"), config) as b:
        dead_letter_group(b)
        produce_keyed(b.bootstrap, 1)
        first = share_consumer(b.bootstrap, "g", "t", explicit=True)
        second = share_consumer(b.bootstrap, "g", "t", explicit=True)
        try:
            assert [m.delivery_count() for m in poll_until(first, 1)] == [1]
            assert [m.delivery_count() for m in poll_until(second, 1)] == [2]  # a's lock ran out
            (dead,) = read_dead_letters(b.bootstrap, 1)
            assert headers(dead)["__dlq.errors.delivery.count"] == b"2"
            assert headers(dead)["__dlq.errors.message"] == \
                b"Offset delivery count exceeded the threshold."
            assert (dead.key(), dead.value()) == (b"k0", b"v0")
        finally:
            second.close()
            first.close()
