"""Kafka Streams 4.4 with its own group protocol (KIP-1071, ``group.protocol=streams``)
on txbroker (``streams.version`` 1) and on Apache Kafka 4.4: the payments validator of
test_kafka_streams.py (exactly_once_v2, a repartition topic and a changelog, which the
broker creates) runs as two instances; one is SIGKILLed mid-stream and restarted from
its state directory, then a third instance joins (scale-out). read_committed readers see
every payment exactly once, and StreamsGroupDescribe shows the three members sharing
the four tasks. Each instance has an interactive-query endpoint (``application.server``):
KafkaStreams.metadataForAllStreamsClients() of the last one shows the three endpoints
with the partitions of their active tasks (the broker's PartitionsByUserEndpoint)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from txbroker.protocol.messages import build, request_module

from tests.integration.txn_util import unique

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from .test_kafka_streams import (
    PARTITIONS,
    StreamsInstance,
    assert_exactly_once,
    committed,
    read_outputs,
    setup_payments,
    wait_committed,
)

# A SIGKILLed member's tasks move after 6 s, members heartbeat every 0.5 s.
STREAMS_TIMEOUTS = {"group.streams.session.timeout.ms": "6000",
                    "group.streams.heartbeat.interval.ms": "500"}
CONFIG = {
    "txbroker": {**COMMON_CONFIG, **STREAMS_TIMEOUTS, "txbroker.streams.version": "1"},
    # Kafka 4.4 finalizes streams.version 1 on a new cluster; its bounds of the timeouts
    # and its first-assignment delay are lowered to match.
    "kafka": {**COMMON_CONFIG, **STREAMS_TIMEOUTS,
              "group.streams.min.session.timeout.ms": "1000",
              "group.streams.min.heartbeat.interval.ms": "100",
              "group.streams.initial.rebalance.delay.ms": "0"},
}


ENDPOINT_PORTS = {"a": 7001, "b": 7002, "c": 7003}  # application.server of each instance


def endpoints_seen(instance) -> dict[str, tuple[list[str], list[str]]]:
    """The instance's last METADATA line: endpoint -> (standby, active) partitions."""
    lines = [x for x in instance.lines if x.startswith("METADATA ")]
    if not lines:
        return {}
    out = {}
    for endpoint, active, standby in re.findall(r"(\S+) active=\[(.*?)\] standby=\[(.*?)\]",
                                                lines[-1]):
        out[endpoint] = ([x for x in standby.split(", ") if x],
                         [x for x in active.split(", ") if x])
    return out


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def streams_broker(request, tmp_path_factory) -> Iterator[Broker]:
    yield from running_broker(request.param, tmp_path_factory, CONFIG[request.param])


def describe_group(broker: Broker, group: str):
    m = request_module(89, 0)
    client = broker.raw()
    try:
        (g,) = client.request(89, 0, build(m.StreamsGroupDescribeRequest, group_ids=(group,),
                                           include_authorized_operations=False)).groups
        return g
    finally:
        client.close()


def topology_view(g) -> list:
    def infos(topics):
        return [(t.name, t.partitions, {kv.key: kv.value for kv in t.topic_configs})
                for t in topics]

    return [(s.subtopology_id, s.source_topics, s.repartition_sink_topics,
             infos(s.state_changelog_topics), infos(s.repartition_source_topics))
            for s in g.topology.subtopologies]


def test_streams_protocol_kill_restart_and_scale_out(streams_broker, jvm_classes, tmp_path):
    broker = streams_broker
    prefix = unique("sproto")
    app_id = f"{prefix}-app"
    valid, rejected = setup_payments(broker, prefix)

    started: list[StreamsInstance] = []
    running: list[StreamsInstance] = []

    def instance(name: str, delay_ms: int) -> StreamsInstance:
        started.append(StreamsInstance(jvm_classes, broker.bootstrap, app_id, prefix,
                                       tmp_path / name, delay_ms, "streams",
                                       f"localhost:{ENDPOINT_PORTS[name]}"))
        running.append(started[-1])
        return started[-1]

    try:
        a, b = instance("a", 15), instance("b", 15)
        a.wait_state("RUNNING", 120)
        b.wait_state("RUNNING", 120)
        wait_committed(broker, f"{prefix}-validated", 100, [a, b])
        a.kill()  # mid-stream: no leave, its transaction open
        running.remove(a)
        assert committed(broker, f"{prefix}-validated", PARTITIONS) < len(valid), \
            "the instances finished before one was killed"
        a2 = instance("a", 0)  # the same state directory: the same process id
        a2.wait_state("RUNNING", 120)
        c = instance("c", 0)  # scale-out
        c.wait_state("RUNNING", 120)
        out = read_outputs(broker, prefix, app_id, valid, running)
        # The killed member is gone (session timeout); the three share the 4 tasks.
        deadline = time.monotonic() + 60
        while True:
            g = describe_group(broker, app_id)
            owners = [m for m in g.members if m.assignment.active_tasks]
            if g.group_state == "Stable" and len(g.members) == 3 and len(owners) == 3:
                break
            assert time.monotonic() < deadline, (g, [i.tail() for i in running])
            time.sleep(0.5)
        # What the Streams clients learnt of each other's endpoints and partitions.
        repartition = f"{app_id}-balances-repartition"
        inputs = {f"{t}-{p}" for t in (f"{prefix}-payments", repartition)
                  for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while True:
            seen = endpoints_seen(c)
            active = [p for _standby, ps in seen.values() for p in ps]
            if (set(seen) == {f"localhost:{p}" for p in ENDPOINT_PORTS.values()}
                    and sorted(active) == sorted(inputs)):
                break
            assert time.monotonic() < deadline, (seen, c.tail())
            time.sleep(0.5)
    finally:
        for i in started:
            i.terminate()
    assert_exactly_once(out, valid, rejected)
    # The topology as the group coordinator configured it (internal topics' partition
    # counts and configs), the same on both brokers.
    repartition, changelog = f"{app_id}-balances-repartition", f"{app_id}-balances-changelog"
    assert topology_view(g) == [
        ("0", (f"{prefix}-payments",), (repartition,), [], []),
        ("1", (), (), [(changelog, 2, {"cleanup.policy": "compact",
                                       "message.timestamp.type": "CreateTime"})],
         [(repartition, 2, {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime",
                            "retention.ms": "-1", "segment.bytes": "52428800"})])]
    assert sum(len(t.partitions) for m in g.members for t in m.assignment.active_tasks) == 4
