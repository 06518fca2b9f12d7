"""Log compaction (storage/cleaner.py): what survives a cleaning, tombstones and their
delete horizon, producer state, transaction markers and the aborted-transaction index,
crash recovery of the swap, and the background loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from txbroker.protocol.records import (
    ATTR_DELETE_HORIZON,
    Compression,
    ControlType,
    Record,
    build_batch,
    control_type_of,
    decode_records,
    iter_batches,
    read_header,
    validate_batch,
)
from txbroker.storage import cleaner as cleaner_module
from txbroker.storage.cleaner import CLEANER_CHECKPOINT_FILE, LogCleaner
from txbroker.storage.log import PartitionLog, now_ms
from txbroker.storage.log_config import LogConfig
from txbroker.storage.manager import LogManager
from txbroker.storage.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    list_snapshots,
)
from txbroker.storage.txn_index import read_txnindex, txnindex_path

T0 = 1_700_000_000_000
DAY = 86_400_000
# High watermark follows the log end (no flusher in these tests).
COMPACT = LogConfig(cleanup_policy="compact", flush_messages=10**9, delete_retention_ms=DAY)
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


def open_log(directory: str, config: LogConfig = COMPACT, **kwargs) -> PartitionLog:
    plog = PartitionLog("t", 0, directory, config)
    plog.open(**kwargs)
    return plog


def reopen(plog: PartitionLog, **kwargs) -> PartitionLog:
    plog.close()
    return open_log(plog.directory, plog.config, **kwargs)


def append(plog: PartitionLog, entries, *, codec=Compression.NONE, ts: int = T0,
           pid: int = -1, epoch: int = -1, seq: int = -1):
    records = [Record(k, v, timestamp=ts + i) for i, (k, v) in enumerate(entries)]
    data = bytearray(build_batch(records, compression=codec, producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq))
    return plog.append(data, read_header(data), now=ts)


def batches(plog: PartitionLog, start: int | None = None):
    """(header, records) of every batch from ``start`` to the log end, through PartitionLog.read."""
    offset = plog.log_start_offset if start is None else start
    out = []
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20, max_offset=plog.log_end_offset, min_one=True)
        if not result.data:
            break
        for pos, header in iter_batches(result.data):
            validate_batch(result.data, pos)  # CRC and lengths of every rewritten batch
            out.append((header, decode_records(result.data, pos)))
        offset = result.next_offset
    return out


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _h, recs in batches(plog) for r in recs]


def cleaned_files(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]


def expected_after_clean(written, end: int, *, drop_tombstones: bool = False):
    """Latest record per key below ``end`` (optionally without tombstones), all from ``end``."""
    last = {}
    for offset, key, _value in written:
        if offset < end:
            last[key] = offset
    return [(o, k, v) for o, k, v in written
            if o >= end or (last[k] == o and not (drop_tombstones and v is None))]


def check_reads_at_every_offset(plog: PartitionLog) -> None:
    """A read at any offset returns the first kept batch whose last offset is >= it
    (offsets removed by compaction land on the next kept batch)."""
    kept = [h for h, _r in batches(plog)]
    for offset in range(plog.log_start_offset, plog.log_end_offset):
        result = plog.read(offset, 1, max_offset=plog.log_end_offset, min_one=True)
        want = next(h for h in kept if h.last_offset >= offset)
        assert result.first_offset == want.base_offset, offset
        assert read_header(result.data).last_offset == want.last_offset


# --- the property ---------------------------------------------------------------------

entry = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=12)))
batch_spec = st.tuples(st.lists(entry, min_size=1, max_size=6), st.sampled_from(list(Compression)),
                       st.booleans(), st.integers(0, 500))  # roll before, timestamp skew


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(batch_spec, min_size=1, max_size=24),
       segment_bytes=st.sampled_from([150, 400, 100_000]),
       index_interval=st.sampled_from([0, 90, 4096]))
def test_compaction_keeps_the_latest_value_per_key(specs, segment_bytes, index_interval):
    config = replace(COMPACT, segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        written = []
        for name in ("keep", "zero"):  # delete.retention.ms one day / zero
            cfg = config if name == "keep" else replace(config, delete_retention_ms=0)
            plog = open_log(os.path.join(tmp, name), cfg)
            written = []
            for entries, codec, roll, skew in specs:
                if roll and plog.active_segment.size:
                    plog.roll()
                result = append(plog, entries, codec=codec, ts=T0 + skew)
                written += [(result.base_offset + j, k, v) for j, (k, v) in enumerate(entries)]
            logs[name] = plog
        originals = {(h.base_offset, h.last_offset): h for h, _r in batches(logs["keep"])}

        plog = logs["keep"]
        end = plog.active_segment.base_offset
        active = plog.active_segment
        active_bytes = open(active.log_path, "rb").read()
        log_end = plog.log_end_offset
        now = T0 + 1000
        stats = LogCleaner().clean_log(plog, now)
        assert (stats is None) == (end == 0)
        want = expected_after_clean(written, end)
        assert records(plog) == want
        # The active segment is never touched; offsets and batch framing are the originals'.
        assert plog.active_segment is active and open(active.log_path, "rb").read() == active_bytes
        assert plog.log_end_offset == log_end
        for header, recs in batches(plog):
            original = originals[(header.base_offset, header.last_offset)]
            if header.records_count:
                assert header.compression == original.compression
            assert (header.producer_id, header.base_sequence) == \
                (original.producer_id, original.base_sequence)
            if any(r.value is None for r in recs) and header.base_offset < end:
                assert header.attributes & ATTR_DELETE_HORIZON
                assert header.base_timestamp == now + DAY
        assert cleaned_files(plog.directory) == []
        # Each cleaned segment ends exactly where the ones it replaced did.
        for seg, following in zip(plog.segments, plog.segments[1:], strict=False):
            assert seg.next_offset == following.base_offset
        # Cleaning again changes nothing; time past the horizon drops the tombstones.
        LogCleaner().clean_log(plog, now + 1)
        assert records(plog) == want
        check_reads_at_every_offset(plog)
        LogCleaner().clean_log(plog, now + DAY)
        want_no_tombstones = expected_after_clean(written, end, drop_tombstones=True)
        assert records(plog) == want_no_tombstones

        # Reopened (indexes loaded, not rebuilt), reads by offset still land right.
        plog = reopen(plog, clean=True, recovery_point=log_end)
        assert records(plog) == want_no_tombstones
        assert plog.log_end_offset == log_end
        check_reads_at_every_offset(plog)
        for seg in plog.segments[:-1]:
            loaded = (list(seg._index_rel), list(seg._index_pos))
            true_max = max((h.max_timestamp for _p, h in seg.batches()), default=-1)
            assert seg.max_timestamp == true_max
            seg.recover()
            assert (list(seg._index_rel), list(seg._index_pos)) == loaded
        plog.close()

        # delete.retention.ms=0: kept by the first cleaning (which sets the horizon),
        # gone once time has moved past it.
        plog = logs["zero"]
        LogCleaner().clean_log(plog, now)
        assert records(plog) == want
        LogCleaner().clean_log(plog, now + 1)
        assert records(plog) == want_no_tombstones
        plog.close()


# --- producer state ----------------------------------------------------------------------


def test_idempotent_producer_state_survives_compaction_and_reopen(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    p1, p2 = 1000, 2000
    append(plog, [(b"a", b"1"), (b"b", b"1")], pid=p1, epoch=0, seq=0)
    append(plog, [(b"a", b"2")], pid=p2, epoch=3, seq=0)
    append(plog, [(b"c", b"1"), (b"d", b"1")], pid=p1, epoch=0, seq=2)  # p1's last batch
    append(plog, [(b"e", b"1")], pid=p2, epoch=3, seq=1)  # p2's last batch
    plog.roll()
    # Overwrite everything p1 wrote and a, so p1's batches lose every record.
    append(plog, [(b"a", b"3"), (b"b", b"3"), (b"c", b"3"), (b"d", b"3")])
    plog.roll()
    append(plog, [(b"z", b"active")])
    before = {pid: (e.epoch, e.last_seq, e.batches[-1]) for pid, e in plog.producer_state.producers.items()}

    LogCleaner().clean_log(plog, T0 + 1000)
    by_base = {h.base_offset: (h, recs) for h, recs in batches(plog)}
    assert 0 not in by_base  # p1's first batch: emptied and not its last, dropped
    last_p1, recs = by_base[3]  # kept empty: the producer's last sequence lives in it
    assert (last_p1.records_count, recs, last_p1.last_offset) == (0, [], 4)
    assert (last_p1.producer_id, last_p1.producer_epoch, last_p1.base_sequence) == (p1, 0, 2)
    assert 2 not in by_base  # p2's first batch: a was overwritten, and it is not p2's last
    assert [r.key for r in by_base[5][1]] == [b"e"]

    # Rebuilt from the log alone (no snapshot), the producer state is the same.
    plog.close()
    for offset in list_snapshots(plog.directory):
        os.unlink(os.path.join(plog.directory, f"{offset:020d}.snapshot"))
    plog = open_log(plog.directory, plog.config)
    after = {pid: (e.epoch, e.last_seq, e.batches[-1]) for pid, e in plog.producer_state.producers.items()}
    assert after == before
    # A retry of p1's last batch is still a duplicate with its original offsets; the next
    # sequence is accepted and a gap is not.
    retry = bytearray(build_batch([Record(b"c", b"1"), Record(b"d", b"1")], producer_id=p1,
                                  producer_epoch=0, base_sequence=2))
    dup = plog.append(retry, read_header(retry))
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (3, 4)
    nxt = bytearray(build_batch([Record(b"f", b"1")], producer_id=p1, producer_epoch=0,
                                base_sequence=4))
    assert not plog.append(nxt, read_header(nxt)).duplicate
    gap = bytearray(build_batch([Record(b"f", b"2")], producer_id=p1, producer_epoch=0,
                                base_sequence=9))
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(gap, read_header(gap))
    plog.close()


def test_log_end_offset_survives_when_the_tail_is_compacted_away(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, delete_retention_ms=0))
    append(plog, [(b"a", b"1")])
    append(plog, [(b"a", None)])
    plog.roll()  # the active segment is empty
    cleaner = LogCleaner()
    cleaner.clean_log(plog, T0 + 1000)
    cleaner.clean_log(plog, T0 + 1001)  # past the tombstone's horizon
    assert records(plog) == []
    # The last batch of the cleaned range stays, empty, so the log end survives a reopen.
    assert [(h.base_offset, h.records_count) for h, _r in batches(plog)] == [(1, 0)]
    plog = reopen(plog)
    assert plog.log_end_offset == 2
    assert append(plog, [(b"b", b"1")]).base_offset == 2
    plog.close()


def test_cleaned_segment_keeps_its_max_timestamp_after_reopen(tmp_path):
    # The newest record sits in a batch no sparse index entry points at: the cleaned
    # segment's last time index entry still records it (retention relies on it).
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, index_interval_bytes=4096))
    for i, skew in enumerate([5, 100, 7, 8]):
        append(plog, [(b"k%d" % i, b"v")], ts=T0 + skew)
    plog.roll()
    append(plog, [(b"z", b"v")])
    LogCleaner().clean_log(plog, T0 + 1000)
    plog = reopen(plog, clean=True, recovery_point=plog.log_end_offset)
    assert plog.segments[0].max_timestamp == T0 + 100
    assert plog.offset_for_timestamp(T0 + 50) == (1, T0 + 100)
    plog.close()


# --- crash in the middle of a swap ------------------------------------------------------


def _build(directory: str) -> PartitionLog:
    plog = open_log(directory, replace(COMPACT, segment_bytes=100_000, index_interval_bytes=50))
    for i in range(30):
        if i % 6 == 5:
            plog.roll()
        append(plog, [(KEYS[i % 4], b"v%d" % i), (KEYS[(i + 1) % 5], None if i % 7 == 0 else b"w")],
               codec=Compression(i % 5), ts=T0 + i)
    return plog


def _snapshot_dir(src: str, dst: str) -> None:
    shutil.copytree(src, dst)


@pytest.mark.parametrize("state", ["cleaned-partial", "swap-before-delete", "swap-first-deleted",
                                   "swap-all-deleted", "swap-indexes-renamed"])
def test_crash_during_swap_recovers_a_consistent_log(tmp_path, state):
    pre_dir, post_dir, crash_dir = (str(tmp_path / n / "t-0") for n in ("pre", "post", "crash"))
    plog = _build(pre_dir)
    pre_records = records(plog)
    old_bases = [s.base_offset for s in plog.segments[:-1]]
    plog.close()
    _snapshot_dir(pre_dir, post_dir)
    plog = open_log(post_dir, plog.config)
    assert LogCleaner().clean_log(plog, T0 + 1000).segments_after == 1  # one group
    post_records = records(plog)
    assert post_records != pre_records
    plog.close()

    _snapshot_dir(pre_dir, crash_dir)
    snapshots = list_snapshots(crash_dir)
    prefix = os.path.join(crash_dir, "00000000000000000000")
    cleaned = os.path.join(post_dir, "00000000000000000000")
    if state == "cleaned-partial":
        with open(cleaned + ".log", "rb") as f:
            partial = f.read()[:100]
        with open(prefix + ".log.cleaned", "wb") as f:
            f.write(partial)
        shutil.copy(cleaned + ".index", prefix + ".index.cleaned")
        expected = pre_records
    else:
        expected = post_records
        shutil.copy(cleaned + ".log", prefix + ".log.swap")
        for ext in (".index", ".timeindex"):
            shutil.copy(cleaned + ext, prefix + ext + ".swap")
        doomed = {"swap-before-delete": [], "swap-first-deleted": old_bases[:1]}.get(state, old_bases)
        for base in doomed:
            for ext in (".log", ".index", ".timeindex"):
                os.unlink(os.path.join(crash_dir, f"{base:020d}{ext}"))
        if state == "swap-indexes-renamed":
            for ext in (".index", ".timeindex"):
                os.replace(prefix + ext + ".swap", prefix + ext)
    plog = open_log(crash_dir, plog.config)  # unclean: no recovery point, no marker
    assert records(plog) == expected
    assert cleaned_files(crash_dir) == []
    assert list_snapshots(crash_dir) == snapshots  # same-looking names, not segments
    check_reads_at_every_offset(plog)
    plog.close()


# --- concurrency with appends, reads and retention ------------------------------------------


def test_cleaning_runs_in_a_thread_and_gives_up_if_retention_took_a_segment(tmp_path, monkeypatch):
    config = replace(COMPACT, cleanup_policy="compact,delete", segment_bytes=100_000,
                     retention_ms=DAY)
    plog = _build(str(tmp_path / "t-0"))
    plog.config = config
    before = records(plog)
    in_thread = threading.Event()
    release = threading.Event()
    threads = []
    real_write = cleaner_module.write_group

    def slow_write(*args):
        threads.append(threading.current_thread().name)
        in_thread.set()
        assert release.wait(10)
        return real_write(*args)

    monkeypatch.setattr(cleaner_module, "write_group", slow_write)

    async def scenario():
        cleaner = LogCleaner()
        task = asyncio.create_task(cleaner.compact_now(plog, T0 + 1000))
        while not in_thread.is_set():
            await asyncio.sleep(0.005)
        # The event loop is free: reads see the old segments, appends go to the active one.
        assert records(plog) == before
        # A new record: its segment (the active one) is not past retention.ms.
        append(plog, [(b"x", b"during")], ts=T0 + 6 * 3600_000 + DAY)
        # compact,delete: retention still applies, and takes the oldest segment.
        assert plog.delete_old_segments(now=T0 + 6 * 3600_000 + DAY) > 0
        release.set()
        stats = await task
        await cleaner.stop()
        return stats

    stats = asyncio.run(scenario())
    assert threads and all(name.startswith("txbroker-cleaner") for name in threads)
    assert not stats.completed
    assert cleaned_files(plog.directory) == []
    assert records(plog)[-1][1:] == (b"x", b"during")
    assert records(plog) == [r for r in before if r[0] >= plog.log_start_offset] + \
        [(plog.log_end_offset - 1, b"x", b"during")]
    plog.close()


# --- choosing logs, checkpoints, the background loop ---------------------------------------


def test_dirty_ratio_lag_and_policy_decide_what_is_cleaned(tmp_path):
    plog = _build(str(tmp_path / "t-0"))
    other = open_log(str(tmp_path / "u-0"), replace(COMPACT, cleanup_policy="delete"))
    for i in range(3):
        append(other, [(b"k", b"%d" % i)])
        other.roll()
    cleaner = LogCleaner()
    now = T0 + 1000
    c = cleaner.cleanable(plog, now)
    assert c.first_dirty == 0 and c.clean_bytes == 0 and c.ratio == 1.0
    assert cleaner.cleanable(other, now) is None  # not compacted
    assert cleaner.filthiest([plog, other], now).plog is plog
    # min.compaction.lag.ms holds back segments with young records.
    plog.config = replace(plog.config, min_compaction_lag_ms=DAY)
    assert cleaner.cleanable(plog, now) is None
    plog.config = replace(plog.config, min_compaction_lag_ms=0)
    cleaner.clean_log(plog, now)
    c = cleaner.cleanable(plog, now)
    assert c.first_dirty == plog.active_segment.base_offset and c.dirty_bytes == 0
    assert cleaner.filthiest([plog], now) is None  # nothing dirty, horizons in the future
    # Once the tombstones' delete horizon passes, the log is cleaned again.
    assert cleaner.filthiest([plog], now + DAY).plog is plog
    # New dirty data below min.cleanable.dirty.ratio waits, unless max.compaction.lag.ms.
    plog.config = replace(plog.config, min_cleanable_dirty_ratio=0.99)
    append(plog, [(b"a", b"new")], ts=now)
    plog.roll()
    append(plog, [(b"b", b"new")], ts=now)
    assert cleaner.filthiest([plog], now) is None
    plog.config = replace(plog.config, max_compaction_lag_ms=10)
    assert cleaner.filthiest([plog], now + 100).plog is plog
    plog.close()
    other.close()


def test_log_manager_cleans_in_background_and_persists_the_checkpoint(tmp_path):
    data = str(tmp_path / "data")

    async def first():
        logs = LogManager(data, {"flush.messages": "1000000"}, cleaner_backoff_ms=20)
        logs.open()
        logs.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        await logs.start()
        plog = logs.get_log("c", 0)
        for i in range(20):
            append(plog, [(b"k%d" % (i % 3), b"%d" % i)])
            if i % 5 == 4:
                plog.roll()
        for _ in range(500):
            if logs.cleaner.cleanings:
                break
            await asyncio.sleep(0.01)
        assert logs.cleaner.cleanings
        end = logs.cleaner.checkpoint(plog)
        got = records(plog)
        await logs.close()
        return end, got

    end, got = asyncio.run(first())
    assert end == 20  # every closed segment; the active one starts at 20
    assert [(o, k) for o, k, _v in got] == [(17, b"k2"), (18, b"k0"), (19, b"k1")]
    with open(os.path.join(data, CLEANER_CHECKPOINT_FILE)) as f:
        assert f.read() == "0\n1\nc 0 20\n"

    async def second():
        logs = LogManager(data, cleaner_backoff_ms=10_000)
        logs.open()
        await logs.start()
        await asyncio.sleep(0)  # the cleaner task adopts the open logs' checkpoints
        checkpoint = logs.cleaner.checkpoint(logs.get_log("c", 0))
        await logs.close()
        return checkpoint

    assert asyncio.run(second()) == 20


# --- transactions: markers and the aborted-transaction index --------------------------------


def txn_append(plog: PartitionLog, pid: int, entries, *, epoch: int = 0, seq: int = 0,
               ts: int = T0):
    records = [Record(k, v, timestamp=ts + i) for i, (k, v) in enumerate(entries)]
    data = bytearray(build_batch(records, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, transactional=True))
    return plog.append(data, read_header(data), now=ts)


def read_committed(plog: PartitionLog, max_bytes: int = 1 << 20):
    """(offset, key, value) below the LSO as a read_committed consumer gets them: each
    fetch is answered as the Fetch handler does (whole batches up to the LSO and the
    aborted transactions of the range) and filtered the way Kafka's consumer filters
    it: a producer's transactional batches are skipped from the first offset of one
    of its aborted transactions until its ABORT marker."""
    out = []
    offset = plog.log_start_offset
    lso = plog.last_stable_offset
    while offset < lso:
        result = plog.read(offset, max_bytes, max_offset=lso, min_one=True)
        if not result.data:
            break
        pending = sorted((a.first_offset, a.producer_id)
                         for a in plog.aborted_transactions(offset, result.next_offset))
        skipping: set[int] = set()
        for pos, header in iter_batches(result.data):
            while pending and pending[0][0] <= header.last_offset:
                skipping.add(pending.pop(0)[1])
            recs = decode_records(result.data, pos)
            if header.is_control:
                if recs and control_type_of(recs[0]) == ControlType.ABORT:
                    skipping.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in skipping:
                continue
            out += [(r.offset, r.key, r.value) for r in recs if r.offset >= offset]
        offset = result.next_offset
    return out


def markers(plog: PartitionLog):
    """(offset, producer id, epoch, control type, delete horizon or None) of every marker."""
    return [(h.base_offset, h.producer_id, h.producer_epoch, control_type_of(recs[0]),
             h.base_timestamp if h.attributes & ATTR_DELETE_HORIZON else None)
            for h, recs in batches(plog) if h.is_control]


def txnindex_on_disk(plog: PartitionLog):
    return sorted(e for seg in plog.segments
                  for e in read_txnindex(txnindex_path(plog.directory, seg.base_offset)))


def check_aborted_index(plog: PartitionLog) -> None:
    """Every aborted-transaction entry has its ABORT marker in the log (an entry without
    it would make consumers skip the producer's later, committed data), and the
    .txnindex files hold exactly the in-memory entries."""
    aborts = {(o, pid) for o, pid, _e, ctype, _h in markers(plog) if ctype == ControlType.ABORT}
    for entry in plog.aborted.entries:
        assert (entry.last_offset, entry.producer_id) in aborts, entry
    assert txnindex_on_disk(plog) == plog.aborted.entries


def crash_reopen(plog: PartitionLog, *, drop_snapshots: bool = False) -> PartitionLog:
    """Stop as a crash would (no snapshot, no clean marker) and open the log again;
    optionally without any producer snapshot (state rebuilt from the whole log)."""
    for seg in plog.segments:
        seg.close()
    plog.closed = True
    if drop_snapshots:
        for offset in list_snapshots(plog.directory):
            os.unlink(os.path.join(plog.directory, f"{offset:020d}.snapshot"))
    return open_log(plog.directory, plog.config)


def producer_view(plog: PartitionLog):
    return {pid: (e.epoch, e.last_seq) for pid, e in plog.producer_state.producers.items()}


def test_commit_marker_goes_after_its_transaction_and_the_delete_horizon(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    txn_append(plog, 1, [(b"a", b"t1"), (b"b", b"t1")])  # 0-1
    plog.append_marker(1, 0, commit=True)  # 2: its records are overwritten below
    txn_append(plog, 1, [(b"c", b"t2")], seq=2)  # 3: producer 1's last batch
    plog.append_marker(1, 0, commit=True)  # 4
    append(plog, [(b"a", b"2"), (b"b", b"2")])  # 5-6
    plog.roll()
    append(plog, [(b"z", b"active")])
    want = [(3, b"c", b"t2"), (5, b"a", b"2"), (6, b"b", b"2"), (7, b"z", b"active")]
    cleaner = LogCleaner()
    now = T0 + 1000

    cleaner.clean_log(plog, now)
    assert read_committed(plog) == want
    # Nothing of the first transaction is left: its marker gets the delete horizon,
    # which brings the background loop back (nothing else is dirty).
    assert [(o, h) for o, _p, _e, _t, h in markers(plog)] == [(2, now + DAY), (4, None)]
    assert cleaner.filthiest([plog], now + DAY - 1) is None
    assert cleaner.filthiest([plog], now + DAY).plog is plog
    cleaner.clean_log(plog, now + DAY - 1)
    assert [o for o, *_ in markers(plog)] == [2, 4]
    cleaner.clean_log(plog, now + DAY)  # the horizon has passed
    assert [(o, h) for o, _p, _e, _t, h in markers(plog)] == [(4, None)]
    assert cleaner.filthiest([plog], now + 10 * DAY) is None
    assert read_committed(plog) == want
    check_reads_at_every_offset(plog)

    before = producer_view(plog)
    for drop_snapshots in (False, True):
        plog = crash_reopen(plog, drop_snapshots=drop_snapshots)
        assert plog.ongoing_txns == {}
        assert plog.last_stable_offset == plog.high_watermark == 8
        assert producer_view(plog) == before
        assert read_committed(plog) == want
    plog.close()


def test_abort_marker_and_its_index_entry_go_once_the_aborted_data_is_gone(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    append(plog, [(b"a", b"committed")])  # 0
    txn_append(plog, 2, [(b"a", b"aborted")])  # 1
    plog.append_marker(2, 0, commit=False)  # 2
    txn_append(plog, 2, [(b"b", b"t2")], seq=1)  # 3: producer 2's last batch
    plog.append_marker(2, 0, commit=True)  # 4
    txn_append(plog, 3, [(b"c", b"aborted")])  # 5: producer 3's last batch, aborted
    plog.append_marker(3, 0, commit=False)  # 6
    plog.roll()
    append(plog, [(b"z", b"active")])
    want = [(0, b"a", b"committed"), (3, b"b", b"t2"), (7, b"z", b"active")]
    assert read_committed(plog) == want
    assert [(e.producer_id, e.last_offset) for e in plog.aborted.entries] == [(2, 2), (3, 6)]
    now = T0 + 1000

    LogCleaner().clean_log(plog, now)
    # Producer 2's aborted batch is dropped, so its ABORT marker gets the horizon and its
    # entry goes, from memory and from the cleaned segment's .txnindex. Producer 3's
    # batch stays (empty: its sequence) and with it the marker and the entry.
    assert [(h.base_offset, h.records_count) for h, _r in batches(plog)
            if not h.is_control] == [(0, 1), (3, 1), (5, 0), (7, 1)]
    assert [(o, h) for o, _p, _e, _t, h in markers(plog)] == [(2, now + DAY), (4, None),
                                                              (6, None)]
    assert [(e.producer_id, e.last_offset) for e in plog.aborted.entries] == [(3, 6)]
    check_aborted_index(plog)
    assert read_committed(plog) == read_committed(plog, max_bytes=1) == want

    LogCleaner().clean_log(plog, now + DAY)
    assert [o for o, *_ in markers(plog)] == [4, 6]
    check_aborted_index(plog)
    assert read_committed(plog) == read_committed(plog, max_bytes=1) == want
    for drop_snapshots in (False, True):
        plog = crash_reopen(plog, drop_snapshots=drop_snapshots)
        assert plog.ongoing_txns == {} and plog.last_stable_offset == 8
        assert [(e.producer_id, e.last_offset) for e in plog.aborted.entries] == [(3, 6)]
        check_aborted_index(plog)
        assert read_committed(plog) == want
    plog.close()


def test_marker_stays_while_its_transaction_keeps_an_empty_batch(tmp_path):
    # The producer's last batch is kept, emptied, for its sequence: it is data of the
    # transaction, so the marker must stay, or a replay of the log would see that
    # transaction open forever (and hold the last stable offset at it).
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    txn_append(plog, 4, [(b"a", b"t")])  # 0: producer 4's only batch
    plog.append_marker(4, 0, commit=True)  # 1
    append(plog, [(b"a", b"plain")])  # 2
    plog.roll()
    append(plog, [(b"z", b"active")])
    for now in (T0, T0 + DAY, T0 + 2 * DAY):
        LogCleaner().clean_log(plog, now)
    assert [(h.base_offset, h.records_count) for h, _r in batches(plog)][:2] == [(0, 0), (1, 1)]
    assert [(o, h) for o, _p, _e, _t, h in markers(plog)] == [(1, None)]
    plog = crash_reopen(plog, drop_snapshots=True)
    assert plog.ongoing_txns == {}
    assert plog.last_stable_offset == plog.high_watermark == 4
    assert producer_view(plog) == {4: (0, 0)}
    plog.close()


def test_marker_ending_a_cleaned_segment_stays_past_its_horizon(tmp_path):
    # The last batch of a cleaned segment keeps the log end offset (and exact .swap
    # recovery): a marker there stays whole, whatever its horizon.
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    txn_append(plog, 9, [(b"a", b"t")])  # 0
    append(plog, [(b"a", b"plain")])  # 1
    plog.append_marker(9, 0, commit=True)  # 2
    assert plog.producer_state.expire(now_ms() + 10 * DAY, DAY) == 1
    plog.roll()  # the active segment stays empty
    cleaner = LogCleaner()
    for now in (T0, T0 + DAY):
        cleaner.clean_log(plog, now)
    assert [(h.base_offset, h.is_control) for h, _r in batches(plog)] == [(1, False), (2, True)]
    assert markers(plog)[0][4] == T0 + DAY  # its horizon has passed
    assert cleaner.filthiest([plog], T0 + 10 * DAY) is None  # and does not call for cleanings
    plog = crash_reopen(plog, drop_snapshots=True)
    assert plog.log_end_offset == 3 and plog.ongoing_txns == {}
    assert append(plog, [(b"b", b"1")]).base_offset == 3
    plog.close()


def test_marker_with_the_fencing_epoch_of_a_producer_without_data_stays(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    txn_append(plog, 5, [(b"a", b"t")])  # 0
    plog.append_marker(5, 0, commit=True)  # 1
    plog.append_marker(5, 1, commit=False)  # 2: a timeout abort that bumped the epoch
    append(plog, [(b"a", b"plain")])  # 3
    plog.roll()
    append(plog, [(b"z", b"active")])
    assert producer_view(plog) == {5: (1, -1)}  # tracked, epoch 1, no data batch
    for now in (T0, T0 + DAY):
        LogCleaner().clean_log(plog, now)
    # The commit marker of epoch 0 went with its data; the epoch-1 marker fences.
    assert [(o, e) for o, _p, e, _t, _h in markers(plog)] == [(2, 1)]
    plog = crash_reopen(plog, drop_snapshots=True)
    assert producer_view(plog) == {5: (1, -1)} and plog.ongoing_txns == {}
    with pytest.raises(InvalidProducerEpochError):
        txn_append(plog, 5, [(b"x", b"zombie")], epoch=0, seq=1)
    plog.close()


def test_a_stale_snapshot_cannot_reopen_a_transaction_whose_marker_was_removed(tmp_path):
    plog = open_log(str(tmp_path / "t-0"), replace(COMPACT, segment_bytes=100_000))
    txn_append(plog, 6, [(b"a", b"t")])  # 0
    plog.roll()  # snapshot at 1: producer 6's transaction is open
    plog.append_marker(6, 0, commit=True)  # 1
    append(plog, [(b"a", b"plain")])  # 2
    # producer.id.expiration.ms later (the marker has the wall clock's timestamp):
    assert plog.producer_state.expire(now_ms() + 10 * DAY, DAY) == 1
    plog.roll()  # snapshot at 3
    append(plog, [(b"z", b"active")])
    assert list_snapshots(plog.directory) == [1, 3]
    cleaner = LogCleaner()
    cleaner.clean_log(plog, T0)
    assert list_snapshots(plog.directory) == [1, 3]  # the marker only got its horizon
    cleaner.clean_log(plog, T0 + DAY)
    assert markers(plog) == []
    # The snapshot at 1 would have the transaction open, and the marker ending it is
    # gone: the cleaning deleted it before committing.
    assert list_snapshots(plog.directory) == [3]
    for seg in plog.segments:
        seg.close()
    plog.closed = True
    with open(os.path.join(plog.directory, f"{3:020d}.snapshot"), "wb") as f:
        f.write(b"unreadable")  # the restart falls back to replaying the log
    plog = open_log(plog.directory, plog.config)
    assert plog.ongoing_txns == {}
    assert plog.last_stable_offset == plog.high_watermark == 4
    assert read_committed(plog) == [(2, b"a", b"plain"), (3, b"z", b"active")]
    plog.close()


# The property: random transactional traffic, cleaned three times (horizons set, nothing
# due, horizons passed), read_committed is the compaction of what it was, and stays so
# across restarts (from a snapshot, and from the log alone).

txn_op = st.one_of(
    st.tuples(st.just("plain"), st.lists(entry, min_size=1, max_size=3)),
    st.tuples(st.just("txn"), st.sampled_from([1, 2, 3]), st.lists(entry, min_size=1, max_size=3)),
    st.tuples(st.just("commit"), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("abort"), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("bump"), st.sampled_from([1, 2, 3])),  # a timeout abort, epoch + 1
    st.tuples(st.just("roll"),),
)


def _run_txn_ops(plog: PartitionLog, ops, close_all: bool) -> None:
    epochs = {1: 0, 2: 0, 3: 0}
    seqs = {1: 0, 2: 0, 3: 0}
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "roll":
            if plog.active_segment.size:
                plog.roll()
        elif kind == "plain":
            append(plog, op[1], ts=T0 + i)
        elif kind == "txn":
            pid, entries = op[1], op[2]
            txn_append(plog, pid, entries, epoch=epochs[pid], seq=seqs[pid], ts=T0 + i)
            seqs[pid] += len(entries)
        elif kind == "bump":
            epochs[op[1]] += 1
            seqs[op[1]] = 0
            plog.append_marker(op[1], epochs[op[1]], commit=False)
        else:  # a marker, also for a partition the transaction wrote nothing to
            plog.append_marker(op[1], epochs[op[1]], commit=kind == "commit")
    if close_all:
        for pid in list(plog.ongoing_txns):
            plog.append_marker(pid, epochs[pid], commit=True)


def _check_markers_follow_the_rules(plog: PartitionLog, end: int, now: int) -> None:
    """Below ``end``: a marker without horizon ends a transaction with a batch left; one
    whose horizon has passed is the last batch of its segment or a fencing epoch."""
    last_of_segment = set()
    for seg in plog.segments:
        last = None
        for _pos, header in seg.batches():
            last = header.base_offset
        last_of_segment.add(last)
    txn_data: set[int] = set()
    for header, _recs in batches(plog):
        if header.base_offset >= end:
            break
        pid = header.producer_id
        if not header.is_control:
            if header.is_transactional:
                txn_data.add(pid)
            continue
        had = pid in txn_data
        txn_data.discard(pid)
        if not header.attributes & ATTR_DELETE_HORIZON:
            assert had, f"marker at {header.base_offset} without data has no horizon"
            continue
        assert not had, f"marker at {header.base_offset} has data and a horizon"
        if header.base_timestamp <= now:
            state = plog.producer_state.producers.get(pid)
            fencing = state is not None and not state.batches and \
                state.epoch == header.producer_epoch
            assert header.base_offset in last_of_segment or fencing, header


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(txn_op, min_size=1, max_size=40), close_all=st.booleans(),
       segment_bytes=st.sampled_from([200, 600, 100_000]))
# Producer 2's aborted batch (1) is in the cleaned segment [0, 3) and goes; its ABORT
# marker (3, a bump) is in the next segment, not cleanable (LSO 5), so the entry stays
# in memory and in 3.txnindex. Replayed from the log alone, the marker ends no open
# transaction: no entry (as in Kafka).
@example(ops=[("plain", [(b"a", None)]), ("txn", 2, [(b"a", None)]), ("plain", [(b"a", None)]),
              ("bump", 2), ("plain", [(b"a", None)]), ("txn", 1, [(b"a", None)])],
         close_all=False, segment_bytes=600)
def test_compaction_of_transactions_keeps_read_committed_results(ops, close_all, segment_bytes):
    config = replace(COMPACT, segment_bytes=segment_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        plog = open_log(os.path.join(tmp, "t-0"), config)
        _run_txn_ops(plog, ops, close_all)
        if plog.active_segment.size:
            plog.roll()  # so that everything below the LSO can be cleaned
        committed = read_committed(plog)
        assert read_committed(plog, max_bytes=1) == committed
        lso, ongoing = plog.last_stable_offset, dict(plog.ongoing_txns)
        tracked = producer_view(plog)
        markers_before = len(markers(plog))
        now = T0 + 1000
        cleaner = LogCleaner()
        stats = cleaner.clean_log(plog, now)
        end = stats.end_offset if stats is not None else 0
        want = expected_after_clean(committed, end)
        want_no_tombstones = expected_after_clean(committed, end, drop_tombstones=True)
        for at, expected in ((now, want), (now + 1, want), (now + DAY, want_no_tombstones)):
            if at != now:
                cleaner.clean_log(plog, at)
            assert read_committed(plog) == read_committed(plog, max_bytes=1) == expected
            assert (plog.last_stable_offset, plog.ongoing_txns) == (lso, ongoing)
            check_aborted_index(plog)
            _check_markers_follow_the_rules(plog, end, at)
            assert cleaned_files(plog.directory) == []
        entries = [(e.producer_id, e.last_offset) for e in plog.aborted.entries]
        # An entry whose aborted batches the cleaning removed but whose ABORT marker lies
        # past the cleaned range stays (in memory and in its segment's .txnindex, as in
        # Kafka) until its marker's segment is cleaned. It is harmless: no batch of its
        # producer is left in its range, and its marker is there. A replay of the whole
        # log cannot recreate it (the marker ends no open transaction there, Kafka's
        # appendEndTxnMarker likewise), so without a snapshot only the entries that
        # still cover data come back.
        txn_batches = [(h.producer_id, h.base_offset) for h, _r in batches(plog)
                       if h.is_transactional and not h.is_control]
        covering = [(e.producer_id, e.last_offset) for e in plog.aborted.entries
                    if any(pid == e.producer_id and e.first_offset <= o < e.last_offset
                           for pid, o in txn_batches)]
        event(f"markers removed: {min(markers_before - len(markers(plog)), 3)}+")
        event(f"an entry without data: {len(covering) < len(entries)}")

        # Restarts: from the snapshot written at close, then from the log alone.
        plog = reopen(plog, clean=True, recovery_point=plog.log_end_offset)
        assert read_committed(plog) == want_no_tombstones
        for drop_snapshots in (False, True):
            plog = crash_reopen(plog, drop_snapshots=drop_snapshots)
            assert (plog.last_stable_offset, plog.ongoing_txns) == (lso, ongoing)
            assert producer_view(plog) == tracked
            assert read_committed(plog) == want_no_tombstones
            check_aborted_index(plog)
            assert [(e.producer_id, e.last_offset) for e in plog.aborted.entries] == \
                (covering if drop_snapshots else entries)
        plog.close()


# --- a crash between the swap and the aborted-transaction index --------------------------


def _build_txn(directory: str) -> PartitionLog:
    """Two segments of transactions: one aborted transaction keeps its (emptied) batch,
    so its entry stays in the cleaned .txnindex, another loses its data, so its entry goes."""
    plog = open_log(directory, replace(COMPACT, segment_bytes=100_000))
    append(plog, [(b"a", b"committed")])  # 0
    txn_append(plog, 7, [(b"a", b"aborted")])  # 1: producer 7's last batch
    txn_append(plog, 8, [(b"b", b"aborted")])  # 2
    plog.append_marker(8, 0, commit=False)  # 3
    plog.roll()
    plog.append_marker(7, 0, commit=False)  # 4
    txn_append(plog, 8, [(b"c", b"t")], seq=1)  # 5
    plog.append_marker(8, 0, commit=True)  # 6
    plog.roll()
    append(plog, [(b"z", b"active")])  # 7
    return plog


def _aborted(plog: PartitionLog):
    return [(e.producer_id, e.first_offset, e.last_offset) for e in plog.aborted.entries]


def test_crash_right_after_the_swap_keeps_the_cleaned_segments_txnindex(tmp_path, monkeypatch):
    pre_dir, post_dir, crash_dir = (str(tmp_path / n / "t-0") for n in ("pre", "post", "crash"))
    plog = _build_txn(pre_dir)
    want = read_committed(plog)
    assert _aborted(plog) == [(8, 2, 3), (7, 1, 4)]
    plog.close()
    _snapshot_dir(pre_dir, post_dir)
    _snapshot_dir(pre_dir, crash_dir)

    plog = open_log(post_dir, COMPACT)
    LogCleaner().clean_log(plog, T0 + 1000)
    assert _aborted(plog) == [(7, 1, 4)]
    plog.close()

    # The crash: the cleaned segment's files are all in place and the replaced ones
    # deleted, then the process dies before anything else (the in-memory index update,
    # and in the old design the rewrite of the .txnindex files).
    class Crash(BaseException):
        pass

    def crash_now(*_args, **_kwargs):
        raise Crash

    plog = open_log(crash_dir, COMPACT)
    monkeypatch.setattr(cleaner_module, "LogSegment", crash_now)
    with pytest.raises(Crash):
        LogCleaner().clean_log(plog, T0 + 1000)
    monkeypatch.undo()
    for seg in plog.segments:
        if not seg.closed:
            seg.close()
    plog.closed = True
    plog = open_log(crash_dir, COMPACT)  # unclean: no snapshot at close
    assert _aborted(plog) == [(7, 1, 4)]
    check_aborted_index(plog)
    assert read_committed(plog) == read_committed(plog, max_bytes=1) == want
    plog.close()


@pytest.mark.parametrize("state", ["cleaned-partial", "swap-before-delete", "swap-first-deleted",
                                   "swap-all-deleted", "swap-indexes-renamed"])
def test_crash_during_swap_keeps_the_aborted_index_with_its_segment(tmp_path, state):
    pre_dir, post_dir, crash_dir = (str(tmp_path / n / "t-0") for n in ("pre", "post", "crash"))
    plog = _build_txn(pre_dir)
    want = read_committed(plog)
    pre_aborted = _aborted(plog)
    old_bases = [s.base_offset for s in plog.segments[:-1]]
    plog.close()
    _snapshot_dir(pre_dir, post_dir)
    plog = open_log(post_dir, COMPACT)
    assert LogCleaner().clean_log(plog, T0 + 1000).segments_after == 1
    post_aborted = _aborted(plog)
    assert post_aborted != pre_aborted
    plog.close()

    _snapshot_dir(pre_dir, crash_dir)
    prefix = os.path.join(crash_dir, "00000000000000000000")
    cleaned = os.path.join(post_dir, "00000000000000000000")
    exts = (".index", ".timeindex", ".txnindex")
    if state == "cleaned-partial":
        for ext in exts:
            shutil.copy(cleaned + ext, prefix + ext + ".cleaned")
        expected = pre_aborted
    else:
        expected = post_aborted
        shutil.copy(cleaned + ".log", prefix + ".log.swap")
        for ext in exts:
            shutil.copy(cleaned + ext, prefix + ext + ".swap")
        doomed = {"swap-before-delete": [], "swap-first-deleted": old_bases[:1]}.get(state, old_bases)
        for base in doomed:
            for ext in (".log", *exts):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(crash_dir, f"{base:020d}{ext}"))
        if state == "swap-indexes-renamed":
            for ext in exts:
                os.replace(prefix + ext + ".swap", prefix + ext)
    plog = open_log(crash_dir, COMPACT)  # unclean: no recovery point, no marker
    assert _aborted(plog) == expected
    check_aborted_index(plog)
    assert read_committed(plog) == read_committed(plog, max_bytes=1) == want
    assert cleaned_files(crash_dir) == []
    plog.close()
