"""A hostile StreamsGroupHeartbeat on txbroker and on Apache Kafka 4.4.0: a topology too
large for one record of ``__consumer_offsets``, a copartition group naming a topic that
is not there, more tasks than a member's assignment record holds, and a group at
``group.streams.max.size``. The same error codes on both brokers, nothing written, and
the broker keeps serving."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build

from tests.integration.test_streams_groups_wire import HB, describe, heartbeat
from tests.integration.txn_util import unique

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from .test_streams_group_wire import ready

CONFIG = {
    "txbroker": {**COMMON_CONFIG, "txbroker.streams.version": "1",
                 "group.streams.max.size": "2"},
    "kafka": {**COMMON_CONFIG, "group.streams.initial.rebalance.delay.ms": "0",
              "group.streams.max.size": "2"},
}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def broker(request, tmp_path_factory) -> Iterator[Broker]:
    yield from running_broker(request.param, tmp_path_factory, CONFIG[request.param])


def big_topology(subtopologies: int, name_length: int = 240):
    """``subtopologies`` subtopologies, each reading its own (missing) topic of a long
    name and writing a changelog of a long name."""
    def name(kind: str, i: int) -> str:
        return f"{kind}{i}-".ljust(name_length, "x")

    return build(HB.Topology, epoch=1, subtopologies=tuple(build(
        HB.Subtopology, subtopology_id=str(i), source_topics=(name("s", i),),
        source_topic_regex=(), state_changelog_topics=(build(
            HB.TopicInfo, name=name("c", i), partitions=0, replication_factor=0,
            topic_configs=()),),
        repartition_sink_topics=(), repartition_source_topics=(), copartition_groups=())
        for i in range(subtopologies)))


def copartitioned(index: int):
    """One subtopology whose copartition group names source topic ``index``."""
    return build(HB.Topology, epoch=1, subtopologies=(build(
        HB.Subtopology, subtopology_id="0", source_topics=("in",), source_topic_regex=(),
        state_changelog_topics=(), repartition_sink_topics=(), repartition_source_topics=(),
        copartition_groups=(build(HB.CopartitionGroup, source_topics=(index,),
                                  source_topic_regex=(), repartition_source_topics=()),)),))


def test_hostile_topologies_are_refused_as_kafka(broker):
    """A topology whose record does not fit in __consumer_offsets' max.message.bytes
    (Kafka's coordinator: RecordTooLargeException) and a copartition group with an index
    out of range: UNKNOWN_SERVER_ERROR without a message, nothing written (the group does
    not exist), and the broker answers the next heartbeat at once."""
    client = broker.raw(timeout=60)
    try:
        for topology, size in ((big_topology(2500), "1.2 MB"), (copartitioned(5), "index 5"),
                               (copartitioned(-1), "index -1")):
            group = unique("hostile")
            ready(broker, group)
            r = heartbeat(client, group, "m1", 0, topo=topology)
            assert (r.error_code, r.error_message) == (E.unknown_server_error, None), size
            (g,) = describe(client, group)
            assert (g.error_code, g.error_message) == (E.group_id_not_found,
                                                       f"Group {group} not found."), size
        started = time.monotonic()
        r = heartbeat(client, group, "m1", 0, topo=big_topology(1000))  # 0.5 MB: it fits
        assert r.error_code == 0 and r.member_epoch > 0
        assert time.monotonic() - started < 5
    finally:
        client.close()


def wide(topic: str, subtopologies: int):
    """``subtopologies`` stateless subtopologies, each reading all of ``topic``."""
    return build(HB.Topology, epoch=1, subtopologies=tuple(build(
        HB.Subtopology, subtopology_id=str(i), source_topics=(topic,), source_topic_regex=(),
        state_changelog_topics=(), repartition_sink_topics=(), repartition_source_topics=(),
        copartition_groups=()) for i in range(subtopologies)))


def test_more_tasks_than_an_assignment_record_holds(broker):
    """900 subtopologies of a 300-partition topic: 270,000 tasks, 1.08 MB of task ids in
    the one member's assignment record. Kafka computes the assignment (2 s) and fails
    to write it; txbroker refuses the join before computing it: the same answer, nothing
    written."""
    topic = broker.topic("wide", 300)
    group = unique("wide")
    ready(broker, group)
    client = broker.raw(timeout=120)
    try:
        r = heartbeat(client, group, "m1", 0, topo=wide(topic, 900))
        assert (r.error_code, r.error_message) == (E.unknown_server_error, None)
        (g,) = describe(client, group)
        assert (g.error_code, g.error_message) == (E.group_id_not_found,
                                                   f"Group {group} not found.")
    finally:
        client.close()


def test_group_max_size(broker):
    group = unique("full")
    ready(broker, group)
    client = broker.raw()
    try:
        assert [heartbeat(client, group, m, 0).error_code for m in ("m1", "m2")] == [0, 0]
        r = heartbeat(client, group, "m3", 0)
        assert (r.error_code, r.error_message) == (
            E.group_max_size_reached,
            "The streams group has reached its maximum capacity of 2 members.")
    finally:
        client.close()
