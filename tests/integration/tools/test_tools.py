"""``txbroker topics`` and ``txbroker groups`` against an in-process broker, with real
clients making the state they show: records, an open transaction (HW above LSO),
committed offsets (lag), a live consumer (members, reset refused)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from txbroker.protocol.consumer_protocol import decode_consumer_assignment
from txbroker.tools import cluster_client

from tests.helpers import wait_until
from txbroker.cli import main as cli_main

from ..clients import unique_topic
from ..group_worker import KAFKA_PYTHON_POLL_MS


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0",
            # consumer-protocol members heartbeat fast (Kafka's default is 5 s)
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.min.heartbeat.interval.ms": "100"}


def cli(*argv: str) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    saved = cluster_client.OUT
    cluster_client.OUT = out
    try:
        with contextlib.redirect_stderr(err):
            code = cli_main(list(argv))
    finally:
        cluster_client.OUT = saved
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def table_rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()[1:]]


def describe_partitions(bootstrap: str, topic: str) -> dict[int, dict[str, str]]:
    r = cli("topics", "--bootstrap-server", bootstrap, "describe", "--topic", topic)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("\t"):
            fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
            out[int(fields["Partition"])] = fields
    return out


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                         for (t, p), o in offsets.items()})
    finally:
        consumer.close()


def test_topics_create_list_describe_alter_delete(txbroker):
    b = txbroker.bootstrap
    topic = unique_topic("tools-topic")
    r = cli("topics", "--bootstrap-server", b, "create", "--topic", topic, "--partitions", "3",
            "--config", "retention.ms=3600000")
    assert (r.returncode, r.stdout) == (0, f"Created topic {topic}.\n"), r.stderr
    r = cli("topics", "--bootstrap-server", b, "create", "--topic", topic)
    assert r.returncode == 1 and "TOPIC_ALREADY_EXISTS" in r.stderr
    assert cli("topics", "--bootstrap-server", b, "create", "--topic", topic,
               "--if-not-exists").returncode == 0

    producer = KafkaProducer(bootstrap_servers=b)
    for i in range(5):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush()
    producer.close()
    # An open transaction in partition 0: the LSO stays at its first offset.
    txn = Producer({"bootstrap.servers": b, "transactional.id": unique_topic("tools-tid"),
                    "transaction.timeout.ms": 60000})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"t0", partition=0)
    txn.produce(topic, b"t1", partition=0)
    txn.flush(30)

    r = cli("topics", "--bootstrap-server", b, "describe", "--topic", topic)
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert f"Topic: {topic}\t" in header and "PartitionCount: 3\tReplicationFactor: 1\t" in header
    assert "Configs: retention.ms=3600000" in header
    parts = describe_partitions(b, topic)
    assert parts[0]["HighWatermark"] == "7" and parts[0]["LastStableOffset"] == "5"
    assert parts[1]["HighWatermark"] == parts[1]["LastStableOffset"] == "0"
    assert parts[0]["Leader"] == parts[0]["Replicas"] == parts[0]["Isr"] == "1"
    txn.commit_transaction(30)
    # The COMMIT marker is written after EndTxn is answered: then the LSO is past it.
    assert wait_until(lambda: describe_partitions(b, topic)[0]["LastStableOffset"] == "8")

    r = cli("topics", "--bootstrap-server", b, "list")
    assert topic in r.stdout.split()
    assert "__transaction_state" in r.stdout.split()
    # The client options may also follow the subcommand, as Kafka's scripts allow.
    r = cli("topics", "list", "--exclude-internal", "--bootstrap-server", b)
    assert "__transaction_state" not in r.stdout.split()

    r = cli("topics", "--bootstrap-server", b, "alter", "--topic", topic, "--partitions", "4",
            "--config", "cleanup.policy=compact", "--delete-config", "retention.ms")
    assert r.returncode == 0, r.stderr
    header = cli("topics", "--bootstrap-server", b, "describe", "--topic",
                 topic).stdout.splitlines()[0]
    assert "PartitionCount: 4" in header and header.endswith("Configs: cleanup.policy=compact")
    r = cli("topics", "--bootstrap-server", b, "alter", "--topic", topic, "--partitions", "2")
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stderr
    r = cli("topics", "--bootstrap-server", b, "alter", "--topic", topic,
            "--config", "retention.ms=abc")
    assert r.returncode == 1 and "INVALID_CONFIG" in r.stderr

    r = cli("topics", "--bootstrap-server", b, "delete", "--topic", topic)
    assert (r.returncode, r.stdout) == (0, f"Deleted topic {topic}.\n"), r.stderr
    assert wait_until(lambda: topic not in cli("topics", "--bootstrap-server", b,
                                               "list").stdout.split())
    r = cli("topics", "--bootstrap-server", b, "describe", "--topic", topic)
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr
    assert cli("topics", "--bootstrap-server", b, "delete", "--topic", topic,
               "--if-exists").returncode == 0


def test_groups_describe_lag_reset_and_delete(txbroker, tmp_path):
    b = txbroker.bootstrap
    topic = unique_topic("tools-group")
    group = unique_topic("tools-g")
    txbroker.create_topic(topic, 2)
    producer = KafkaProducer(bootstrap_servers=b)
    for i in range(5):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.send(topic, b"w", partition=1)
    producer.flush()
    producer.close()
    before_txn = int(time.time() * 1000)
    time.sleep(0.05)
    txn = Producer({"bootstrap.servers": b, "transactional.id": unique_topic("tools-tid"),
                    "transaction.timeout.ms": 60000})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"t0", partition=0)
    txn.produce(topic, b"t1", partition=0)
    txn.flush(30)
    commit(b, group, {(topic, 0): 2})

    # --command-config gives the bootstrap servers, as for Kafka's tools.
    props = tmp_path / "client.properties"
    props.write_text(f"bootstrap.servers={b}\nclient.id=ops\n")
    r = cli("groups", "--command-config", str(props), "describe", "--group", group)
    assert r.returncode == 0, r.stderr
    assert "ignoring client.id" in r.stderr
    header = r.stdout.splitlines()[0].split()
    assert header[:8] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                          "LAG", "LAST-STABLE-OFFSET", "READ-COMMITTED-LAG"]
    # committed 2, log end 7, LSO 5 (the open transaction's first offset)
    assert table_rows(r.stdout) == [[group, topic, "0", "2", "7", "5", "5", "3", "-", "-", "-"]]

    r = cli("groups", "list", "--command-config", str(props))
    assert group in r.stdout.split()
    r = cli("groups", "--bootstrap-server", b, "list", "--state", "Empty")
    assert [group, "Empty"] in table_rows(r.stdout)
    r = cli("groups", "--bootstrap-server", b, "describe", "--group", group, "--state")
    assert table_rows(r.stdout)[0][-2:] == ["Empty", "0"]

    def reset(*how: str) -> list[list[str]]:
        r = cli("groups", "--bootstrap-server", b, "reset-offsets", "--group", group,
                "--topic", f"{topic}:0", *how)
        assert r.returncode == 0, r.stderr
        return table_rows(r.stdout)

    def committed() -> str:
        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group)
        return {row[2]: row[3] for row in table_rows(r.stdout)}["0"]

    # A dry run by default: shown, not committed.
    assert reset("--to-earliest") == [[group, topic, "0", "0"]]
    assert committed() == "2"
    assert reset("--to-earliest", "--execute") == [[group, topic, "0", "0"]]
    assert committed() == "0"
    assert reset("--shift-by", "3", "--execute")[0][3] == "3"
    assert reset("--shift-by", "-10", "--execute")[0][3] == "0"  # clamped to the log start
    assert reset("--to-offset", "100", "--execute")[0][3] == "7"  # clamped to the log end
    assert reset("--to-offset", "4", "--execute")[0][3] == "4"
    assert reset("--to-latest", "--dry-run")[0][3] == "7"
    assert committed() == "4"
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before_txn / 1000))
    assert reset("--to-datetime", f"{when}.{before_txn % 1000:03d}")[0][3] == "5"
    assert reset("--to-datetime", "2000-01-01T00:00:00.000Z")[0][3] == "0"
    r = cli("groups", "--bootstrap-server", b, "reset-offsets", "--group", group,
            "--all-topics", "--to-earliest")
    assert table_rows(r.stdout) == [[group, topic, "0", "0"]]
    r = cli("groups", "--bootstrap-server", b, "reset-offsets", "--group", group,
            "--topic", topic, "--to-earliest")
    assert [row[2] for row in table_rows(r.stdout)] == ["0", "1"]
    txn.abort_transaction(30)

    # A live member: describe shows it and its partitions; reset is refused.
    consumer = KafkaConsumer(topic, bootstrap_servers=b, group_id=group,
                             enable_auto_commit=False, client_id="tools-consumer")
    try:
        # (60 s: on a machine at load 6, kafka-python's first join took over 20 s twice)
        # (a long poll: the kafka-python bug of group_worker.py)
        assert wait_until(lambda: consumer.poll(KAFKA_PYTHON_POLL_MS) is not None and
                          len(consumer.assignment()) == 2, timeout=60)
        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group, "--members",
                "--verbose")
        [row] = table_rows(r.stdout)
        assert row[0] == group and row[2] == "-"  # no group.instance.id
        assert row[-3:] == ["tools-consumer", "2", f"{topic}-0,{topic}-1"], row
        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group)
        rows = table_rows(r.stdout)
        assert [x[2] for x in rows] == ["0", "1"] and all(x[-1] == "tools-consumer" for x in rows)
        r = cli("groups", "--bootstrap-server", b, "reset-offsets", "--group", group,
                "--all-topics", "--to-earliest", "--execute")
        assert r.returncode == 1 and "current state is Stable" in r.stderr
        r = cli("groups", "--bootstrap-server", b, "delete", "--group", group)
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stderr
    finally:
        consumer.close()

    assert wait_until(lambda: [group, "Empty"] in table_rows(
        cli("groups", "--bootstrap-server", b, "list", "--state").stdout))
    r = cli("groups", "--bootstrap-server", b, "delete", "--group", group)
    assert r.returncode == 0, r.stderr
    assert group not in cli("groups", "--bootstrap-server", b, "list").stdout.split()
    r = cli("groups", "--bootstrap-server", b, "describe", "--group", group)
    assert "has no active members and no committed offsets" in r.stdout


def test_groups_describe_consumer_protocol_group(txbroker):
    """A confluent-kafka member with group.protocol=consumer: describe shows the group
    through ConsumerGroupDescribe (epochs, assignor, the member's epoch, current and
    target assignment) and the lag against the HW and the LSO, where DescribeGroups
    alone would show it Dead without members."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    from ..consumer_util import owned, poll_until

    b = txbroker.bootstrap
    topic = unique_topic("tools-cp")
    group = unique_topic("tools-cpg")
    txbroker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": b})
    for i in range(3):
        producer.produce(topic, b"v%d" % i, partition=0)
    producer.produce(topic, b"w", partition=1)
    producer.flush(30)
    txn = Producer({"bootstrap.servers": b, "transactional.id": unique_topic("tools-cp-tid")})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"t0", partition=0)
    txn.produce(topic, b"t1", partition=0)
    txn.flush(30)  # partition 0: HW 5, LSO 3
    c = Consumer({"bootstrap.servers": b, "group.id": group, "group.protocol": "consumer",
                  "client.id": "cp-tools", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})

    def stable():
        g = txbroker.call(lambda broker: broker.groups.consumer.groups.get(group))
        return g is not None and g.state == "Stable" and owned(c) == {0, 1}

    try:
        c.subscribe([topic])
        assert poll_until([c], stable, timeout=30)
        c.commit(offsets=[TP(topic, 0, 2), TP(topic, 1, 1)], asynchronous=False)
        g = txbroker.call(lambda broker: broker.groups.consumer.groups.get(group))
        [(member_id, m)] = g.members.items()
        both = f"{topic}-0,{topic}-1"

        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group, "--members",
                "--verbose")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0].split() == [
            "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        [row] = table_rows(r.stdout)
        assert row[:3] == [group, member_id, "-"] and row[4:] == [
            "cp-tools", "2", str(m.member_epoch), both, str(g.assignment_epoch), both], row

        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group, "--state",
                "--verbose")
        assert r.stdout.splitlines()[0].split()[-3:] == [
            "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert table_rows(r.stdout)[0][-5:] == [
            "uniform", "Stable", str(g.group_epoch), str(g.assignment_epoch), "1"]

        r = cli("groups", "--bootstrap-server", b, "describe", "--group", group)
        rows = {row[2]: row for row in table_rows(r.stdout)}
        # committed 2, log end 5, LSO 3 (the open transaction's first offset)
        assert rows["0"][3:9] == ["2", "5", "3", "3", "1", member_id], rows
        assert rows["1"][3:9] == ["1", "1", "0", "1", "0", member_id], rows
        assert rows["0"][-1] == "cp-tools"
        r = cli("groups", "--bootstrap-server", b, "reset-offsets", "--group", group,
                "--all-topics", "--to-earliest", "--execute")
        assert r.returncode == 1 and "current state is Stable" in r.stderr
    finally:
        c.close()
        txn.abort_transaction(30)
    r = cli("groups", "--bootstrap-server", b, "describe", "--group", group, "--state")
    assert table_rows(r.stdout)[0][-3:] == ["uniform", "Empty", "0"]


def test_unreachable_cluster_and_bad_command_config_are_one_line(tmp_path):
    r = cli("topics", "--bootstrap-server", "127.0.0.1:1", "list")
    assert r.returncode == 1 and r.stderr.startswith("error: cannot reach 127.0.0.1:1")
    props = tmp_path / "c.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    r = cli("groups", "--command-config", str(props), "list")
    assert r.returncode == 1 and "PLAIN needs sasl.jaas.config in " in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_decode_consumer_assignment():
    data = (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02"
            + b"\x00\x00\x00\x00\x00\x00\x00\x03" + b"\xff\xff\xff\xff")
    assert decode_consumer_assignment(data) == [("t", 0), ("t", 3)]
    assert decode_consumer_assignment(b"") == []
    assert decode_consumer_assignment(b"\x00\x00\x00\x00\x00\x05") == []


def test_top_level_help_lists_every_command_on_one_line():
    checkout = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-m", "txbroker", "--help"], cwd=checkout,
                         capture_output=True, text=True, env={"COLUMNS": "80", "PATH": ""},
                         timeout=60).stdout
    assert "``" not in out
    for command in ("serve", "topics", "groups", "transactions"):
        [line] = [x for x in out.splitlines() if x.strip().startswith(command + " ")]
        assert len(line.split()) > 2, line  # the name, then its description
