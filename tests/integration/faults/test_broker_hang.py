"""The broker hang fault (``{"broker": "hang", "ms": N}``, docs/fault-injection.md): no
request served or answered for N ms on any connection, then everything held is served;
the client's retry path runs, bounded by the connections' own limits."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from txbroker.protocol.messages import decode_response, encode_request

from tests.integration.wire_util import API_VERSIONS, api_versions_request, connect


def test_a_transactional_producer_commits_across_a_hang_longer_than_its_timeouts(txbroker):
    """librdkafka times out the held requests (socket.timeout.ms 500), drops the
    connection, reconnects (held too) and retries; after the hang every record is
    committed exactly once."""
    txbroker.create_topic("hung")
    stats: list[dict] = []
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "hung-1",
                         "socket.timeout.ms": 500, "linger.ms": 0,
                         "statistics.interval.ms": 100,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("hung", b"first")
    assert producer.flush(10) == 0
    hang = txbroker.faults.hang(2000)
    started = time.monotonic()
    for i in range(10):
        producer.produce("hung", b"%d" % i)
    producer.commit_transaction(30)
    assert time.monotonic() - started >= 2.0
    assert not hang.active and hang.fired >= 2  # the Produce, then the retries' requests
    producer.poll(0.2)
    timeouts = max(b["req_timeouts"] for s in stats for b in s["brokers"].values())
    assert timeouts >= 1  # the client gave up on a held request: its retry path ran

    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "r",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("hung", 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 11 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(20, timeout=0.2) if m.error() is None]
    consumer.close()
    assert sorted(values) == sorted([b"first", *(b"%d" % i for i in range(10))])


@pytest.mark.parametrize("txbroker_config", [{"queued.max.requests": "3"}])
def test_a_hang_holds_no_more_than_the_connection_may_queue(txbroker):
    """A client pipelining 8 requests into a hang: 3 are held (queued.max.requests),
    the rest stay unread; all 8 are answered, in order, once it ends. Removing the
    fault ends the hang early."""
    client = connect(txbroker)
    hang = txbroker.faults.hang(60_000)
    frames = b"".join(encode_request(API_VERSIONS, 3, cid, "pipe", api_versions_request())
                      for cid in range(1, 9))
    client.send_frame(frames)
    deadline = time.monotonic() + 10
    while hang.fired < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # (were more read, they would be counted by now)
    assert hang.fired == 3 and hang.active
    hang.remove()
    cids = [decode_response(API_VERSIONS, 3, client.recv_frame())[0] for _ in range(8)]
    assert cids == list(range(1, 9))
    assert hang.fired == 3 and not hang.active
    listed = [f for f in txbroker.faults.list() if f["id"] == hang.id]
    assert listed[0]["broker"] == "hang" and listed[0]["fired"] == 3


def test_a_crash_ends_a_hang_and_a_restart_does_not_bring_it_back(txbroker):
    txbroker.create_topic("t")
    kept = txbroker.faults.add(api="Produce", delay_ms=1)
    hang = txbroker.faults.hang(600_000)
    txbroker.crash()
    txbroker.restart()
    assert not hang.active
    assert [f["id"] for f in txbroker.faults.list() if f["active"]] == [kept.id]
    producer = Producer({"bootstrap.servers": txbroker.bootstrap})
    producer.produce("t", b"x")
    assert producer.flush(30) == 0  # answered: not hung
    assert kept.fired == 1
