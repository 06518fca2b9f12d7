"""What a hostile streams client costs txbroker (docs/consumer-groups.md, "Streams
groups"): topologies too large for a record of ``__consumer_offsets``, sent at once on
several connections, are refused (UNKNOWN_SERVER_ERROR, as Kafka) without keeping
anything, the broker answering other requests meanwhile; a group keeps one topology
however many members join with one; a topology with more tasks than a member's
assignment record holds is refused before any assignment is computed."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from kio.schema.errors import ErrorCode as E

from tests.differential.test_streams_group_bounds import big_topology, wide
from tests.integration.test_streams_groups_wire import ENABLED, describe, heartbeat
from tests.integration.wire_util import API_VERSIONS, api_versions_request, connect


@pytest.fixture
def txbroker_config():
    return {**ENABLED, "message.max.bytes": "40000"}


def stored_groups(txbroker) -> dict[str, int]:
    """group id -> the byte length of its topology's names, as the coordinator holds it."""
    def names(g) -> int:
        t = g.p.topology
        return 0 if t is None else sum(len(n) for s in t.subtopologies
                                       for n in (*s.source_topics, *s.repartition_sink_topics))
    return txbroker.call(lambda b: {gid: names(g) for gid, g in b.groups.streams.groups.items()})


def test_oversized_topologies_are_refused_and_not_kept(txbroker):
    results: list[tuple[int, str | None]] = []

    def hostile(i: int) -> None:
        client = connect(txbroker)
        try:
            for k in range(3):  # 600 subtopologies of 240-byte names: ~290 KB a record
                r = heartbeat(client, f"big-{i}-{k}", "m1", 0, topo=big_topology(600))
                results.append((r.error_code, r.error_message))
        finally:
            client.close()

    threads = [threading.Thread(target=hostile, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    client = connect(txbroker)
    try:
        slowest = 0.0
        while any(t.is_alive() for t in threads):
            started = time.monotonic()
            assert client.request(API_VERSIONS, 3, api_versions_request(3)).error_code == 0
            slowest = max(slowest, time.monotonic() - started)
        for t in threads:
            t.join()
        assert results == [(E.unknown_server_error, None)] * 12
        assert slowest < 2, slowest
        assert not [g for g in stored_groups(txbroker) if g.startswith("big-")]
        # One that fits (60 subtopologies: 29 KB) is kept, once for all its members; a
        # member with another topology is refused (topology updates, as Kafka 4.4).
        assert [heartbeat(client, "fits", f"m{i}", 0, topo=big_topology(60)).error_code
                for i in range(5)] == [0] * 5
        assert heartbeat(client, "fits", "m9", 0, topo=big_topology(61)).error_code == (
            E.invalid_request)
        assert stored_groups(txbroker)["fits"] == 60 * 240  # its source topics' names
        (g,) = describe(client, "fits")
        assert len(g.members) == 5
    finally:
        client.close()


def test_more_tasks_than_a_record_holds_are_refused_before_assigning(txbroker, caplog):
    """max.message.bytes 40,000: a member's target assignment record (4 bytes a task)
    holds 10,000 tasks, its current assignment record (a task and its epoch: 8 bytes)
    5,000. 120 subtopologies of a 100-partition topic (12,000 tasks) are refused for a
    lone member before any assignment is computed; 60 (6,000) once its records are built
    and found too large (as Kafka); neither group is kept; 40 are assigned."""
    txbroker.create_topic("wide-in", 100)
    client = connect(txbroker)
    try:
        with caplog.at_level(logging.INFO):
            r = heartbeat(client, "wide120", "m1", 0, topo=wide("wide-in", 120))
            assert (r.error_code, r.error_message) == (E.unknown_server_error, None)
            r = heartbeat(client, "wide60", "m1", 0, topo=wide("wide-in", 60))
            assert (r.error_code, r.error_message) == (E.unknown_server_error, None)
        said = caplog.text
        assert "group 'wide120' refused: its topology's tasks cannot fit" in said
        assert "group 'wide60' refused" not in said
        assert "cannot write streams group wide60: RecordTooLargeError" in said
        assert not {"wide120", "wide60"} & set(stored_groups(txbroker))
        r = heartbeat(client, "wide40", "m1", 0, topo=wide("wide-in", 40))
        assert r.error_code == 0
        assert sum(len(t.partitions) for t in r.active_tasks) == 4_000
    finally:
        client.close()
