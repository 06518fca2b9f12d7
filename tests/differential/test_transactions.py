"""Transactions on txbroker and on Apache Kafka: commit visible and abort hidden for
read_committed consumers, the last stable offset holding readers back, and fencing of
an older producer with the same transactional.id (with the client's error and, on the
raw wire, the error code of every request an old producer may still send)."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import Msg, produce
from tests.integration.txn_util import (
    RawTxn,
    Reader,
    TxnProducer,
    is_fenced,
    list_offsets,
    read_all,
    unique,
)

from .util import init_txn

TXN_CLIENTS = ("confluent", "kafka-python")


def log_ends(broker, partitions) -> dict:
    client = broker.raw()
    try:
        return {tp: list_offsets(client, tp, read_committed=False) for tp in partitions}
    finally:
        client.close()


def wait_stable(broker, partitions, timeout: float = 15, expected: int | None = None) -> dict:
    """Log ends once the last stable offset caught up with them (markers written), and
    reached ``expected`` if given. txbroker advances the high watermark only once a
    marker is fsynced while the transaction is complete at its append, so for a moment
    LSO == HW one short of the last marker; Kafka's single replica has no such moment."""
    client = broker.raw()
    deadline = time.monotonic() + timeout
    try:
        while True:
            ends = {tp: list_offsets(client, tp, read_committed=False) for tp in partitions}
            stable = {tp: list_offsets(client, tp, read_committed=True) for tp in partitions}
            reached = expected is None or all(end >= expected for end in ends.values())
            if (ends == stable and reached) or time.monotonic() > deadline:
                return ends
            time.sleep(0.05)
    finally:
        client.close()


@pytest.mark.kafka_ci
@pytest.mark.parametrize("client", TXN_CLIENTS)
def test_commit_visible_abort_hidden(broker, client):
    """Commit, abort, commit over two partitions: read_committed readers see exactly the
    committed records, read_uncommitted ones everything (the aborted records were
    flushed before the abort, so they are in the log)."""
    topic = broker.topic(f"txn-{client}", partitions=2)
    tps = [(topic, 0), (topic, 1)]
    committed: dict = {tp: [] for tp in tps}
    everything: dict = {tp: [] for tp in tps}
    with TxnProducer(client, broker.bootstrap, unique(f"tid-{client}")) as prod:
        prod.init()
        for n, commit in enumerate((True, False, True)):
            prod.begin()
            for p in (0, 1):
                for i in range(3):
                    value = f"{n}-{p}-{i}".encode()
                    prod.send(topic, value, partition=p)
                    everything[(topic, p)].append(value)
                    if commit:
                        committed[(topic, p)].append(value)
            prod.flush()
            prod.commit() if commit else prod.abort()
    # 9 records and 3 markers per partition.
    ends = wait_stable(broker, tps, expected=12)
    assert ends == {tp: 12 for tp in tps}
    for reader in TXN_CLIENTS:
        assert read_all(reader, broker.bootstrap, ends) == committed, reader
        assert read_all(reader, broker.bootstrap, ends, read_committed=False) == everything


@pytest.mark.kafka_ci
def test_last_stable_offset_holds_readers_back(broker):
    """A plain record, an open transaction's record, a plain record: read_committed stops
    before the open transaction until it commits; read_uncommitted reads all three."""
    topic = broker.topic("txn-lso")
    tp = (topic, 0)
    produce("confluent", broker.bootstrap, topic, [Msg(None, b"a", partition=0)])
    with TxnProducer("confluent", broker.bootstrap, unique("tid-lso")) as prod:
        prod.init()
        prod.begin()
        prod.send(topic, b"t", partition=0)
        prod.flush()
        produce("confluent", broker.bootstrap, topic, [Msg(None, b"b", partition=0)])
        with Reader("confluent", broker.bootstrap, [tp]) as committed_reader:
            got = []
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                got.extend(committed_reader.poll(0.2))
            assert [r.value for r in got] == [b"a"]
            assert committed_reader.positions()[tp] == 1
            assert read_all("confluent", broker.bootstrap, {tp: 3},
                            read_committed=False) == {tp: [b"a", b"t", b"b"]}
            prod.commit()
            got.extend(committed_reader.read_until({tp: 4}))
            assert [r.value for r in got] == [b"a", b"t", b"b"]


@pytest.mark.kafka_ci
@pytest.mark.parametrize("client", TXN_CLIENTS)
def test_older_producer_fenced(broker, client):
    """A second producer with the same transactional.id fences the first: the first's
    commit fails with the client's fatal fenced error, its open transaction is
    aborted, and the second commits."""
    topic = broker.topic(f"txn-fence-{client}")
    tp = (topic, 0)
    tid = unique(f"tid-fence-{client}")
    with TxnProducer(client, broker.bootstrap, tid) as old:
        old.init()
        old.begin()
        old.send(topic, b"zombie", partition=0)
        old.flush()
        with TxnProducer(client, broker.bootstrap, tid) as new:
            new.init()
            new.begin()
            new.send(topic, b"new", partition=0)
            new.flush()
            with pytest.raises(Exception) as info:
                old.commit()
            assert is_fenced(client, info.value), repr(info.value)
            new.commit()
    ends = wait_stable(broker, [tp])
    assert read_all("confluent", broker.bootstrap, ends) == {tp: [b"new"]}


# Old producer's requests after a newer epoch exists: Kafka answers PRODUCER_FENCED from
# the versions that know it (KIP-588) and INVALID_PRODUCER_EPOCH to older ones.
@pytest.mark.kafka_ci
@pytest.mark.parametrize(("add_version", "end_version"), [(0, 1), (3, 3)])
def test_fenced_error_codes_on_the_wire(broker, add_version, end_version):
    topic = broker.topic("txn-fence-wire")
    tp = (topic, 0)
    tid = unique("tid-fence-wire")
    broker.wait_coordinator(tid)
    old_client, new_client = broker.raw(), broker.raw()
    try:
        old = RawTxn(old_client, tid)
        assert init_txn(old).error_code == 0
        assert old.add_partitions([tp], version=add_version) == {tp: 0}
        assert old.produce(tp, old.batch(tp, [b"zombie"]))[0] == 0
        new = RawTxn(new_client, tid)
        assert init_txn(new).error_code == 0
        assert (new.producer_id, new.epoch) in {(old.producer_id, old.epoch + 1),
                                                (old.producer_id, old.epoch + 2)}
        codes = {
            "produce": old.produce(tp, old.batch(tp, [b"late"]))[0],
            "add_partitions": old.add_partitions([tp], version=add_version)[tp],
            "end_txn": old.end(commit=True, version=end_version),
        }
        if end_version >= 2:
            assert codes == {"produce": 47, "add_partitions": 90, "end_txn": 90}
        else:
            assert codes == {"produce": 47, "add_partitions": 47, "end_txn": 47}
    finally:
        old_client.close()
        new_client.close()
