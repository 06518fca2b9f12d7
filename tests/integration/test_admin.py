"""Admin APIs through kafka-python's KafkaAdminClient and confluent-kafka's
AdminClient: the results and Kafka's error codes/exception types clients see."""

from __future__ import annotations

import subprocess
import time

import kafka.errors as kerr
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from confluent_kafka.admin import ConfigResource as CConfigResource
from kafka import KafkaProducer
from kafka.admin import AlterConfigOp, ConfigResource, KafkaAdminClient

from .clients import KCAT, ConfluentDeliveryError, Msg, consume, produce


@pytest.fixture
def kadmin(txbroker):
    admin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    yield admin
    admin.close()


@pytest.fixture
def cadmin(txbroker):
    return AdminClient({"bootstrap.servers": txbroker.bootstrap})


def _topics(txbroker) -> dict[str, int]:
    return txbroker.call(lambda b: {n: i.partitions for n, i in b.logs.topics.items()})


def _result(future, timeout: float = 10):
    """A confluent admin future's value, or the KafkaError it failed with."""
    try:
        return future.result(timeout)
    except KafkaException as e:
        return e.args[0]


# --- kafka-python KafkaAdminClient --------------------------------------------------------


def test_kafka_python_create_topic_with_configs(txbroker, kadmin, topic):
    result = kadmin.create_topics({topic: {"num_partitions": 3, "configs": {
        "retention.ms": "123456", "cleanup.policy": "delete"}}})
    (entry,) = result["topics"]
    assert (entry["name"], entry["error_code"], entry["num_partitions"],
            entry["replication_factor"]) == (topic, 0, 3, 1)
    assert entry["configs"]["retention.ms"]["value"] == "123456"
    assert entry["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert entry["configs"]["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert _topics(txbroker)[topic] == 3
    assert topic in kadmin.list_topics()
    (described,) = kadmin.describe_topics([topic])
    assert described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
    configs = kadmin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic]
    assert configs["retention.ms"]["value"] == "123456"  # only modified keys by default
    assert "segment.bytes" not in configs


def test_kafka_python_create_topics_validate_only(txbroker, kadmin, topic):
    result = kadmin.create_topics({topic: {"num_partitions": 2}}, validate_only=True)
    assert result["topics"][0]["error_code"] == 0
    assert topic not in _topics(txbroker)
    assert topic not in kadmin.list_topics()
    # validate_only still reports the errors a real create would hit.
    txbroker.create_topic(topic, 1)
    with pytest.raises(kerr.TopicAlreadyExistsError):
        kadmin.create_topics({topic: {}}, validate_only=True)


@pytest.mark.parametrize("spec, error", [
    ({"replication_factor": 3}, kerr.InvalidReplicationFactorError),
    ({"num_partitions": 0}, kerr.InvalidPartitionsError),
    ({"configs": {"retention.ms": "soon"}}, kerr.InvalidConfigurationError),
    ({"configs": {"no.such.config": "1"}}, kerr.InvalidConfigurationError),
])
def test_kafka_python_create_topic_errors(txbroker, kadmin, topic, spec, error):
    with pytest.raises(error):
        kadmin.create_topics({topic: spec})
    assert topic not in _topics(txbroker)


def test_kafka_python_duplicate_and_bad_names(txbroker, kadmin, topic):
    kadmin.create_topics({topic: {}})
    with pytest.raises(kerr.TopicAlreadyExistsError):
        kadmin.create_topics({topic: {}})
    result = kadmin.create_topics({topic: {}}, raise_errors=False)
    assert result["topics"][0]["error_code"] == kerr.TopicAlreadyExistsError.errno
    for bad in ("bad name", "a/b", "..", "x" * 250):
        with pytest.raises(kerr.InvalidTopicError):
            kadmin.create_topics({bad: {}})
    # '.' and '_' collide in metric names: Kafka refuses the second spelling.
    dotted = topic.replace("-", ".") + ".x"
    kadmin.create_topics({dotted: {}})
    with pytest.raises(kerr.InvalidTopicError):
        kadmin.create_topics({dotted.replace(".", "_"): {}})


def test_kafka_python_delete_topics(txbroker, kadmin, topic):
    kadmin.create_topics({topic: {"num_partitions": 2}})
    produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"v", partition=1)])
    result = kadmin.delete_topics([topic])
    assert result["topics"][0]["error_code"] == 0
    assert topic not in _topics(txbroker)
    assert topic not in kadmin.list_topics()
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        kadmin.delete_topics([topic])
    # The name is free again, and the new topic starts empty.
    kadmin.create_topics({topic: {"num_partitions": 2}})
    assert txbroker.call(lambda b: b.logs.get_log(topic, 1).log_end_offset) == 0


def test_kafka_python_create_partitions(txbroker, kadmin, topic):
    kadmin.create_topics({topic: {"num_partitions": 1}})
    kadmin.create_partitions({topic: 3}, validate_only=True)
    assert _topics(txbroker)[topic] == 1
    kadmin.create_partitions({topic: 3})
    assert _topics(txbroker)[topic] == 3
    with pytest.raises(kerr.InvalidPartitionsError):
        kadmin.create_partitions({topic: 2})
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        kadmin.create_partitions({topic + "-missing": 2})
    placed = produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"v", partition=2)])
    assert placed == [(2, 0)]


@pytest.mark.parametrize("txbroker_config", [{"num.partitions": "3", "log.retention.ms": "7200000"}])
def test_kafka_python_describe_broker_and_topic_configs(txbroker, kadmin, topic):
    broker = kadmin.describe_configs([ConfigResource("BROKER", "1")], config_filter="all")
    configs = broker["broker"]["1"]
    assert configs["num.partitions"]["value"] == "3"
    assert configs["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["auto.create.topics.enable"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["log.retention.ms"]["value"] == "7200000"
    kadmin.create_topics({topic: {}})
    assert _topics(txbroker)[topic] == 3  # num.partitions applies to -1
    topic_cfg = kadmin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="all")
    retention = topic_cfg["topic"][topic]["retention.ms"]
    assert retention["value"] == "7200000"
    assert retention["config_source"] == "STATIC_BROKER_CONFIG"
    missing = kadmin.describe_configs([ConfigResource("TOPIC", topic + "-missing")])
    assert missing["topic"][topic + "-missing"] == {}


def test_kafka_python_incremental_alter_configs(txbroker, kadmin, topic):
    kadmin.create_topics({topic: {"configs": {"retention.ms": "100000"}}})
    result = kadmin.alter_configs([ConfigResource("TOPIC", topic, {
        "max.message.bytes": "2000",
        "retention.ms": (AlterConfigOp.DELETE, None),
    })], incremental=True)
    assert result == {"topic": {topic: "OK"}}
    configs = kadmin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic]
    assert set(configs) == {"max.message.bytes"}
    assert configs["max.message.bytes"]["value"] == "2000"
    # The new limit is in force for producers at once.
    with pytest.raises(kerr.MessageSizeTooLargeError):
        produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"x" * 5000)],
                retries=0)
    kadmin.alter_configs([ConfigResource("TOPIC", topic, {
        "max.message.bytes": (AlterConfigOp.DELETE, None)})], incremental=True)
    assert produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"x" * 5000)]) == [(0, 0)]
    # Bad values and unknown keys: INVALID_CONFIG, nothing changes.
    bad = kadmin.alter_configs([ConfigResource("TOPIC", topic, {"segment.bytes": "tiny"})],
                               incremental=True, raise_on_unknown=False)
    assert bad["topic"][topic].startswith("[Error 40]")
    bad = kadmin.alter_configs([ConfigResource("TOPIC", topic, {"no.such.key": "1"})],
                               incremental=True, raise_on_unknown=False)
    assert bad["topic"][topic].startswith("[Error 40]")
    assert kadmin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic] == {}
    missing = kadmin.alter_configs([ConfigResource("TOPIC", topic + "-missing", {
        "retention.ms": "1"})], incremental=True, raise_on_unknown=False)
    assert missing["topic"][topic + "-missing"].startswith("[Error 3]")


def test_kafka_python_describe_cluster(txbroker, kadmin):
    cluster = kadmin.describe_cluster()
    assert cluster["cluster_id"] == txbroker.call(lambda b: b.cluster_id)
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, txbroker.host, txbroker.port)]
    assert txbroker.call(lambda b: b.request_counts.get("describe_cluster", 0)) >= 1


# --- confluent-kafka AdminClient ---------------------------------------------------------


def test_confluent_create_topics_and_errors(txbroker, cadmin, topic):
    futures = cadmin.create_topics([NewTopic(topic, 2, 1, config={"retention.bytes": "1048576"})])
    assert _result(futures[topic]) is None
    assert _topics(txbroker)[topic] == 2
    assert cadmin.list_topics(timeout=10).topics[topic].partitions.keys() == {0, 1}

    validate = cadmin.create_topics([NewTopic(topic + "-v", 1, 1)], validate_only=True)
    assert _result(validate[topic + "-v"]) is None
    assert topic + "-v" not in _topics(txbroker)

    futures = cadmin.create_topics([
        NewTopic(topic, 1, 1),
        NewTopic("bad name!", 1, 1),
        NewTopic(topic + "-rf", 1, 3),
        NewTopic(topic + "-cfg", 1, 1, config={"cleanup.policy": "shred"}),
    ])
    codes = {name: _result(f).code() for name, f in futures.items()}
    assert codes == {
        topic: KafkaError.TOPIC_ALREADY_EXISTS,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        topic + "-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        topic + "-cfg": KafkaError.INVALID_CONFIG,
    }
    assert set(_topics(txbroker)) == {topic}


def test_confluent_delete_topics_and_create_partitions(txbroker, cadmin, topic):
    assert _result(cadmin.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    assert _result(cadmin.create_partitions([NewPartitions(topic, 4)])[topic]) is None
    assert _topics(txbroker)[topic] == 4
    err = _result(cadmin.create_partitions([NewPartitions(topic, 2)])[topic])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    placed = produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"v", partition=3)])
    assert placed == [(3, 0)]
    assert _result(cadmin.delete_topics([topic])[topic]) is None
    assert topic not in _topics(txbroker)
    err = _result(cadmin.delete_topics([topic])[topic])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_describe_and_incremental_alter_configs(txbroker, cadmin, topic):
    assert _result(cadmin.create_topics([NewTopic(topic, 1, 1, config={
        "retention.ms": "5000"})])[topic]) is None
    res = CConfigResource(ResourceType.TOPIC, topic)
    configs = _result(cadmin.describe_configs([res])[res])
    assert configs["retention.ms"].value == "5000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["max.message.bytes"].is_default

    alter = CConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "1500", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert _result(cadmin.incremental_alter_configs([alter])[alter]) is None
    configs = _result(cadmin.describe_configs([res])[res])
    assert configs["max.message.bytes"].value == "1500"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    with pytest.raises(ConfluentDeliveryError) as info:
        produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"y" * 4000)])
    assert info.value.err.code() == KafkaError.MSG_SIZE_TOO_LARGE

    bad = CConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "-5", incremental_operation=AlterConfigOpType.SET)])
    assert _result(cadmin.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    configs = _result(cadmin.describe_configs([res])[res])
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    broker = CConfigResource(ResourceType.BROKER, "1")
    bconfigs = _result(cadmin.describe_configs([broker])[broker])
    assert bconfigs["node.id"].value == "1"
    assert bconfigs["auto.create.topics.enable"].value == "true"
    assert bconfigs["auto.create.topics.enable"].source == ConfigSource.DEFAULT_CONFIG.value


def test_confluent_describe_cluster(txbroker, cadmin):
    cluster = cadmin.describe_cluster().result(10)
    assert cluster.cluster_id == txbroker.call(lambda b: b.cluster_id)
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, txbroker.host, txbroker.port)]


# --- Metadata auto-creation -----------------------------------------------------------------


@pytest.mark.parametrize("txbroker_config", [{"num.partitions": "2"}])
def test_metadata_auto_creates_topics_for_producers(txbroker, topic):
    placed = produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"v", partition=1)])
    assert placed == [(1, 0)]
    assert _topics(txbroker)[topic] == 2
    other = topic + "-rdkafka"
    placed = produce("confluent", txbroker.bootstrap, other, [Msg(None, b"v", partition=0)])
    assert placed == [(0, 0)]
    assert _topics(txbroker)[other] == 2
    assert [r.value for r in consume("kcat", txbroker.bootstrap, other, [0], 1)] == [b"v"]


def test_admin_metadata_never_auto_creates(txbroker, kadmin, topic):
    """Admin clients ask with allow_auto_topic_creation=false: nothing appears."""
    described = kadmin.describe_topics([topic])
    assert described[0]["error_code"] == kerr.UnknownTopicOrPartitionError.errno
    assert topic not in _topics(txbroker)


@pytest.mark.parametrize("txbroker_config", [{"auto.create.topics.enable": "false"}])
def test_metadata_auto_create_disabled(txbroker, cadmin, topic):
    producer = KafkaProducer(bootstrap_servers=txbroker.bootstrap, max_block_ms=1500)
    try:
        start = time.monotonic()
        with pytest.raises(kerr.KafkaTimeoutError):
            producer.send(topic, b"v").get(timeout=5)
        assert time.monotonic() - start < 10
    finally:
        producer.close(timeout=2)
    meta = cadmin.list_topics(topic=topic, timeout=10)
    assert meta.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    proc = subprocess.run([KCAT, "-b", txbroker.bootstrap, "-L", "-t", topic], capture_output=True,
                          timeout=30)
    assert b"Unknown topic or partition" in proc.stdout + proc.stderr
    assert topic not in _topics(txbroker)
    # Explicit creation still works.
    txbroker.create_topic(topic, 1)
    assert produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"v")]) == [(0, 0)]
