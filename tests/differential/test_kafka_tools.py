"""Kafka's own command-line tools (the kafka-tools and kafka_2.13 jars of 4.4.0) against
txbroker and Apache Kafka, run as users run them and judged by what they print:
kafka-topics, kafka-configs, kafka-console-producer/-consumer, kafka-consumer-groups,
kafka-transactions, kafka-get-offsets, kafka-delete-records, kafka-log-dirs and
kafka-producer-perf-test. Each test runs its commands in one JVM (tests/differential/jvm.py).
"""

from __future__ import annotations

import json
import time

from tests.differential.jvm import ToolResult, run_tools
from tests.helpers import wait_until
from tests.integration.clients import unique_topic
from tests.integration.txn_util import describe_transaction, unique

from .test_list_offsets import list_offsets


def offsets(result: ToolResult) -> dict[int, int]:
    """partition -> offset of kafka-get-offsets' "topic:partition:offset" lines."""
    out = {}
    for line in result.lines():
        _, partition, offset = line.rsplit(":", 2)
        out[int(partition)] = int(offset)
    return out


def config_line(result: ToolResult, name: str) -> str | None:
    found = [line.strip() for line in result.lines() if line.strip().startswith(name + "=")]
    return found[0] if found else None


def rows(result: ToolResult, first: str) -> list[list[str]]:
    """The table rows whose first column is ``first``."""
    return [r for r in result.table() if r and r[0] == first]


def transactional_producer(broker, transactional_id: str):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 60000, "linger.ms": 5})
    p.init_transactions(30)
    return p


def wait_topic_gone(broker, topic: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while topic in broker.admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"{topic} still listed after kafka-topics --delete"
        time.sleep(0.2)


def test_topics_configs_offsets_and_delete_records(broker, jvm_classes, tmp_path):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique_topic("tools")
    entity = ["--entity-type", "topics", "--entity-name", topic]
    delete_all = tmp_path / "delete.json"
    delete_all.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "offset": -1} for p in range(3)]}))
    r = run_tools(jvm_classes, tmp_path / "run", [
        ["kafka-topics", *b, "--create", "--topic", topic, "--partitions", "2",
         "--config", "cleanup.policy=delete", "--config", "retention.ms=86400000"],
        ["kafka-topics", *b, "--describe", "--topic", topic],
        ["kafka-topics", *b, "--alter", "--topic", topic, "--partitions", "3"],
        ["kafka-topics", *b, "--describe", "--topic", topic],
        ["kafka-console-producer", *b, "--topic", topic],
        ["kafka-get-offsets", *b, "--topic", topic],
        ["kafka-configs", *b, "--describe", *entity],
        ["kafka-configs", *b, "--alter", *entity,
         "--add-config", "max.message.bytes=200000,retention.ms=3600000"],
        ["kafka-configs", *b, "--alter", *entity, "--delete-config", "retention.ms"],
        ["kafka-configs", *b, "--describe", *entity],
        ["kafka-configs", *b, "--describe", "--entity-type", "brokers", "--entity-name", "1",
         "--all"],
        ["kafka-delete-records", *b, "--offset-json-file", str(delete_all)],
        ["kafka-get-offsets", *b, "--topic", topic, "--time", "-2"],
        ["kafka-log-dirs", *b, "--describe", "--topic-list", f"{topic},{topic}-missing"],
        ["kafka-topics", *b, "--delete", "--topic", topic],
    ], stdin={4: "".join(f"v{i}\n" for i in range(6))})
    for result in r:
        assert result.exit == 0, result
    (created, described, altered, described3, produced, latest, configs, _, _, configs2,
     broker_configs, deleted, earliest, log_dirs, _) = r
    assert created.lines() == [f"Created topic {topic}."]

    head = described.lines()[0]
    assert f"Topic: {topic}" in head and "PartitionCount: 2" in head
    assert "ReplicationFactor: 1" in head and "retention.ms=86400000" in head
    # Partition lines come from DescribeTopicPartitions: an empty ELR, not "N/A" (which
    # the tool prints when it falls back to Metadata).
    assert len(described.lines()) == 3
    for p, line in enumerate(described.lines()[1:]):
        assert line.split() == ["Topic:", topic, "Partition:", str(p), "Leader:", "1",
                                "Replicas:", "1", "Isr:", "1", "Elr:", "LastKnownElr:"]
    assert altered.lines() == []
    assert "PartitionCount: 3" in described3.lines()[0] and len(described3.lines()) == 4
    assert produced.lines() == []
    assert sorted(latest.lines())[0].startswith(f"{topic}:0:")
    assert sum(offsets(latest).values()) == 6

    # Synonyms (KIP-226): the topic's override, then the broker default.
    assert config_line(configs, "cleanup.policy") == (
        "cleanup.policy=delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy="
        "delete, DEFAULT_CONFIG:log.cleanup.policy=delete}")
    assert config_line(configs, "retention.ms").startswith(
        "retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000")
    assert config_line(configs2, "max.message.bytes").startswith("max.message.bytes=200000 ")
    assert config_line(configs2, "retention.ms") is None
    assert config_line(broker_configs, "num.partitions") == (
        "num.partitions=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=1, "
        "DEFAULT_CONFIG:num.partitions=1}")

    # DeleteRecords up to each high watermark: the log start offsets follow.
    low = {line.split("\t")[0]: line.split("\t")[1] for line in deleted.lines()
           if line.startswith("partition:")}
    hw = offsets(latest)
    assert low == {f"partition: {topic}-{p}": f"low_watermark: {hw[p]}" for p in range(3)}, \
        deleted.output
    assert offsets(earliest) == offsets(latest)

    # kafka-log-dirs prints JSON: one log directory holding the topic's partitions (the
    # missing topic is left out), sizes in bytes, no lag, no future logs.
    [broker_dirs] = json.loads(log_dirs.lines()[-1])["brokers"]
    [log_dir] = broker_dirs["logDirs"]
    assert log_dir["error"] is None
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(parts) == [f"{topic}-{p}" for p in range(3)]
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts.values())
    assert sum(p["size"] > 0 for p in parts.values()) == sum(v > 0 for v in hw.values())
    wait_topic_gone(broker, topic)


def test_console_consumer_read_committed_and_consumer_groups(broker, jvm_classes, tmp_path):
    """Committed c1 c2, aborted a1, committed c3 in one partition: a read_committed
    console consumer in a group prints c1 c2 c3; kafka-consumer-groups shows its offsets
    and lag, resets them and deletes the group; a read_uncommitted one sees a1 too."""
    b = ["--bootstrap-server", broker.bootstrap]
    topic = broker.topic("tools-rc")
    group = unique("tools-group")
    producer = transactional_producer(broker, unique("tools-rc-tx"))
    for values, commit in ((["c1", "c2"], True), (["a1"], False), (["c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v.encode(), partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    # Offsets: c1 0, c2 1, commit marker 2, a1 3, abort marker 4, c3 5, commit marker 6.
    end = 7
    consume = ["kafka-console-consumer", *b, "--topic", topic, "--from-beginning",
               "--timeout-ms", "20000"]
    r = run_tools(jvm_classes, tmp_path / "run", [
        [*consume, "--group", group, "--max-messages", "3",
         "--consumer-property", "isolation.level=read_committed"],
        ["kafka-consumer-groups", *b, "--describe", "--group", group],
        ["kafka-consumer-groups", *b, "--describe", "--group", group, "--state"],
        ["kafka-consumer-groups", *b, "--reset-offsets", "--group", group, "--topic", topic,
         "--to-earliest", "--execute"],
        ["kafka-consumer-groups", *b, "--describe", "--group", group],
        ["kafka-consumer-groups", *b, "--reset-offsets", "--group", group,
         "--topic", f"{topic}:0", "--to-offset", "3", "--dry-run"],
        ["kafka-consumer-groups", *b, "--list"],
        ["kafka-consumer-groups", *b, "--delete", "--group", group],
        ["kafka-consumer-groups", *b, "--list"],
        [*consume, "--max-messages", "4"],
    ])
    for result in r:
        assert result.exit == 0, result
    (consumed, described, state, reset, described2, dry_run, listed, deleted, listed2,
     uncommitted) = r
    values = [line for line in consumed.lines() if line in ("c1", "c2", "a1", "c3")]
    assert values == ["c1", "c2", "c3"], consumed.output
    assert "Processed a total of 3 messages" in consumed.output

    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    [row] = rows(described, group)
    assert row[1:3] == [topic, "0"] and row[4] == str(end)
    # The consumer committed its position past c3: at the commit marker or past it.
    assert int(row[3]) in (6, 7) and int(row[5]) == end - int(row[3])
    assert rows(state, group)[0][-2:] == ["Empty", "0"]
    assert rows(reset, group) == [[group, topic, "0", "0"]]
    assert rows(described2, group)[0][3:6] == ["0", str(end), str(end)]
    assert rows(dry_run, group) == [[group, topic, "0", "3"]]
    assert group in listed.lines()
    assert deleted.lines() == [f"Deletion of requested consumer groups ('{group}') was successful."]
    assert group not in listed2.lines()
    values = [line for line in uncommitted.lines() if line in ("c1", "c2", "a1", "c3")]
    assert values == ["c1", "c2", "a1", "c3"], uncommitted.output


def test_transactions_tool_and_transactional_perf_test(broker, jvm_classes, tmp_path):
    """kafka-producer-perf-test --transactional-id commits its transactions; the
    kafka-transactions views show them; an open transaction is not reported hanging
    while its coordinator knows it, and `abort` ends it on the partition."""
    b = ["--bootstrap-server", broker.bootstrap]
    topic = broker.topic("tools-tx")
    tid = unique("tools-perf")
    broker.wait_coordinator(tid)
    [perf] = run_tools(jvm_classes, tmp_path / "run1", [
        ["kafka-producer-perf-test", *b, "--topic", topic, "--num-records", "500",
         "--record-size", "50", "--throughput", "-1", "--transactional-id", tid,
         "--transaction-duration-ms", "100", "--command-property", "acks=all"]])
    assert perf.exit == 0, perf
    assert any(line.startswith("500 records sent") for line in perf.lines()), perf.output
    # Markers are written after EndTxn is answered, and the coordinator completes the
    # transaction after them: wait for both before looking.
    client = broker.raw()
    try:
        def complete() -> bool:
            state = describe_transaction(broker.host, broker.port, tid)
            return state.transaction_state == "CompleteCommit" and (
                list_offsets(client, topic, -1, isolation_level=1)[1]
                == list_offsets(client, topic, -1)[1])
        assert wait_until(complete, 30)
        start = list_offsets(client, topic, -1)[1]
    finally:
        client.close()
    assert start > 500  # the records and a commit marker per transaction

    producer = transactional_producer(broker, unique("tools-open"))
    try:
        producer.begin_transaction()
        producer.produce(topic, b"open", partition=0)
        producer.flush(30)
        describe_producers = ["kafka-transactions", *b, "describe-producers", "--topic", topic,
                              "--partition", "0"]
        r = run_tools(jvm_classes, tmp_path / "run2", [
            ["kafka-transactions", *b, "list"],
            ["kafka-transactions", *b, "describe", "--transactional-id", tid],
            describe_producers,
            ["kafka-transactions", *b, "find-hanging", "--topic", topic,
             "--max-transaction-timeout", "0"],
            ["kafka-transactions", *b, "abort", "--topic", topic, "--partition", "0",
             "--start-offset", str(start)],
            describe_producers,
        ])
        for result in r:
            assert result.exit == 0, result
        listed, described, before, hanging, aborted, after = r
    finally:
        del producer
    # TransactionalId Coordinator ProducerId TransactionState
    [row] = rows(listed, tid)
    assert row[1] == "1" and row[3] == "CompleteCommit"
    # CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState ...
    [row] = [r for r in described.table() if len(r) > 4 and r[1] == tid]
    assert row[4] == "CompleteCommit"
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
    # CurrentTransactionStartOffset: the perf producer's transactions are all closed, the
    # open one started at `start`.
    assert [row[-1] for row in before.table()[1:] if row[-1] != "None"] == [str(start)]
    assert len(before.table()) == 3, before.output
    # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset ...: the
    # header only, since the coordinator knows the transaction as Ongoing.
    assert len(hanging.lines()) == 1 and hanging.lines()[0].startswith("Topic")
    assert aborted.lines() == []
    assert all(row[-1] == "None" for row in after.table()[1:]), after.output
