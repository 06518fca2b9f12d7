"""Kafka's Java clients (kafka-clients 4.4.0) against txbroker and Apache Kafka: the
idempotent and transactional KafkaProducer (sendOffsetsToTransaction with the consumer's
ConsumerGroupMetadata, also of a group.protocol=consumer member), a read_committed
KafkaConsumer in a group, and the Admin calls of topics, configs, offsets, records and
transactions (tests/jvm/JavaClients.java, one JVM for every step).

The Java producer uses transactions v2 (KIP-890) when the broker advertises the
``transaction.version`` feature at 2, as Kafka 4 and txbroker do by default
(test_transactions_v2.py checks the v2 protocol itself)."""

from __future__ import annotations

from tests.differential.jvm import run_java_clients
from tests.integration.txn_util import unique

STEPS = [
    "admin.createTopics", "admin.describeTopics", "admin.describeConfigs",
    "admin.incrementalAlterConfigs", "producer.idempotent", "producer.transactional",
    "consumer.readCommitted", "producer.sendOffsetsToTransaction",
    "admin.listOffsets.readCommitted", "admin.listTransactions", "admin.describeTransactions",
    "admin.describeProducers+abortTransaction", "admin.fenceProducers", "admin.deleteRecords",
    "admin.listGroups", "admin.describeConsumerGroups", "consumer.groupProtocolConsumer",
    "producer.sendOffsetsToTransaction.groupProtocolConsumer",
]


def test_java_clients(broker, jvm_classes):
    steps = run_java_clients(jvm_classes, broker.bootstrap, unique("java"))
    assert list(steps) == STEPS, steps
    # group.protocol=consumer (KIP-848): the Java consumer joins through
    # ConsumerGroupHeartbeat and reads, on both brokers.
    ok, detail = steps["consumer.groupProtocolConsumer"]
    assert ok, detail
    failed = {name: detail for name, (ok, detail) in steps.items() if not ok}
    assert not failed, failed
    # Kafka 4.3.1 reports every group's type from ListGroups v5; so does txbroker now.
    assert steps["admin.listGroups"][1].startswith("type=Optional[Classic]")
    # sendOffsetsToTransaction with a consumer-protocol member's groupMetadata().
    assert steps["producer.sendOffsetsToTransaction.groupProtocolConsumer"][1] == (
        "type=Consumer committed=10")
