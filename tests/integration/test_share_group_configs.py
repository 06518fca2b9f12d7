"""A share group's own share.* group configs (IncrementalAlterConfigs on a GROUP config
resource, as Kafka 4.4 takes them) with real clients: confluent-kafka's AdminClient sets
and describes them, a ShareConsumer shows they take effect for that group only."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.integration.test_share_groups import (
    accept,
    heartbeat,
    offsets,
    poll_until,
    produce,
    release_each_delivery,
    share_consumer,
)
from tests.integration.wire_util import connect

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

# The broker's default share.auto.offset.reset stays Kafka's: latest.
SHARE_ON = {"txbroker.share.version": "1"}


@pytest.fixture
def txbroker_config():
    return dict(SHARE_ON)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of ``configs`` (dots written as underscores)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    assert admin.incremental_alter_configs([res])[res].result(15) is None


def describe_group_configs(bootstrap: str, group: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([res])[res].result(15)


def test_admin_client_sets_describes_and_refuses_group_configs(txbroker):
    set_group_configs(txbroker.bootstrap, "g", share_delivery_count_limit="3",
                      errors_deadletterqueue_topic_name="dlq.g")
    configs = describe_group_configs(txbroker.bootstrap, "g")
    assert (configs["share.delivery.count.limit"].value,
            configs["share.delivery.count.limit"].source) == (
        "3", ConfigSource.GROUP_CONFIG.value)
    assert configs["errors.deadletterqueue.topic.name"].value == "dlq.g"
    assert (configs["share.record.lock.duration.ms"].value,
            configs["share.record.lock.duration.ms"].source) == (
        "30000", ConfigSource.DEFAULT_CONFIG.value)
    assert "share.assignor.offload.enable" not in configs  # internal, not set
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    bad = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[ConfigEntry(
        "share.delivery.count.limit", "11", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as e:
        admin.incremental_alter_configs([bad])[bad].result(15)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    assert "share.delivery.count.limit must be in the range 2 to 10 inclusive." in str(e.value)
    assert describe_group_configs(txbroker.bootstrap, "g")[
        "share.delivery.count.limit"].value == "3"


def test_auto_offset_reset_per_group(txbroker):
    """earliest for one group, the broker's latest for another."""
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 5)
    set_group_configs(txbroker.bootstrap, "early", share_auto_offset_reset="earliest")
    c = share_consumer(txbroker.bootstrap, "early", "t", explicit=True)
    try:
        assert offsets(poll_until(c, 5, ack=accept)) == list(range(5))
    finally:
        c.close()
    late = share_consumer(txbroker.bootstrap, "late", "t", explicit=True)
    try:
        # Records produced while it polls: the first it gets is past the five before it.
        got: list = []
        n = 5
        while not got and n < 60:
            produce(txbroker.bootstrap, "t", 1, start=n)
            n += 1
            got = poll_until(late, 1, timeout=1, ack=accept)
        assert got and min(offsets(got)) >= 5
    finally:
        late.close()


def test_auto_offset_reset_by_duration(txbroker):
    """by_duration:PT1H starts at the first record of the last hour: all of them here."""
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 3)
    set_group_configs(txbroker.bootstrap, "g", share_auto_offset_reset="by_duration:PT1H")
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        assert offsets(poll_until(c, 3, ack=accept)) == [0, 1, 2]
    finally:
        c.close()


def release_twice_then(bootstrap: str, group: str, topic: str) -> list:
    """Offset 0 of ``topic`` delivered and RELEASEd twice, then record 1 produced: what
    the group gets until record 1 arrives (offset 0 first if it is still available)."""
    c = share_consumer(bootstrap, group, topic, explicit=True)
    try:
        release_each_delivery(c, 2)
        produce(bootstrap, topic, 1, start=1)
        got: list = []
        while 1 not in offsets(got):
            more = poll_until(c, 1, timeout=20, ack=accept)
            assert more, "record 1 never came"
            got += more
        return [(m.offset(), m.delivery_count()) for m in got]
    finally:
        c.close()


def test_delivery_count_limit_per_group(txbroker):
    """share.delivery.count.limit=2 archives a record released twice; another group
    (the broker's 5) gets it a third time."""
    for topic in ("t2", "t5"):
        txbroker.create_topic(topic)
        produce(txbroker.bootstrap, topic, 1)
    set_group_configs(txbroker.bootstrap, "two", share_auto_offset_reset="earliest",
                      share_delivery_count_limit="2")
    set_group_configs(txbroker.bootstrap, "five", share_auto_offset_reset="earliest")
    assert release_twice_then(txbroker.bootstrap, "two", "t2") == [(1, 1)]
    assert release_twice_then(txbroker.bootstrap, "five", "t5") == [(0, 3), (1, 1)]


@pytest.mark.parametrize("txbroker_config", [
    {**SHARE_ON, "group.share.min.record.lock.duration.ms": "1000"}])
def test_record_lock_duration_per_group(txbroker):
    """A 1 s lock of the group's own (the broker's is 30 s): what one member acquired and
    left unacknowledged goes to another member."""
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 3)
    set_group_configs(txbroker.bootstrap, "g", share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="1000")
    a = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    b = share_consumer(txbroker.bootstrap, "g", "t", explicit=True)
    try:
        held = poll_until(a, 3)
        assert offsets(held) == [0, 1, 2]
        again = poll_until(b, 3, ack=accept)
        assert offsets(again) == [0, 1, 2]
        assert {m.delivery_count() for m in again} == {2}
    finally:
        b.close()
        a.close()


def test_isolation_level_per_group(txbroker):
    """read_committed for one group: an aborted transaction's records are not delivered
    to it; the other group (read_uncommitted, Kafka's default) gets them."""
    txbroker.create_topic("t")
    p = ck.Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "tx"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("t", value=b"aborted")
    p.flush(10)
    p.abort_transaction(10)
    produce(txbroker.bootstrap, "t", 1)
    for group, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
        set_group_configs(txbroker.bootstrap, group, share_auto_offset_reset="earliest",
                          share_isolation_level=level)
    values = {}
    for group, want in (("rc", 1), ("ru", 2)):
        c = share_consumer(txbroker.bootstrap, group, "t", explicit=True)
        try:
            values[group] = sorted(m.value() for m in poll_until(c, want, ack=accept))
        finally:
            c.close()
    assert values == {"rc": [b"v0"], "ru": [b"aborted", b"v0"]}


@pytest.mark.parametrize("txbroker_config", [
    {**SHARE_ON, "group.share.min.session.timeout.ms": "1000",
     "group.share.min.heartbeat.interval.ms": "100"}])
def test_heartbeat_interval_and_session_timeout_per_group(txbroker):
    """The group's share.heartbeat.interval.ms is what its members are told; past its
    share.session.timeout.ms (2 s, the broker's is 45 s) a silent member is gone."""
    txbroker.create_topic("t")
    set_group_configs(txbroker.bootstrap, "g", share_heartbeat_interval_ms="700",
                      share_session_timeout_ms="2000")
    sock = connect(txbroker)
    try:
        member = str(uuid.uuid4())
        r = heartbeat(sock, "g", member, 0)
        assert (r.error_code, r.heartbeat_interval) == (
            E.none, datetime.timedelta(milliseconds=700)), r
        r2 = heartbeat(sock, "other", str(uuid.uuid4()), 0)
        assert r2.heartbeat_interval == datetime.timedelta(seconds=5)  # the broker's
        # Removed by the group's session timeout: well before the broker's (45 s) is due.
        deadline = time.monotonic() + 20
        while members(sock, "g"):
            assert time.monotonic() < deadline, "the group's session timeout was not applied"
            time.sleep(0.1)
        assert members(sock, "other")  # (the broker's timeout: still there)
        assert heartbeat(sock, "g", member, int(r.member_epoch)).error_code == \
            E.unknown_member_id
    finally:
        sock.close()


def members(sock, group: str) -> tuple:
    """ShareGroupDescribe's members of ``group`` (none once it is forgotten: an empty
    group without delivery state is)."""
    m = request_module(77, 1)
    (g,) = sock.request(77, 1, build(m.ShareGroupDescribeRequest, group_ids=(group,),
                                     include_authorized_operations=False)).groups
    assert g.error_code in (E.none, E.group_id_not_found), g
    return g.members
