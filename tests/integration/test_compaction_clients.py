"""A compacted topic through real clients: the background cleaner removes all but the
latest record per key from closed segments, and consumers read the result with gaps."""

from __future__ import annotations

import pytest

from tests.helpers import wait_until

from .clients import Msg, consume, produce


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return {"log.cleaner.backoff.ms": "100"}


def _cleaned_up_to(txbroker, topic: str) -> tuple[int, int]:
    """(cleaner checkpoint, base offset of the active segment) of partition 0."""

    def read(broker):
        plog = broker.logs.get_log(topic, 0)
        return broker.logs.cleaner.checkpoint(plog), plog.active_segment.base_offset

    return txbroker.call(read)


@pytest.mark.parametrize("producer,consumers", [
    ("confluent", ("kafka-python", "confluent", "aiokafka")),
    ("kafka-python", ("kafka-python", "confluent")),
])
def test_consumers_see_the_latest_value_per_key(txbroker, topic, producer, consumers):
    txbroker.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": "1024",
                                     "min.cleanable.dirty.ratio": "0.01"})
    msgs = []
    for i in range(150):
        # Seven keys written over and over, and a few keys written once (kept, with gaps).
        key = b"once-%d" % i if i % 37 == 3 else b"key-%d" % (i % 7)
        value = None if i in (100, 120) else b"value-%d-" % i + b"x" * 30  # two tombstones
        msgs.append(Msg(key, value, partition=0))
    sent = []
    for start in range(0, len(msgs), 10):  # several produce requests: many batches, rolls
        chunk = msgs[start : start + 10]
        offsets = produce(producer, txbroker.bootstrap, topic, chunk)
        sent += [(off, m.key, m.value) for (_p, off), m in zip(offsets, chunk, strict=True)]

    assert wait_until(lambda: (lambda c: c[0] == c[1] > 0)(_cleaned_up_to(txbroker, topic)),
                      timeout=20)
    end, _active = _cleaned_up_to(txbroker, topic)
    latest = {key: off for off, key, _v in sent if off < end}
    expected = [(o, k, v) for o, k, v in sent if o >= end or latest[k] == o]
    assert len(expected) < len(sent) // 2
    offsets = [o for o, _k, _v in expected]
    assert sum(b - a > 1 for a, b in zip(offsets, offsets[1:], strict=False)) > 1  # gaps

    for consumer in consumers:
        got = consume(consumer, txbroker.bootstrap, topic, [0], len(expected), timeout=20)
        assert [(r.offset, r.key, r.value) for r in got] == expected, consumer
