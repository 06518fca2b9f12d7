"""Log compaction (storage/cleaner.py): what survives a cleaning, tombstones and their
delete horizon, producer state, crash recovery of the swap, and the background loop."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.records import (
    ATTR_DELETE_HORIZON,
    Compression,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    read_header,
    validate_batch,
)
from storage import cleaner as cleaner_module
from storage.cleaner import CLEANER_CHECKPOINT_FILE, LogCleaner
from storage.log import PartitionLog
from storage.log_config import LogConfig
from storage.manager import LogManager
from storage.producer_state import OutOfOrderSequenceError, list_snapshots

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
    real_write = cleaner_module._write_group

    def slow_write(*args):
        threads.append(threading.current_thread().name)
        in_thread.set()
        assert release.wait(10)
        return real_write(*args)

    monkeypatch.setattr(cleaner_module, "_write_group", slow_write)

    async def scenario():
        cleaner = LogCleaner()
        task = asyncio.create_task(cleaner.compact_now(plog, T0 + 1000))
        while not in_thread.is_set():
            await asyncio.sleep(0.005)
        # The event loop is free: reads see the old segments, appends go to the active one.
        assert records(plog) == before
        append(plog, [(b"x", b"during")], ts=T0 + 500)
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
