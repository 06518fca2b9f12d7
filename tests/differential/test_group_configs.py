"""Group configs (config resource type 32), txbroker vs Kafka 4.4: a consumer group's own
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``, and the share.*
and errors.deadletterqueue.* group configs, checked against the broker's min/max keys
with Kafka's errors, listed by DescribeConfigs as Kafka lists them (values, sources,
types, synonyms, internal keys), and applied: to a consumer group's next heartbeats, and
to a share group's deliveries with confluent-kafka's ShareConsumer; the streams.* ones
are checked and listed (issue 38: txbroker refused every group config, saying it did not
implement KIP-848)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from txbroker.protocol.messages import build, request_module

from tests.differential.conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker

ck = pytest.importorskip("confluent_kafka")

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, HEARTBEAT = 32, 33, 44, 68
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"
INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_MEMBER_ID = 40, 42, 25
# ConfigSource: GROUP_CONFIG 8, STATIC_BROKER_CONFIG 4, DEFAULT_CONFIG 5.
GROUP_SOURCE, BROKER_SOURCE, DEFAULT_SOURCE = 8, 4, 5


def _alter(client, group: str, ops, validate_only: bool = False) -> tuple[int, str | None]:
    m = request_module(INCREMENTAL_ALTER_CONFIGS, 1)
    r = client.request(INCREMENTAL_ALTER_CONFIGS, 1, build(
        m.IncrementalAlterConfigsRequest, validate_only=validate_only, resources=(build(
            m.AlterConfigsResource, resource_type=GROUP, resource_name=group, configs=tuple(
                build(m.AlterableConfig, name=n, config_operation=op, value=v)
                for n, op, v in ops)),)))
    (res,) = r.responses
    return int(res.error_code), res.error_message


def _describe_settled(client, group: str, key: str, value: str, timeout: float = 10):
    """``_describe`` once the config reads ``value``, or the last answer after ``timeout``:
    Kafka applies a config change through its metadata log, so a DescribeConfigs right
    after the change may still read the old value (txbroker answers it at once)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = _describe(client, group, key)
        if answer[0] == value or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def _describe(client, group: str, key: str):
    """(value, source, synonyms as (name, value, source)) of one group config."""
    m = request_module(DESCRIBE_CONFIGS, 4)
    r = client.request(DESCRIBE_CONFIGS, 4, build(
        m.DescribeConfigsRequest, include_synonyms=True, include_documentation=False,
        resources=(build(m.DescribeConfigsResource, resource_type=GROUP, resource_name=group,
                         configuration_keys=(key,)),)))
    (res,) = r.results
    assert int(res.error_code) == 0, res
    (c,) = res.configs
    return c.value, int(c.config_source), [(s.name, s.value, int(s.source)) for s in c.synonyms]


@pytest.mark.kafka_ci
def test_group_config_checks_describe_and_delete(broker):
    group = f"gc-{uuid.uuid4().hex[:8]}"
    session, interval = (COMMON_CONFIG["group.consumer.session.timeout.ms"],
                         COMMON_CONFIG["group.consumer.heartbeat.interval.ms"])
    client = broker.raw()
    try:
        bad = [
            ([("foo.bar", SET, "1")], INVALID_CONFIG, "Unknown group config name: foo.bar"),
            ([(SESSION, SET, "500")], INVALID_CONFIG,
             f"{SESSION} must be in the range 1000 to 60000 inclusive."),
            ([(INTERVAL, SET, "50")], INVALID_CONFIG,
             f"{INTERVAL} must be in the range 100 to 15000 inclusive."),
            ([(SESSION, SET, "abc")], INVALID_CONFIG,
             f"Invalid value abc for configuration {SESSION}: Not a number of type INT"),
            ([(INTERVAL, SET, session)], INVALID_CONFIG,  # the broker's session timeout
             f"{SESSION} must be greater than {INTERVAL}"),
            ([(SESSION, SET, None)], INVALID_REQUEST, f"Null value not supported for : {SESSION}"),
            ([(SESSION, SET, "7000"), (SESSION, SET, "8000")], INVALID_REQUEST,
             "Error due to duplicate config keys"),
            ([(SESSION, APPEND, "7000")], INVALID_CONFIG,
             f"Can't APPEND to key {SESSION} because its type is not LIST."),
            ([(INTERVAL, SET, "700"), ("foo", SET, "1")], INVALID_CONFIG,
             "Unknown group config name: foo"),
        ]
        for ops, code, message in bad:
            assert _alter(client, group, ops) == (code, message), ops
        assert _alter(client, "", [(SESSION, SET, "7000")]) == (
            INVALID_REQUEST, "Default group resources are not allowed.")
        # Nothing refused above was stored, nor what validate_only checked.
        assert _alter(client, group, [(SESSION, SET, "7000")], validate_only=True) == (0, None)
        broker_synonyms = [("group.consumer.session.timeout.ms", session, BROKER_SOURCE),
                           ("group.consumer.session.timeout.ms", "45000", DEFAULT_SOURCE)]
        assert _describe(client, group, SESSION) == (session, BROKER_SOURCE, broker_synonyms)

        assert _alter(client, group, [(SESSION, SET, "10000"), (INTERVAL, SET, "700")]) == (0, None)
        assert _describe_settled(client, group, SESSION, "10000") == (
            "10000", GROUP_SOURCE, [(SESSION, "10000", GROUP_SOURCE), *broker_synonyms])
        assert _describe_settled(client, group, INTERVAL, "700")[:2] == ("700", GROUP_SOURCE)
        assert _alter(client, group, [(SESSION, DELETE, None)]) == (0, None)
        assert _describe_settled(client, group, SESSION, session) == (
            session, BROKER_SOURCE, broker_synonyms)
        assert _describe(client, group, INTERVAL)[:2] == ("700", GROUP_SOURCE)
        # The legacy AlterConfigs replaces the whole set.
        m = request_module(ALTER_CONFIGS, 2)
        r = client.request(ALTER_CONFIGS, 2, build(
            m.AlterConfigsRequest, validate_only=False, resources=(build(
                m.AlterConfigsResource, resource_type=GROUP, resource_name=group, configs=(
                    build(m.AlterableConfig, name=SESSION, value="9000"),)),)))
        assert [(int(x.error_code), x.error_message) for x in r.responses] == [(0, None)]
        assert _describe_settled(client, group, SESSION, "9000")[:2] == ("9000", GROUP_SOURCE)
        assert _describe(client, group, INTERVAL)[:2] == (interval, BROKER_SOURCE)
    finally:
        client.close()


def _heartbeat(client, group: str, member_id: str, epoch: int, topic: str):
    m = request_module(HEARTBEAT, 1)
    return client.request(HEARTBEAT, 1, build(
        m.ConsumerGroupHeartbeatRequest, group_id=group, member_id=member_id,
        member_epoch=epoch, rebalance_timeout=datetime.timedelta(seconds=5),
        subscribed_topic_names=(topic,), subscribed_topic_regex=None, topic_partitions=()))


def test_group_configs_apply_to_heartbeats(broker):
    """A member of a group with its own configs is told that heartbeat interval, and is
    fenced after that session timeout (2 s, where the broker's is 6 s)."""
    topic = broker.topic("gc-hb")
    group = topic + "-g"
    client = broker.raw()
    try:
        assert _alter(client, group, [(SESSION, SET, "2000"), (INTERVAL, SET, "700")]) == (0, None)
        broker.wait_coordinator(group, key_type=0)
        member = str(uuid.uuid4())
        r = _heartbeat(client, group, member, 0, topic)
        assert (int(r.error_code), r.heartbeat_interval.total_seconds()) == (0, 0.7), r
        time.sleep(4)  # past the group's session timeout, well within the broker's
        r = _heartbeat(client, group, member, int(r.member_epoch), topic)
        assert int(r.error_code) == UNKNOWN_MEMBER_ID, r
    finally:
        client.close()


# Kafka 4.4's listing of a group without overrides, on a broker with COMMON_CONFIG: name ->
# (value, ConfigType id, the synonym that gives the default). The internal keys
# (consumer/share/streams.assignor.offload.enable, streams.task.offset.interval.ms,
# streams.num.warmup.replicas, streams.acceptable.recovery.lag) are not listed.
BOOLEAN, STRING, INT, LIST = 1, 2, 3, 7
KAFKA_LISTING = {
    "consumer.assignment.interval.ms": ("1000", INT, "group.consumer.assignment.interval.ms"),
    "share.session.timeout.ms": ("45000", INT, "group.share.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("5000", INT, "group.share.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("30000", INT, "group.share.record.lock.duration.ms"),
    "share.delivery.count.limit": ("5", INT, "group.share.delivery.count.limit"),
    "share.partition.max.record.locks": ("2000", INT, "group.share.partition.max.record.locks"),
    "share.auto.offset.reset": ("latest", STRING, "share.auto.offset.reset"),
    "share.isolation.level": ("read_uncommitted", STRING, "share.isolation.level"),
    "share.renew.acknowledge.enable": ("true", BOOLEAN, "share.renew.acknowledge.enable"),
    "share.assignment.interval.ms": ("1000", INT, "group.share.assignment.interval.ms"),
    "streams.session.timeout.ms": ("45000", INT, "group.streams.session.timeout.ms"),
    "streams.heartbeat.interval.ms": ("5000", INT, "group.streams.heartbeat.interval.ms"),
    "streams.num.standby.replicas": ("0", INT, "group.streams.num.standby.replicas"),
    "streams.initial.rebalance.delay.ms": ("3000", INT, "group.streams.initial.rebalance.delay.ms"),
    "streams.assignment.interval.ms": ("1000", INT, "group.streams.assignment.interval.ms"),
    "streams.rack.aware.assignment.tags": ("", LIST, "group.streams.rack.aware.assignment.tags"),
    "streams.assignor.name": ("sticky", STRING, "group.streams.assignors"),
    "errors.deadletterqueue.topic.name": ("", STRING, "errors.deadletterqueue.topic.name"),
    "errors.deadletterqueue.copy.record.enable": ("false", BOOLEAN,
                                                  "errors.deadletterqueue.copy.record.enable"),
}
LOCK = "share.record.lock.duration.ms"
DLQ_TOPIC, DLQ_COPY = "errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable"
OFFLOAD = "share.assignor.offload.enable"


def _describe_all(client, group: str, keys=None):
    """name -> (value, source, read only, type, documentation, synonyms) of a group."""
    m = request_module(DESCRIBE_CONFIGS, 4)
    r = client.request(DESCRIBE_CONFIGS, 4, build(
        m.DescribeConfigsRequest, include_synonyms=True, include_documentation=True,
        resources=(build(m.DescribeConfigsResource, resource_type=GROUP, resource_name=group,
                         configuration_keys=keys),)))
    (res,) = r.results
    assert int(res.error_code) == 0, res
    return {c.name: (c.value, int(c.config_source), c.read_only, int(c.config_type),
                     c.documentation, [(s.name, s.value, int(s.source)) for s in c.synonyms])
            for c in res.configs}


@pytest.mark.kafka_ci
def test_group_config_listing_as_kafka(broker):
    """Every group config Kafka 4.4 lists, with its value, source, type and synonyms; the
    internal keys only once the group sets one."""
    session, interval = (COMMON_CONFIG["group.consumer.session.timeout.ms"],
                         COMMON_CONFIG["group.consumer.heartbeat.interval.ms"])
    group = f"gcl-{uuid.uuid4().hex[:8]}"
    client = broker.raw()
    try:
        listed = _describe_all(client, group)
        expected = {name: (value, DEFAULT_SOURCE, False, type_, [(synonym, value, DEFAULT_SOURCE)])
                    for name, (value, type_, synonym) in KAFKA_LISTING.items()}
        delay = COMMON_CONFIG["group.streams.initial.rebalance.delay.ms"]
        for name, value, default in ((SESSION, session, "45000"), (INTERVAL, interval, "5000"),
                                     ("streams.initial.rebalance.delay.ms", delay, "3000")):
            expected[name] = (value, BROKER_SOURCE, False, INT, [
                (f"group.{name}", value, BROKER_SOURCE), (f"group.{name}", default, DEFAULT_SOURCE)])
        assert {n: (v, s, ro, t, syn) for n, (v, s, ro, t, _doc, syn) in listed.items()} == expected
        assert listed[LOCK][4] == ("The record acquisition lock duration in milliseconds for "
                                   "share groups.")
        # An internal key, asked for by name, is not listed until the group sets it.
        assert _describe_all(client, group, (OFFLOAD, LOCK)).keys() == {LOCK}

        assert _alter(client, group, [(LOCK, SET, "20000"), (DLQ_TOPIC, SET, " dlq.orders "),
                                      (DLQ_COPY, SET, "TRUE"), (OFFLOAD, SET, "false"),
                                      ("share.auto.offset.reset", SET, "by_duration:PT1H")]
                      ) == (0, None)
        _describe_settled(client, group, LOCK, "20000")
        got = _describe_all(client, group, (LOCK, DLQ_TOPIC, DLQ_COPY, OFFLOAD,
                                            "share.auto.offset.reset"))
        assert {n: (v, s, syn) for n, (v, s, _ro, _t, _d, syn) in got.items()} == {
            LOCK: ("20000", GROUP_SOURCE, [(LOCK, "20000", GROUP_SOURCE),
                                           (f"group.{LOCK}", "30000", DEFAULT_SOURCE)]),
            DLQ_TOPIC: ("dlq.orders", GROUP_SOURCE, [(DLQ_TOPIC, "dlq.orders", GROUP_SOURCE),
                                                     (DLQ_TOPIC, "", DEFAULT_SOURCE)]),
            DLQ_COPY: ("true", GROUP_SOURCE, [(DLQ_COPY, "true", GROUP_SOURCE),
                                              (DLQ_COPY, "false", DEFAULT_SOURCE)]),
            OFFLOAD: ("false", GROUP_SOURCE, [(OFFLOAD, "false", GROUP_SOURCE),
                                              (f"group.{OFFLOAD}", "true", DEFAULT_SOURCE)]),
            "share.auto.offset.reset": ("by_duration:PT1H", GROUP_SOURCE, [
                ("share.auto.offset.reset", "by_duration:PT1H", GROUP_SOURCE),
                ("share.auto.offset.reset", "latest", DEFAULT_SOURCE)]),
        }
        assert got[OFFLOAD][3] == BOOLEAN
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_share_and_dead_letter_group_configs_checked_as_kafka(broker):
    """The share.* and errors.deadletterqueue.* values Kafka 4.4 refuses, with its codes
    and messages (the broker's group.share.min/max.* keys at Kafka's defaults)."""
    group = f"gcs-{uuid.uuid4().hex[:8]}"
    aor = "share.auto.offset.reset"
    client = broker.raw()
    try:
        bad = [
            ("share.delivery.count.limit", "1", "Invalid value 1 for configuration "
             "share.delivery.count.limit: Value must be at least 2"),
            ("share.delivery.count.limit", "11",
             "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
            (LOCK, "999", f"Invalid value 999 for configuration {LOCK}: Value must be at least "
             "1000"),
            (LOCK, "14999", f"{LOCK} must be in the range 15000 to 60000 inclusive."),
            ("share.partition.max.record.locks", "10000",
             "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."),
            ("share.session.timeout.ms", "44999",
             "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            ("share.heartbeat.interval.ms", "abc", "Invalid value abc for configuration "
             "share.heartbeat.interval.ms: Not a number of type INT"),
            (aor, "EARLIEST", f"Invalid value EARLIEST for configuration {aor}: Invalid value "
             f"`EARLIEST` for configuration {aor}. The value must be either 'earliest', "
             "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."),
            (aor, "by_duration:-PT1H", f"Invalid value by_duration:-PT1H for configuration "
             f"{aor}: Invalid value `by_duration:-PT1H` for configuration {aor}. The value "
             "must be either 'earliest', 'latest' or of the format "
             "'by_duration:<PnDTnHnMn.nS>'."),
            ("share.isolation.level", "committed", "Invalid value committed for configuration "
             "share.isolation.level: String must be one of: read_committed, read_uncommitted"),
            ("share.renew.acknowledge.enable", "yes", "Invalid value yes for configuration "
             "share.renew.acknowledge.enable: Expected value to be either true or false"),
            (DLQ_COPY, "", f"Invalid value  for configuration {DLQ_COPY}: Expected value to "
             "be either true or false"),
            (DLQ_TOPIC, "__dlq", f"{DLQ_TOPIC}: DLQ topic name must not start with '__'"),
        ]
        for name, value, message in bad:
            assert _alter(client, group, [(name, SET, value)]) == (INVALID_CONFIG, message)
        assert _alter(client, group, [(LOCK, APPEND, "20000")]) == (
            INVALID_CONFIG, f"Can't APPEND to key {LOCK} because its type is not LIST.")
        assert _describe_all(client, group, (LOCK,))[LOCK][:2] == ("30000", DEFAULT_SOURCE)
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_streams_group_configs_checked_as_kafka(broker):
    """The streams.* values Kafka 4.4 refuses (the broker's group.streams.min/max.* keys
    at Kafka's defaults), in its order, and the ones it takes, listed as it lists them."""
    group = f"gct-{uuid.uuid4().hex[:8]}"
    tags = "streams.rack.aware.assignment.tags"
    client = broker.raw()
    try:
        bad = [
            ([("streams.heartbeat.interval.ms", SET, "4999")],
             "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
            ([("streams.session.timeout.ms", SET, "60001")],
             "streams.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            # Heartbeat interval before session timeout, as Kafka checks them.
            ([("streams.session.timeout.ms", SET, "1"), ("streams.heartbeat.interval.ms", SET, "1")],
             "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
            ([("streams.num.standby.replicas", SET, "3")],
             "streams.num.standby.replicas must be less than or equal to 2"),
            ([("streams.num.standby.replicas", SET, "-1")], "Invalid value -1 for configuration "
             "streams.num.standby.replicas: Value must be at least 0"),
            ([("streams.assignment.interval.ms", SET, "15001")],
             "streams.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
            ([("streams.task.offset.interval.ms", SET, "14999")],
             "streams.task.offset.interval.ms must be greater than or equal to 15000"),
            ([("streams.num.warmup.replicas", SET, "21")],
             "streams.num.warmup.replicas must be less than or equal to 20"),
            ([("streams.acceptable.recovery.lag", SET, "x")], "Invalid value x for configuration "
             "streams.acceptable.recovery.lag: Not a number of type LONG"),
            ([("streams.assignor.offload.enable", SET, "no")], "Invalid value no for "
             "configuration streams.assignor.offload.enable: Expected value to be either true "
             "or false"),
            ([("streams.assignor.name", SET, "range")], "streams.assignor.name 'range' is not "
             "a registered task assignor. Registered assignors are: [sticky]."),
            ([(tags, SET, "zone, rack,zone"), ("streams.num.standby.replicas", SET, "x")],
             f"{tags} must not contain duplicate tag keys."),
            ([("streams.initial.rebalance.delay.ms", SET, "-1")], "Invalid value -1 for "
             "configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
        ]
        for ops, message in bad:
            assert _alter(client, group, ops) == (INVALID_CONFIG, message), ops
        good = {"streams.session.timeout.ms": "50000", "streams.heartbeat.interval.ms": "6000",
                "streams.num.standby.replicas": "2", "streams.initial.rebalance.delay.ms": "0",
                "streams.assignment.interval.ms": "0", tags: "zone,rack",
                "streams.task.offset.interval.ms": "15000", "streams.assignor.name": "sticky",
                "streams.acceptable.recovery.lag": "20000000000"}
        assert _alter(client, group, [(k, SET, v) for k, v in good.items()]) == (0, None)
        _describe_settled(client, group, "streams.num.standby.replicas", "2")
        listed = _describe_all(client, group)
        assert {k: listed[k][:2] for k in good} == {k: (v, GROUP_SOURCE) for k, v in good.items()}
        assert "streams.num.warmup.replicas" not in listed  # internal, not set
    finally:
        client.close()


# Share groups on both brokers: Kafka 4.4 finalizes share.version at format time,
# txbroker needs its key. The same min key lets a group set a 1 s lock on both.
SHARE_CONFIG = {**COMMON_CONFIG, "group.share.min.record.lock.duration.ms": "1000"}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def share_broker(request, tmp_path_factory) -> Iterator[Broker]:
    extra = {"txbroker.share.version": "1"} if request.param == "txbroker" else {}
    yield from running_broker(request.param, tmp_path_factory, {**SHARE_CONFIG, **extra})


def _share_consumer(broker: Broker, group: str, topic: str):
    c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def _poll(c, want: int, timeout: float = 30) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += [m for m in c.poll(1.0) if m.error() is None]
    return got


def _produce(broker: Broker, topic: str, *values: bytes) -> None:
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(10) == 0


def test_share_group_configs_take_effect(share_broker):
    """A group's share.auto.offset.reset=earliest (the default is latest) and
    share.delivery.count.limit=2: the record released twice is archived, and the next
    record is the first the group gets; a 1 s share.record.lock.duration.ms gives back
    what a member left unacknowledged, with delivery count 2."""
    broker = share_broker
    topic = broker.topic("gc-share")
    _produce(broker, topic, b"a")
    group = f"gcs-{uuid.uuid4().hex[:8]}"
    broker.wait_coordinator(group, key_type=0)
    client = broker.raw()
    try:
        assert _alter(client, group, [("share.auto.offset.reset", SET, "earliest"),
                                      ("share.delivery.count.limit", SET, "2"),
                                      (LOCK, SET, "1000")]) == (0, None)
        _describe_settled(client, group, LOCK, "1000")
    finally:
        client.close()
    a = _share_consumer(broker, group, topic)
    b = None
    try:
        for count in (1, 2):
            (m,) = _poll(a, 1)
            assert (m.offset(), m.delivery_count()) == (0, count)
            a.acknowledge(m, ck.AcknowledgeType.RELEASE)
            a.commit_sync(10)
        _produce(broker, topic, b"b")
        (m,) = _poll(a, 1)
        assert (m.offset(), m.delivery_count()) == (1, 1)  # offset 0 was archived
        # Left unacknowledged by a: b gets it after the group's 1 s lock (the broker's
        # is 30 s).
        b = _share_consumer(broker, group, topic)
        (again,) = _poll(b, 1)
        assert (again.offset(), again.delivery_count()) == (1, 2)
        b.acknowledge(again, ck.AcknowledgeType.ACCEPT)
        b.commit_sync(10)
    finally:
        if b is not None:
            b.close()
        a.close()
