"""The ``txbroker`` Spark source's client (spark_jobs/wire.py, reader.py) on the three-node
cluster, where what a single broker never does happens: partitions led by different
brokers, a leader gone (SIGKILL), the first bootstrap server down, and a leadership
move that makes the broker the client still routes to answer NOT_LEADER_OR_FOLLOWER.
Each read must return exactly the committed records, with the same client object
across the changes (its cached connections and leaders go stale)."""

from __future__ import annotations

import uuid

import pytest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module
from txbroker.spark_jobs.options import Range, parse_options
from txbroker.spark_jobs.reader import read_range
from txbroker.spark_jobs.wire import WireClient

from tests.helpers import RawClient

pytestmark = pytest.mark.cluster

TOPIC = "source-on-cluster"
PARTITIONS = 3
PER_PARTITION = 40


def _write(bootstrap: str) -> dict[int, list[bytes]]:
    """Committed records in every partition, and an aborted transaction in between;
    what read_committed must return per partition."""
    from confluent_kafka import Producer

    def producer() -> Producer:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                      "transactional.id": f"source-{uuid.uuid4().hex[:8]}"})
        p.init_transactions(60)
        return p

    committer, aborter = producer(), producer()
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for half in range(2):
        committer.begin_transaction()
        aborter.begin_transaction()
        for i in range(PER_PARTITION // 2):
            for p in range(PARTITIONS):
                value = b"c%d-%d-%d" % (half, p, i)
                committer.produce(TOPIC, value, partition=p)
                expected[p].append(value)
                aborter.produce(TOPIC, b"aborted-%d" % i, partition=p)
        aborter.flush(30)
        aborter.abort_transaction(60)
        committer.commit_transaction(60)
    return expected


def _read(client: WireClient, bootstrap: str, partition: int) -> list[bytes]:
    opts = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC},
                         streaming=False)
    end = client.latest([(TOPIC, partition)])[(TOPIC, partition)]
    return [v for batch in read_range(Range(TOPIC, partition, 0, end), opts, client)
            for v in batch.column("value").to_pylist()]


def _list_offsets_error(cluster, node: int, partition: int) -> int:
    """The error code ``node`` answers a read_committed ListOffsets of the partition with
    (a Fetch would not tell: since KIP-392 a follower serves Fetch v11+ too)."""
    m = request_module(2, 7)
    client = RawClient(cluster.nodes[node].host, cluster.nodes[node].port)
    try:
        r = client.request(2, 7, build(
            m.ListOffsetsRequest, replica_id=-1, isolation_level=1, topics=(build(
                m.ListOffsetsTopic, name=TOPIC, partitions=(build(
                    m.ListOffsetsPartition, partition_index=partition,
                    current_leader_epoch=-1, timestamp=-1),)),)))
        return r.topics[0].partitions[0].error_code
    finally:
        client.close()


def test_source_client_follows_leaders_across_brokers(kafka_cluster):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = kafka_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, -1)])[TOPIC].result(30)
    cluster.wait_in_sync([TOPIC])
    expected = _write(cluster.bootstrap)
    leaders = {p: cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
    assert len(set(leaders.values())) > 1, leaders  # the partitions are spread

    client = WireClient(cluster.bootstrap, timeout=60)
    try:
        # Leaders on different brokers: one client, a connection per leader.
        for p in range(PARTITIONS):
            assert _read(client, cluster.bootstrap, p) == expected[p]

        # The leader of partition 0 gone (SIGKILL): the same client finds the new one.
        victim = leaders[0]
        cluster.kill(victim)
        assert _read(client, cluster.bootstrap, 0) == expected[0]
        # A new client whose first bootstrap server is the dead broker.
        dead_first = ",".join(sorted(cluster.bootstrap.split(","),
                                     key=lambda s: s != cluster.nodes[victim].bootstrap))
        with WireClient(dead_first, timeout=60) as fresh:
            assert _read(fresh, dead_first, 0) == expected[0]

        # Back, then made leader again (preferred leader election) while the client
        # still routes partition 0 to the interim leader, which now answers ListOffsets
        # with NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and follows.
        cluster.restart(victim)
        cluster.wait_in_sync([TOPIC])
        interim = cluster.leader(TOPIC, 0)
        assert interim != victim
        assert _read(client, cluster.bootstrap, 0) == expected[0]  # routed to the interim
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(30)
        cluster.wait(lambda: cluster.leader(TOPIC, 0) == victim, 30,
                      lambda: f"{TOPIC}-0 led by {cluster.leader(TOPIC, 0)}, not {victim}")
        assert _list_offsets_error(cluster, interim, 0) == ErrorCode.not_leader_or_follower
        assert _read(client, cluster.bootstrap, 0) == expected[0]
        for p in range(PARTITIONS):
            assert _read(client, cluster.bootstrap, p) == expected[p]
    finally:
        client.close()
