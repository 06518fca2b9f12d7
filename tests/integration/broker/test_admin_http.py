"""The admin/metrics HTTP endpoint, against an in-process broker."""

import json
import urllib.request

import pytest
from confluent_kafka import Producer


@pytest.fixture
def txbroker_config():
    return {"admin.http.port": "0"}


def _get(txbroker, path):
    port = txbroker.call(lambda b: b.admin_http.port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_health_metrics_and_topics(txbroker):
    txbroker.create_topic("http-topic", 2)
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce("http-topic", value=b"v%d" % i, partition=1)
    assert p.flush(10) == 0

    status, body = _get(txbroker, "/health")
    assert (status, body) == (200, "ok\n")

    status, body = _get(txbroker, "/metrics")
    assert status == 200
    assert 'txbroker_partition_high_watermark{topic="http-topic",partition="1"} 5' in body
    assert 'txbroker_partition_log_end_offset{topic="http-topic",partition="0"} 0' in body
    assert 'txbroker_requests_total{api="produce",version=' in body

    status, body = _get(txbroker, "/topics")
    topics = json.loads(body)
    assert [p["high_watermark"] for p in topics["http-topic"]["partitions"]] == [0, 5]
