"""Partition-level transaction state: last stable offset, markers, aborted index."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from txbroker.protocol.errors import KafkaError
from txbroker.protocol.records import Record, build_batch, decode_records, read_header
from txbroker.storage.log import PartitionLog
from txbroker.storage.log_config import LogConfig
from txbroker.storage.txn_index import read_txnindex, txnindex_path


def _open(path, **cfg) -> PartitionLog:
    plog = PartitionLog("t", 0, str(path), LogConfig(**cfg))
    plog.open()
    return plog


def _append(plog, pid=-1, epoch=-1, seq=-1, txn=False, n=1, value=b"v"):
    batch = bytearray(build_batch([Record(b"k", value) for _ in range(n)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, transactional=txn))
    result = plog.append(batch, read_header(batch))
    plog.mark_flushed(plog.log_end_offset)  # stand in for the flusher
    return result


def test_open_transaction_holds_back_the_lso_until_its_marker(tmp_path):
    plog = _open(tmp_path)
    _append(plog)  # offset 0, plain
    first = _append(plog, pid=7, epoch=0, seq=0, txn=True).base_offset  # 1
    _append(plog)  # 2, plain, after the open transaction
    _append(plog, pid=7, epoch=0, seq=1, txn=True)  # 3
    assert plog.high_watermark == 4
    assert plog.last_stable_offset == first == 1
    marker = plog.append_marker(7, 0, commit=True)
    plog.mark_flushed(plog.log_end_offset)
    assert marker.base_offset == 4
    assert plog.last_stable_offset == plog.high_watermark == 5
    assert plog.aborted_transactions(0, 5) == []


def test_abort_is_indexed_and_survives_restart(tmp_path):
    plog = _open(tmp_path)
    _append(plog, pid=3, epoch=0, seq=0, txn=True, n=2)  # 0-1
    _append(plog)  # 2
    plog.append_marker(3, 0, commit=False)  # 3
    plog.mark_flushed(plog.log_end_offset)
    [entry] = plog.aborted_transactions(0, 4)
    assert (entry.producer_id, entry.first_offset, entry.last_offset) == (3, 0, 3)
    assert plog.aborted_transactions(4, 10) == []
    assert plog.aborted_transactions(2, 3) == [entry]  # overlaps the fetched range
    plog.close()  # snapshot + durable .txnindex
    assert read_txnindex(txnindex_path(str(tmp_path), 0))[0].producer_id == 3
    again = _open(tmp_path)
    assert [(e.producer_id, e.first_offset) for e in again.aborted_transactions(0, 4)] == [(3, 0)]


def test_aborted_index_rebuilt_by_replay_after_crash(tmp_path):
    plog = _open(tmp_path)
    _append(plog, pid=5, epoch=0, seq=0, txn=True)
    plog.append_marker(5, 0, commit=False)
    _append(plog, pid=6, epoch=0, seq=0, txn=True)  # left open
    # Crash: no snapshot, no clean marker, the .txnindex file lost.
    for seg in plog.segments:
        os.fsync(seg.fd)
    path = txnindex_path(str(tmp_path), 0)
    if os.path.exists(path):
        os.unlink(path)
    again = _open(tmp_path)
    assert [(e.producer_id, e.first_offset) for e in again.aborted_transactions(0, 10)] == [(5, 0)]
    assert again.ongoing_txns == {6: 2}
    assert again.last_stable_offset == 2


def test_stale_marker_and_non_transactional_write_are_refused(tmp_path):
    plog = _open(tmp_path)
    _append(plog, pid=9, epoch=2, seq=0, txn=True)
    with pytest.raises(KafkaError) as e:
        _append(plog, pid=9, epoch=2, seq=1, txn=False)
    assert e.value.code.name == "invalid_txn_state"
    with pytest.raises(KafkaError) as e:
        plog.append_marker(9, 1, commit=True)
    assert e.value.code.name == "invalid_producer_epoch"
    # A bumped-epoch abort (coordinator timeout) is accepted and fences the old epoch.
    plog.append_marker(9, 3, commit=False)
    with pytest.raises(KafkaError):
        _append(plog, pid=9, epoch=2, seq=1, txn=True)


def test_markers_are_control_batches(tmp_path):
    plog = _open(tmp_path)
    _append(plog, pid=1, epoch=0, seq=0, txn=True)
    plog.append_marker(1, 0, commit=True, coordinator_epoch=4)
    plog.mark_flushed(plog.log_end_offset)
    data = plog.read(1, 1 << 20).data
    header = read_header(data)
    assert header.is_control and header.is_transactional and header.producer_id == 1
    [rec] = decode_records(data)
    assert rec.key[2:4] == b"\x00\x01"  # COMMIT


def test_retention_drops_aborted_entries_below_log_start(tmp_path):
    plog = _open(tmp_path, segment_bytes=200, retention_bytes=0)
    _append(plog, pid=2, epoch=0, seq=0, txn=True, value=b"x" * 100)
    plog.append_marker(2, 0, commit=False)
    for _ in range(3):
        _append(plog, value=b"y" * 100)
    assert plog.aborted_transactions(0, 100)
    plog.delete_old_segments(now=0)
    assert plog.log_start_offset > 1
    assert plog.aborted_transactions(0, 100) == []


def test_compaction_removes_aborted_records_and_keeps_committed_values(tmp_path):
    from txbroker.storage.cleaner import LogCleaner

    plog = _open(tmp_path, segment_bytes=300, cleanup_policy="compact",
                 min_cleanable_dirty_ratio=0.0)

    def keyed(pid, seq, txn, key, value):
        batch = bytearray(build_batch([Record(key, value)], producer_id=pid, producer_epoch=0,
                                      base_sequence=seq, transactional=txn))
        plog.append(batch, read_header(batch))
        plog.mark_flushed(plog.log_end_offset)

    keyed(1, 0, True, b"k", b"committed")
    plog.append_marker(1, 0, commit=True)
    keyed(1, 1, True, b"k", b"aborted")  # later in the log, but aborted
    plog.append_marker(1, 0, commit=False)
    for i in range(6):  # push the transactions out of the active segment
        keyed(-1, -1, False, b"other%d" % i, b"x" * 50)
    plog.mark_flushed(plog.log_end_offset)
    LogCleaner(str(tmp_path / "cleaner-offset-checkpoint")).clean_log(plog, now=10**13)
    values = {}
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        result = plog.read(offset, 1 << 20)
        if not result.data:
            break
        pos = 0
        while pos < len(result.data):
            header = read_header(result.data, pos)
            if not header.is_control:
                for rec in decode_records(result.data, pos):
                    values.setdefault(rec.key, []).append(rec.value)
            pos += header.size
        offset = result.next_offset
    assert values[b"k"] == [b"committed"]


def _coordinator_epoch(plog, pid):
    return plog.producer_state.producers[pid].coordinator_epoch


def test_marker_coordinator_epoch_is_recorded_and_an_older_one_refused(tmp_path):
    """Kafka's ProducerAppendInfo.appendEndTxnMarker: a marker whose coordinator epoch is
    older than the producer's last one here is TRANSACTION_COORDINATOR_FENCED (a zombie
    coordinator); otherwise its epoch is recorded."""
    plog = _open(tmp_path)
    _append(plog, pid=4, epoch=0, seq=0, txn=True)
    assert _coordinator_epoch(plog, 4) == -1  # no marker yet
    plog.append_marker(4, 0, commit=True, coordinator_epoch=3)
    assert _coordinator_epoch(plog, 4) == 3
    _append(plog, pid=4, epoch=0, seq=1, txn=True)  # offset 2, the next transaction
    end = plog.log_end_offset
    with pytest.raises(KafkaError) as e:
        plog.append_marker(4, 0, commit=False, coordinator_epoch=2)
    assert e.value.code.name == "transaction_coordinator_fenced"
    assert plog.log_end_offset == end and plog.ongoing_txns == {4: 2}
    assert _coordinator_epoch(plog, 4) == 3
    plog.append_marker(4, 0, commit=True, coordinator_epoch=3)  # the same coordinator: fine
    plog.append_marker(4, 0, commit=True, coordinator_epoch=5)  # a newer one: recorded
    assert _coordinator_epoch(plog, 4) == 5 and plog.ongoing_txns == {}
    # A producer epoch bump keeps it (the coordinator, not the producer, is fenced).
    plog.append_marker(4, 1, commit=False, coordinator_epoch=5)
    with pytest.raises(KafkaError) as e:
        plog.append_marker(4, 1, commit=False, coordinator_epoch=4)
    assert e.value.code.name == "transaction_coordinator_fenced"
    # A producer this partition has not seen: any epoch, recorded.
    plog.append_marker(8, 0, commit=False, coordinator_epoch=0)
    assert _coordinator_epoch(plog, 8) == 0


@pytest.mark.parametrize("clean", [True, False], ids=["snapshot", "replay"])
def test_marker_coordinator_epoch_survives_restart(tmp_path, clean):
    plog = _open(tmp_path)
    _append(plog, pid=4, epoch=0, seq=0, txn=True)
    plog.append_marker(4, 0, commit=True, coordinator_epoch=6)
    _append(plog, pid=5, epoch=0, seq=0, txn=True)  # open: replayed after the snapshot
    if clean:
        plog.close()
    else:
        for seg in plog.segments:  # crash: the data is on disk, no snapshot
            os.fsync(seg.fd)
    again = _open(tmp_path)
    assert _coordinator_epoch(again, 4) == 6
    assert _coordinator_epoch(again, 5) == -1
    again.append_marker(5, 0, commit=True, coordinator_epoch=0)  # fine: none recorded
    with pytest.raises(KafkaError) as e:
        again.append_marker(4, 0, commit=False, coordinator_epoch=5)
    assert e.value.code.name == "transaction_coordinator_fenced"


def test_producer_snapshot_of_an_earlier_release_still_loads(tmp_path):
    """Snapshots have carried a coordinator epoch field since version 1, always -1
    before markers recorded it: such a snapshot loads, the epoch unknown (-1) until the
    producer's next marker."""
    import msgpack
    from txbroker.storage.producer_state import ProducerStateManager

    old = msgpack.packb({"version": 1, "offset": 3, "producers": [
        [4, 0, -1, -1, 1_700_000_000_000, [[0, 0, 0, 0, 1_700_000_000_000]]]]})
    state, offset = ProducerStateManager.decode(old, "t-0")
    assert offset == 3
    entry = state.producers[4]
    assert (entry.epoch, entry.coordinator_epoch, entry.last_seq) == (0, -1, 0)
    again, _ = ProducerStateManager.decode(state.encode(3), "t-0")
    assert again.producers[4].coordinator_epoch == -1


# --- producer.id.expiration.ms --------------------------------------------------------------


def _append_at(plog, ts, pid, seq, txn=False):
    batch = bytearray(build_batch([Record(b"k", b"v", timestamp=ts)], producer_id=pid,
                                  producer_epoch=0, base_sequence=seq, transactional=txn))
    return plog.append(batch, read_header(batch), now=ts)


def test_idle_producer_expires_after_producer_id_expiration_ms(tmp_path):
    """Kafka's isProducerExpired: no open transaction here and the last batch's timestamp
    at least producer.id.expiration.ms old (>=). An expired producer's retry is no longer
    recognised as a duplicate."""
    plog = _open(tmp_path)
    state = plog.producer_state
    t0, exp = 1_700_000_000_000, 60_000
    _append_at(plog, t0, pid=3, seq=0)
    _append_at(plog, t0 + 10, pid=3, seq=1)
    assert state.expire(t0 + 10 + exp - 1, exp) == 0  # one ms too young: kept
    assert 3 in state.producers
    assert state.expire(t0 + 10 + exp, exp) == 1  # exactly the expiration: gone
    assert 3 not in state.producers
    # Its state starts afresh: a retry of an old batch is appended as new.
    assert not _append_at(plog, t0 + 20, pid=3, seq=1).duplicate


def test_last_timestamp_is_the_latest_batchs_even_if_older(tmp_path):
    """As Kafka's producer state: the last batch's timestamp, not the largest seen (a
    producer whose clock went back is judged by its latest write)."""
    plog = _open(tmp_path)
    t0 = 1_700_000_000_000
    _append_at(plog, t0, pid=4, seq=0)
    _append_at(plog, t0 - 5000, pid=4, seq=1)
    assert plog.producer_state.producers[4].last_timestamp == t0 - 5000


def test_producer_with_an_open_transaction_never_expires(tmp_path):
    plog = _open(tmp_path)
    state = plog.producer_state
    t0, exp = 1_700_000_000_000, 60_000
    _append_at(plog, t0, pid=5, seq=0, txn=True)
    _append_at(plog, t0, pid=6, seq=0)  # idle idempotent producer beside it
    assert state.expire(t0 + 100 * exp, exp) == 1
    assert set(state.producers) == {5} and plog.ongoing_txns == {5: 0}
    plog.append_marker(5, 0, commit=True)  # the transaction ends (stamped now)
    last = state.producers[5].last_timestamp
    assert state.expire(last + exp - 1, exp) == 0
    assert state.expire(last + exp, exp) == 1 and state.producers == {}


def test_log_manager_retention_check_expires_producers(tmp_path):
    from txbroker.storage.manager import LogManager

    async def run():
        logs = LogManager(str(tmp_path / "data"), producer_id_expiration_ms=1000)
        logs.open()
        await logs.start()
        try:
            logs.create_topic("t", 1, {})
            plog = logs.get_log("t", 0)
            now = int(time.time() * 1000)
            _append_at(plog, now - 5000, pid=7, seq=0)  # idle for 5 s
            _append_at(plog, now, pid=8, seq=0)
            logs.run_retention()
            assert set(plog.producer_state.producers) == {8}
        finally:
            await logs.close()

    asyncio.run(run())
