"""KIP-467 on txbroker and on Apache Kafka: a produced batch refused because of some of
its records names them in the ProduceResponse's record_errors (batch index and
message), with INVALID_RECORD (or INVALID_TIMESTAMP when a timestamp is among the
reasons) for the batch, on the raw wire; and what librdkafka then reports for each
record of the batch."""

from __future__ import annotations

import time

import pytest
from txbroker.protocol.records import Record, build_batch

from tests.integration.clients import consume
from tests.integration.wire_util import PRODUCE, partition_response, produce_request

INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
HOUR_MS = 3_600_000


def produce_batch(broker, topic: str, records: list[Record], version: int):
    client = broker.raw()
    try:
        r = client.request(PRODUCE, version, produce_request(
            {topic: {0: build_batch(records)}}, version=version))
        return partition_response(r, topic, 0)
    finally:
        client.close()


def summary(p) -> dict:
    return {"error": int(p.error_code), "base_offset": p.base_offset,
            "log_start_offset": p.log_start_offset,
            "record_errors": [(e.batch_index, e.batch_index_error_message)
                              for e in p.record_errors],
            "error_message": p.error_message}


def kafka_message(errors: list[tuple[int, str]]) -> str:
    """Kafka's error_message for a batch refused with INVALID_RECORD: the count, then
    the first three record errors as Java prints them."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]")


@pytest.mark.kafka_ci
@pytest.mark.parametrize("version", [8, 9])
def test_keyless_records_on_a_compacted_topic(broker, version):
    """Ten records, two of them (3 and 7) without a key, to a compacted topic: the batch
    is refused with INVALID_RECORD, record_errors names records 3 and 7 with Kafka's
    message, nothing is appended, and a batch with keys then goes in at offset 0."""
    topic = broker.topic("kip467-compact", configs={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    records = [Record(None if i in (3, 7) else b"k%d" % i, b"v%d" % i, timestamp=now)
               for i in range(10)]
    got = summary(produce_batch(broker, topic, records, version))
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert got == {
        "error": INVALID_RECORD, "base_offset": -1, "log_start_offset": 0,
        "record_errors": [(3, why), (7, why)],
        "error_message": kafka_message([(3, why), (7, why)]),
    }, got
    ok = produce_batch(broker, topic, [Record(b"k", b"v", timestamp=now)], version)
    assert (int(ok.error_code), ok.base_offset, list(ok.record_errors)) == (0, 0, [])


def test_timestamps_out_of_range(broker):
    """A CreateTime topic accepting timestamps within an hour: records 1 and 4 two hours
    old, record 2 keyless on a compacted topic: INVALID_TIMESTAMP for the batch (one
    timestamp error is enough), record_errors lists all three with their reasons."""
    topic = broker.topic("kip467-ts", configs={
        "cleanup.policy": "compact", "message.timestamp.before.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    old = now - 2 * HOUR_MS
    records = [Record(None if i == 2 else b"k%d" % i, b"v", timestamp=old if i in (1, 4) else now)
               for i in range(6)]
    p = produce_batch(broker, topic, records, 9)
    assert (int(p.error_code), p.base_offset, p.log_start_offset) == (INVALID_TIMESTAMP, -1, 0)
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    errors = [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
    assert [i for i, _m in errors] == [1, 2, 4], errors
    assert errors[1][1] == ("Compacted topic cannot accept message without key in topic "
                            f"partition {topic}-0")
    for index, message in (errors[0], errors[2]):
        # "Timestamp <ts> of message with offset <index> is out of range. The timestamp
        # should be within [now - 1 h, now + max]": the bounds depend on the broker's clock.
        assert message.startswith(f"Timestamp {old} of message with offset {index} is out of "
                                  "range. The timestamp should be within ["), message


@pytest.mark.parametrize("keyless", [(2, 6), (6,)])
def test_librdkafka_reports_the_offending_records_and_the_others(broker, keyless):
    """confluent-kafka sends ten records in one batch, some without a key, to a
    compacted topic. With two record errors its delivery reports give INVALID_RECORD
    for those two and _INVALID_DIFFERENT_RECORD for the eight others; with one, every
    record gets the partition's INVALID_RECORD (librdkafka 2.16 then uses the batch's
    code for all: rd_kafka_dr_msgq0 overrides the per-record codes unless the response
    lists more than one record error)."""
    from confluent_kafka import Producer

    topic = broker.topic("kip467-rdkafka", configs={"cleanup.policy": "compact"})
    reports: dict[bytes, str] = {}

    def report(err, msg):
        reports[msg.value()] = "OK" if err is None else err.name()

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 500,
                  "enable.idempotence": False, "retries": 0})
    for i in range(10):
        p.produce(topic, key=None if i in keyless else b"k%d" % i, value=b"v%d" % i,
                  partition=0, on_delivery=report)
    assert p.flush(30) == 0
    others = "_INVALID_DIFFERENT_RECORD" if len(keyless) > 1 else "INVALID_RECORD"
    assert reports == {b"v%d" % i: ("INVALID_RECORD" if i in keyless else others)
                       for i in range(10)}, reports
    p.produce(topic, key=b"k", value=b"after", partition=0, on_delivery=report)
    assert p.flush(30) == 0 and reports[b"after"] == "OK"
    assert [r.value for r in consume("confluent", broker.bootstrap, topic, [0], 1)] == [b"after"]
