"""Time retention on txbroker and on Apache Kafka: records older than a topic's
retention.ms are deleted even when they are in the active segment (Kafka rolls it
first), and a consumer positioned before the new log start is reset by its
auto.offset.reset.

Both brokers of this file check retention every second. They are brokers of their own,
not the session's: the other differential tests produce raw batches stamped 1970 (the
default of build_batch), which a check every second would delete under them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.helpers import wait_until
from tests.integration.clients import Msg, consume, now_ms, produce

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from .test_list_offsets import EARLIEST, LATEST, list_offsets

CONFIG = {**COMMON_CONFIG, "log.retention.check.interval.ms": "1000"}
# Kafka's first retention check waits log.initial.task.delay.ms (30 s by default).
KAFKA_CONFIG = {**CONFIG, "log.initial.task.delay.ms": "0"}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def checking_broker(request, tmp_path_factory) -> Iterator[Broker]:
    """txbroker or Apache Kafka, checking retention every second."""
    config = KAFKA_CONFIG if request.param == "kafka" else CONFIG
    yield from running_broker(request.param, tmp_path_factory, config)


@pytest.mark.kafka_ci
def test_records_past_retention_ms_go_with_the_active_segment(checking_broker):
    broker = checking_broker
    topic = broker.topic("retention-active", configs={"retention.ms": "60000"})
    hour_ago = now_ms() - 3_600_000
    produce("confluent", broker.bootstrap, topic,
            [Msg(None, f"old-{i}".encode(), (), hour_ago + i, 0) for i in range(20)])
    client = broker.raw()
    try:
        # One segment, and its newest record is past retention.ms: all of it goes.
        assert wait_until(lambda: list_offsets(client, topic, EARLIEST)[:2] == (0, 20),
                          timeout=30), list_offsets(client, topic, EARLIEST)
        assert list_offsets(client, topic, LATEST)[:2] == (0, 20)
        # The log goes on at its end; a consumer asking for offset 0 is reset to 20.
        acks = produce("confluent", broker.bootstrap, topic, [Msg(None, b"new", (), None, 0)])
        assert [offset for _, offset in acks] == [20]
        got = consume("confluent", broker.bootstrap, topic, [0], 1, start=0)
        assert [(r.offset, r.value) for r in got] == [(20, b"new")]
        # A segment whose newest record is recent stays through the next checks.
        time.sleep(2.5)
        assert list_offsets(client, topic, EARLIEST)[:2] == (0, 20)
        assert list_offsets(client, topic, LATEST)[:2] == (0, 21)
    finally:
        client.close()
