"""``--mapping header:NAME`` over the wire: the ids the chaos run's two readers (the
log as written, and the read_committed consumer) take from real records' headers, and
the checker catching a planted duplicate through them (fixture broker; ~1 s)."""

from __future__ import annotations

from confluent_kafka import Producer
from txbroker.testing.chaos.checker import InputRecord, check
from txbroker.testing.chaos.history import read_log
from txbroker.testing.chaos.mapping import inputs_of, parse_mapping
from txbroker.testing.chaos.run import _read_committed


def test_header_mapping_reads_real_headers_and_catches_a_duplicate(txbroker):
    txbroker.create_topic("hin", 1)
    txbroker.create_topic("hout", 1)
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "hmap"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(3):  # keys repeat: only the header can name the input
        producer.produce("hin", key=b"same", value=b"x", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for offset in (0, 1, 2, 1):  # input 1 made into output twice
        producer.produce("hout", key=b"same", value=b"y", partition=0,
                         headers=[("trace", b"t"), ("source", f"hin-0@{offset}".encode())])
    producer.produce("hout", key=b"same", value=b"z", partition=0)  # no header: unknown
    producer.commit_transaction(30)

    mapping = parse_mapping("header:source")
    inputs = inputs_of(read_log(txbroker.bootstrap, "hin", id_of=mapping.input_id))
    assert inputs.records == [InputRecord(f"hin-0-{k}", "hin", 0, k) for k in range(3)]
    assert inputs.repeated == {}
    log = read_log(txbroker.bootstrap, "hout", id_of=mapping.output_id)
    reads = _read_committed(txbroker.bootstrap, "hout", mapping.output_id)
    assert [r.id for r in log] == ["hin-0-0", "hin-0-1", "hin-0-2", "hin-0-1", None]
    assert [r.id for r in reads] == [r.id for r in log]
    report = check(inputs.records, log, reads, group_offsets=inputs.ends)
    assert report.counts == {"duplicate": 1, "unknown-id": 1}, report.text()
    assert report.anomalies["duplicate"][0]["id"] == "hin-0-1"
    # The key mapping cannot tell these inputs apart: the run would refuse to judge.
    assert inputs_of(read_log(txbroker.bootstrap, "hin")).repeated == {"same": 3}
