"""A compacted topic through real clients: the background cleaner removes all but the
latest record per key from closed segments, and consumers read the result with gaps."""

from __future__ import annotations

import pytest

from tests.helpers import wait_until

from .clients import Msg, consume, produce, stored_batches
from .txn_util import Reader, TxnProducer, unique


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


def test_transactional_compacted_topic_after_its_markers_are_removed(txbroker, topic):
    """Committed and aborted transactions on a compacted topic. The cleaner removes the
    aborted records and the superseded values, then (delete.retention.ms=0) the
    COMMIT/ABORT markers whose transactions have no data left. read_committed and
    read_uncommitted consumers of every client then read the latest committed value
    per key, and after a restart no transaction looks open."""

    txbroker.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": "1024",
                                     "min.cleanable.dirty.ratio": "0.01",
                                     "delete.retention.ms": "0"})
    tp = (topic, 0)
    latest: dict[bytes, bytes] = {}
    with TxnProducer("confluent", txbroker.bootstrap, unique("compact-txn")) as producer:
        producer.init()
        for t in range(12):
            producer.begin()
            values = {b"k%d" % i: b"t%d-k%d-" % (t, i) + b"x" * 40 for i in range(4)}
            for key, value in values.items():
                producer.send(topic, value, key=key, partition=0)
            producer.flush()  # in the log before an abort, so there is something to abort
            if t % 3 == 2:
                producer.abort()
            else:
                producer.commit()
                latest.update(values)
    # Plain records with keys of their own roll segments past the transactions, so the
    # cleaner reaches all of them (it never cleans the active segment).
    fillers = [Msg(b"filler-%d" % i, b"f%d-" % i + b"y" * 60, partition=0) for i in range(40)]
    produce("kafka-python", txbroker.bootstrap, topic, fillers)

    def markers_now() -> int:
        return sum(h.is_control for h in stored_batches(txbroker, topic, 0))

    # 12 markers were written (the cleaner may have started on them already). Two must
    # stay: the COMMIT of transaction 10, whose values are the latest of their keys, and
    # the ABORT after the producer's last batch (transaction 11, kept empty for its
    # producer state).
    assert wait_until(lambda: markers_now() == 2, timeout=30), markers_now()
    expected = list(latest.values()) + [m.value for m in fillers]

    def read(client: str, read_committed: bool = True) -> list[bytes]:
        end = txbroker.call(lambda b: b.logs.get_log(topic, 0).log_end_offset)
        with Reader(client, txbroker.bootstrap, [tp], read_committed=read_committed) as r:
            return [rec.value for rec in sorted(r.read_until({tp: end}), key=lambda x: x.offset)]

    for client in ("confluent", "kafka-python", "aiokafka"):
        assert read(client) == expected, client
    assert read("confluent", read_committed=False) == expected

    txbroker.restart()
    plog_ends = txbroker.call(lambda b: (b.logs.get_log(topic, 0).last_stable_offset,
                                         b.logs.get_log(topic, 0).high_watermark,
                                         dict(b.logs.get_log(topic, 0).ongoing_txns)))
    assert plog_ends[0] == plog_ends[1] and plog_ends[2] == {}, plog_ends
    assert read("kafka-python") == expected
