"""GroupConfigStore: group configs survive a restart (the file in the data directory),
and a refused or validate-only change stores nothing."""

from __future__ import annotations

import json

import pytest
from txbroker.coordinator.group.group_configs import (
    DLQ_COPY_RECORD_ENABLE,
    DLQ_TOPIC_NAME,
    GROUP_CONFIGS_FILE,
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    GroupConfigStore,
    by_duration_ms,
)
from txbroker.protocol.errors import ErrorCode, KafkaError

LIMITS = {SESSION_TIMEOUT: (45000, 45000, 60000), HEARTBEAT_INTERVAL: (5000, 2000, 15000)}


def test_overrides_survive_a_restart(tmp_path):
    store = GroupConfigStore(str(tmp_path), LIMITS)
    assert store.replace("g", {SESSION_TIMEOUT: "50000", HEARTBEAT_INTERVAL: " 3000 "}) == {
        SESSION_TIMEOUT: 50000, HEARTBEAT_INTERVAL: 3000}
    store.replace("h", {HEARTBEAT_INTERVAL: "4000"})
    store.replace("h", {})  # every override deleted: the group is gone from the file
    again = GroupConfigStore(str(tmp_path), LIMITS)
    assert again.overrides == {"g": {SESSION_TIMEOUT: 50000, HEARTBEAT_INTERVAL: 3000}}
    assert again.effective("g", SESSION_TIMEOUT) == 50000
    assert again.effective("h", SESSION_TIMEOUT) == 45000


@pytest.mark.parametrize("new, code", [
    ({SESSION_TIMEOUT: "70000"}, ErrorCode.invalid_config),
    ({"share.session.timeout.ms": "70000"}, ErrorCode.invalid_config),
    ({SESSION_TIMEOUT: None}, ErrorCode.invalid_request),
    ({HEARTBEAT_INTERVAL: "15000", SESSION_TIMEOUT: "45000"}, ErrorCode.none),
])
def test_refused_and_validate_only_store_nothing(tmp_path, new, code):
    store = GroupConfigStore(str(tmp_path), LIMITS)
    store.replace("g", {HEARTBEAT_INTERVAL: "3000"})
    if code == ErrorCode.none:
        store.replace("g", new, validate_only=True)
    else:
        with pytest.raises(KafkaError) as e:
            store.replace("g", new)
        assert e.value.code == code
    assert GroupConfigStore(str(tmp_path), LIMITS).overrides == {"g": {HEARTBEAT_INTERVAL: 3000}}
    assert store.overrides == {"g": {HEARTBEAT_INTERVAL: 3000}}


def test_dlq_keys_typed_with_broker_defaults(tmp_path):
    """The dead-letter keys: a string and a boolean, blank / false unless set."""
    store = GroupConfigStore(str(tmp_path), LIMITS)
    assert store.value("g", DLQ_TOPIC_NAME) == ""
    assert store.value("g", DLQ_COPY_RECORD_ENABLE) is False
    store.replace("g", {DLQ_TOPIC_NAME: " dlq.orders ", DLQ_COPY_RECORD_ENABLE: "TRUE"})
    again = GroupConfigStore(str(tmp_path), LIMITS)
    assert again.value("g", DLQ_TOPIC_NAME) == "dlq.orders"
    assert again.value("g", DLQ_COPY_RECORD_ENABLE) is True
    assert again.value("other", DLQ_COPY_RECORD_ENABLE) is False


def test_a_file_of_an_older_txbroker_loads(tmp_path):
    (tmp_path / GROUP_CONFIGS_FILE).write_text(json.dumps(
        {"g": {SESSION_TIMEOUT: 50000, "consumer.assignment.interval.ms": 1}, "h": {"x.y": 1}}))
    store = GroupConfigStore(str(tmp_path), LIMITS)
    assert store.overrides == {"g": {SESSION_TIMEOUT: 50000}}
    assert store.value("g", "share.delivery.count.limit") == 5


SHARE_LIMITS = {**LIMITS, "share.delivery.count.limit": (5, 3, 6),
                "share.session.timeout.ms": (20000, 1000, 60000),
                "share.heartbeat.interval.ms": (5000, 1000, 60000)}


@pytest.mark.parametrize("new, message", [
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "2"},
     "share.delivery.count.limit must be in the range 3 to 6 inclusive."),
    ({"share.delivery.count.limit": "x", DLQ_COPY_RECORD_ENABLE: "x"},
     "Invalid value x for configuration share.delivery.count.limit: Not a number of type INT"),
    ({"share.delivery.count.limit": "1_0"},
     "Invalid value 1_0 for configuration share.delivery.count.limit: Not a number of type INT"),
    ({DLQ_COPY_RECORD_ENABLE: "yes"}, "Invalid value yes for configuration "
     "errors.deadletterqueue.copy.record.enable: Expected value to be either true or false"),
    ({DLQ_TOPIC_NAME: " __dlq"},
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ({"share.heartbeat.interval.ms": "20000"},
     "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"),
    ({"share.isolation.level": "READ_COMMITTED"}, "Invalid value READ_COMMITTED for "
     "configuration share.isolation.level: String must be one of: read_committed, "
     "read_uncommitted"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "Invalid value by_duration:-PT1H for "
     "configuration share.auto.offset.reset: Invalid value `by_duration:-PT1H` for "
     "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' "
     "or of the format 'by_duration:<PnDTnHnMn.nS>'."),
    # Kafka checks the bounds in its own order: streams heartbeat before session.
    ({"streams.session.timeout.ms": "1000", "streams.heartbeat.interval.ms": "1000"},
     "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to 2"),
    ({"streams.num.warmup.replicas": "21"},
     "streams.num.warmup.replicas must be less than or equal to 20"),
    ({"streams.task.offset.interval.ms": "14999"},
     "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ({"streams.acceptable.recovery.lag": "-1"}, "Invalid value -1 for configuration "
     "streams.acceptable.recovery.lag: Value must be at least 0"),
    ({"streams.assignor.name": "range"}, "streams.assignor.name 'range' is not a registered "
     "task assignor. Registered assignors are: [sticky]."),
    # The duplicate-tag check comes before any value is parsed.
    ({"streams.rack.aware.assignment.tags": "a,b , a", "streams.num.standby.replicas": "x"},
     "streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
])
def test_share_dlq_and_streams_checks_as_kafka(tmp_path, new, message):
    store = GroupConfigStore(str(tmp_path), SHARE_LIMITS)
    with pytest.raises(KafkaError) as e:
        store.replace("g", new)
    assert (e.value.code, str(e.value)) == (ErrorCode.invalid_config, message)
    assert store.overrides == {}


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("pt1h", 3_600_000), ("P1DT2H3M4.5S", 93_784_500), ("PT0S", 0),
    ("+PT1M", 60_000), ("-PT1H", None), ("PT-1H", None), ("P1W", None), ("PT", None),
    ("P", None), (" PT1H", None), ("PT1H30M-10M", None), ("PT-0.5S", None),
])
def test_by_duration_as_java_duration(text, ms):
    assert by_duration_ms(text) == ms


def test_share_values_typed(tmp_path):
    store = GroupConfigStore(str(tmp_path), SHARE_LIMITS, {"share.auto.offset.reset": "earliest"})
    store.replace("g", {"share.renew.acknowledge.enable": "False",
                        "share.auto.offset.reset": "by_duration:PT10M",
                        "share.isolation.level": " read_committed "})
    assert [store.value("g", k) for k in ("share.renew.acknowledge.enable",
                                          "share.auto.offset.reset", "share.isolation.level",
                                          "share.delivery.count.limit")] == [
        False, "by_duration:PT10M", "read_committed", 5]
    assert store.value("h", "share.auto.offset.reset") == "earliest"
    assert GroupConfigStore(str(tmp_path), SHARE_LIMITS).get("g") == store.get("g")


def test_streams_configs_are_taken_typed():
    store = GroupConfigStore(None, LIMITS)
    parsed = store.replace("app", {"streams.num.standby.replicas": " 1",
                                   "streams.acceptable.recovery.lag": "20000000000",
                                   "streams.assignor.offload.enable": "FALSE",
                                   "streams.rack.aware.assignment.tags": "zone,rack"})
    assert parsed == {"streams.num.standby.replicas": 1,
                      "streams.acceptable.recovery.lag": 20_000_000_000,
                      "streams.assignor.offload.enable": False,
                      "streams.rack.aware.assignment.tags": "zone,rack"}
    assert store.value("other", "streams.initial.rebalance.delay.ms") == 3000
