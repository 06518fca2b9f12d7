"""Log compaction for ``cleanup.policy`` containing ``compact``, after Kafka's LogCleaner.

This module is the cleaner itself (``LogCleaner``: which log to clean and when, the
background loop and its worker thread, the cleaner checkpoint file, the swap of a
cleaned segment into its log) and the public names of log compaction. The rest of a
cleaning lives in modules of their own:

    cleaner_job.py         what one cleaning works on: sources, groups, outputs, stats
    cleaner_offset_map.py  key -> offset of its latest record (worker thread)
    cleaner_filter.py      which batches and records are kept: keys, tombstones,
                           transaction markers and aborted data (worker thread)
    cleaner_rewrite.py     a group of segments written as one cleaned segment (worker thread)
    cleaner_recovery.py    the files of a cleaning and the recovery of an interrupted one
                           (imported by log.py, so it imports neither log.py nor the cleaner)

What a cleaning does to one partition log:

1. **Cleanable range** (``LogCleaner.cleanable``). Closed segments only (never the
   active one), from the log start up to the first segment that is not entirely
   below the last stable offset (so only decided, durable data is cleaned) or whose
   newest record is younger than ``min.compaction.lag.ms``. The part below the
   cleaner checkpoint is "clean" (compacted before), the rest "dirty". Every
   cleaning rewrites the whole range, clean part included, from the first segment.
2. **Offset map** (cleaner_offset_map.py). key -> offset of its latest record, over
   the dirty part.
3. **Rewrite** (cleaner_job.py groups the segments, cleaner_rewrite.py writes each
   group as one new segment, keeping what cleaner_filter.py keeps: a record only if
   no later record of its key is in the map).
4. **Tombstones** and the markers of transactions with no data left get a delete
   horizon, and go once it has passed (cleaner_filter.py, KIP-534).
5. **Swap** (``LogCleaner._swap``, on the event loop: metadata and renames only;
   the file protocol and its crash recovery: cleaner_recovery.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .cleaner_filter import FilterContext
from .cleaner_job import (
    CleanableRange,
    CleanerError,
    CleaningAborted,
    CleaningJob,
    CleanStats,
    GroupOutput,
    SourceSegment,
    group_segments,
)
from .cleaner_offset_map import build_offset_map
from .cleaner_recovery import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    WRITTEN_SUFFIXES,
    recover_interrupted_cleaning,
)
from .cleaner_rewrite import discard_group, group_prefix, write_group
from .durable_file import fsync_directory, write_durably
from .segment import LogSegment

if TYPE_CHECKING:  # log.py does not import this module (cleaner_recovery.py)
    from .log import PartitionLog

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogCleaner:
    """Compacts partition logs in the background, one at a time, filthiest first.

    ``run(logs_provider)`` is the background loop (started by LogManager.start);
    ``clean_log`` (synchronous) and ``compact_now`` (async, work in a thread) clean
    one log on demand, whatever its dirty ratio."""

    def __init__(self, checkpoint_path: str | None = None, *, backoff_ms: int = 15_000) -> None:
        self.checkpoint_path = checkpoint_path
        self.backoff_ms = backoff_ms
        self._checkpoints: dict[tuple[str, int], int] = {}
        self._loaded = False
        self._owners: dict[tuple[str, int], PartitionLog] = {}
        self._horizons: dict[tuple[str, int], int] = {}  # latest tombstone delete horizon
        self.uncleanable: set[str] = set()
        self._executor: ThreadPoolExecutor | None = None
        self._abort = threading.Event()
        self._stopping = False
        self._current: asyncio.Future | None = None
        self._busy: set[PartitionLog] = set()  # one cleaning per log: they share file names
        self.cleanings = 0

    # --- checkpoints ---------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.checkpoint_path is None:
            return
        try:
            with open(self.checkpoint_path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return
        try:
            for line in lines[2:]:
                topic, partition, offset = line.rsplit(" ", 2)
                self._checkpoints[(topic, int(partition))] = int(offset)
        except ValueError:
            log.warning("ignoring malformed cleaner checkpoint file %s", self.checkpoint_path)
            self._checkpoints = {}

    def adopt(self, logs: Iterable[PartitionLog]) -> None:
        """Take the persisted checkpoints for these logs (those open at start). A log
        first seen later (a new topic, maybe reusing a deleted one's name) starts clean."""
        self._load_checkpoints()
        for plog in logs:
            self._owners.setdefault((plog.topic, plog.partition), plog)

    def checkpoint(self, plog: PartitionLog) -> int:
        """The offset below which ``plog`` has been cleaned (its first dirty offset)."""
        self._load_checkpoints()
        key = (plog.topic, plog.partition)
        if self._owners.get(key) is not plog:
            self._owners[key] = plog
            self._checkpoints.pop(key, None)
            self._horizons.pop(key, None)
            self.uncleanable.discard(plog.name)
        offset = self._checkpoints.get(key, plog.log_start_offset)
        if offset < plog.log_start_offset or offset > plog.log_end_offset:
            offset = plog.log_start_offset  # stale (retention or truncation): start over
        return offset

    def _checkpoint_text(self) -> str:
        rows = [(k, v) for k, v in sorted(self._checkpoints.items())
                if k in self._owners and not self._owners[k].closed]
        return f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in rows)

    def _write_checkpoint_file(self, text: str) -> None:
        if self.checkpoint_path is None:
            return
        write_durably(self.checkpoint_path, text.encode())

    # --- choosing ----------------------------------------------------------------------

    def cleanable(self, plog: PartitionLog, now: int) -> CleanableRange | None:
        """The cleanable range of ``plog`` and its dirtiness; None if nothing is cleanable."""
        if "compact" not in plog.config.cleanup_policy or plog.closed \
                or plog.offline is not None:
            return None
        segs = plog.segments
        limit = min(plog.last_stable_offset, plog.high_watermark)
        lag = plog.config.min_compaction_lag_ms
        chosen: list[LogSegment] = []
        for k, seg in enumerate(segs[:-1]):
            if segs[k + 1].base_offset > limit:
                break  # not all of it is decided and durable yet
            if lag > 0 and seg.max_timestamp > now - lag:
                break  # holds records younger than min.compaction.lag.ms
            chosen.append(seg)
        if not chosen:
            return None
        first_dirty = self.checkpoint(plog)
        clean_bytes = dirty_bytes = 0
        needs_now = False
        max_lag = plog.config.max_compaction_lag_ms
        for k, seg in enumerate(chosen):
            if segs[k + 1].base_offset <= first_dirty:
                clean_bytes += seg.size
            else:
                dirty_bytes += seg.size
                ts = seg.first_batch_timestamp
                if seg.size and ts is not None and ts >= 0 and now - ts > max_lag:
                    needs_now = True
        return CleanableRange(plog, chosen, segs[len(chosen)].base_offset, first_dirty,
                          clean_bytes, dirty_bytes, needs_now)

    def _eligible(self, c: CleanableRange, now: int) -> bool:
        if c.dirty_bytes > 0 and (c.needs_now or c.ratio >= c.plog.config.min_cleanable_dirty_ratio):
            return True
        # Nothing dirty enough: still clean if tombstones' delete horizons have passed.
        horizon = self._horizons.get((c.plog.topic, c.plog.partition), -1)
        return 0 <= horizon <= now

    def filthiest(self, logs: Iterable[PartitionLog], now: int) -> CleanableRange | None:
        """The eligible log with the highest dirty ratio (Kafka's grabFilthiestCompactedLog)."""
        best: CleanableRange | None = None
        for plog in logs:
            if plog.name in self.uncleanable and self._owners.get((plog.topic, plog.partition)) is plog:
                continue
            c = self.cleanable(plog, now)
            if c is not None and self._eligible(c, now) and (best is None or c.ratio > best.ratio):
                best = c
        return best

    # --- cleaning --------------------------------------------------------------------

    def _job(self, c: CleanableRange, now: int) -> CleaningJob:
        plog = c.plog
        segs = plog.segments
        sources = []
        try:
            for k, seg in enumerate(c.segments):
                sources.append(SourceSegment(seg, os.dup(seg.fd), seg.size, segs[k + 1].base_offset))
        except OSError:
            for s in sources:
                os.close(s.fd)
            raise
        groups = group_segments(c.segments, [s.end_offset for s in sources],
                                 plog.config.segment_bytes, plog.config.segment_index_bytes)
        tracked = plog.producer_state.producers
        producers = {pid: e.batches[-1].last_offset for pid, e in tracked.items() if e.batches}
        epochs = {pid: e.epoch for pid, e in tracked.items() if not e.batches}
        cancelled = threading.Event()
        aborted: dict[int, list[tuple[int, int]]] = {}
        entries = list(plog.aborted.entries)  # snapshot on the loop for the worker thread
        for entry in entries:
            aborted.setdefault(entry.producer_id, []).append((entry.first_offset,
                                                              entry.last_offset))
        return CleaningJob(plog, sources, [[sources[i] for i in g] for g in groups], c.first_dirty,
                    c.end_offset, now, plog.config.delete_retention_ms,
                    plog.config.index_interval_bytes, producers,
                    lambda: self._abort.is_set() or cancelled.is_set() or plog.closed
                    or plog.offline is not None, cancelled,
                    aborted, entries, epochs)

    def _steps(self, job: CleaningJob, stats: CleanStats) -> Generator[Callable[[], object], object, None]:
        """The cleaning as a sequence: each yielded callable is worker-thread work whose
        result is sent back; the code between yields runs on the caller (event loop)."""
        ctx = yield functools.partial(build_offset_map, job)
        assert isinstance(ctx, FilterContext)
        plog = job.plog
        for group in job.groups:
            out = yield functools.partial(write_group, job, group, ctx)
            assert isinstance(out, GroupOutput)
            if self._stopping or not self._swap(plog, group, out):
                discard_group(out.prefix)
                stats.completed = False
                break
            stats.bytes_after += out.size
        stats.records_read, stats.records_kept = ctx.records_read, ctx.records_kept
        stats.segments_after = len(job.groups) if stats.completed else stats.segments_before
        key = (plog.topic, plog.partition)
        if stats.completed:
            self._checkpoints[key] = job.end_offset
            self._horizons[key] = ctx.latest_horizon
        text = self._checkpoint_text()
        yield functools.partial(self._finish_io, plog.directory, text)

    def _finish_io(self, directory: str, checkpoint_text: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # the topic may be gone
            fsync_directory(directory)
        self._write_checkpoint_file(checkpoint_text)

    def _swap(self, plog: PartitionLog, group: list[SourceSegment], out: GroupOutput) -> bool:
        """Replace the group's segments by the cleaned one (event loop; metadata only)."""
        old = [s.segment for s in group]
        segs = plog.segments
        try:
            i = next(k for k, s in enumerate(segs) if s is old[0])
        except StopIteration:
            return False  # retention or a topic deletion got there first
        if plog.closed or plog.offline is not None or i + len(old) >= len(segs) or \
                any(a is not b for a, b in zip(segs[i : i + len(old)], old, strict=True)):
            return False
        prefix = out.prefix
        # The cleaned .txnindex is renamed with the .log (before it, both times), so at
        # any crash point the segment files on disk and their aborted-transaction
        # entries match (recover_interrupted_cleaning finishes the renames).
        for ext in WRITTEN_SUFFIXES:  # commit point: the .log.swap rename
            os.replace(prefix + ext + CLEANED_SUFFIX, prefix + ext + SWAP_SUFFIX)
        for seg in old:
            if seg in plog.pending_sync:
                plog.pending_sync.remove(seg)
            seg.delete()
        for ext in WRITTEN_SUFFIXES:
            os.replace(prefix + ext + SWAP_SUFFIX, prefix + ext)
        if not out.txn_entries:  # as rewrite_txn_indexes leaves it: no file, no entries
            os.unlink(prefix + ".txnindex")
        new = LogSegment(plog.directory, out.base_offset, plog.config.index_interval_bytes)
        new.load()
        new.release_file()  # never the active segment: its .log is reopened when read
        segs[i : i + len(old)] = [new]
        plog.aborted.replace_range(out.txn_low, out.end_offset, out.txn_entries)
        return True

    def _start(self, plog: PartitionLog, now: int | None) -> tuple[CleaningJob, CleanStats] | None:
        if plog in self._busy:
            raise RuntimeError(f"{plog.name} is being cleaned already")
        now = _now_ms() if now is None else now
        c = self.cleanable(plog, now)
        if c is None:
            return None
        job = self._job(c, now)
        self._busy.add(plog)
        stats = CleanStats(plog.name, c.first_dirty, c.end_offset, len(c.segments), 0,
                           sum(s.size for s in job.sources), 0, 0, 0)
        return job, stats

    def _done(self, job: CleaningJob, stats: CleanStats, failed: BaseException | None) -> None:
        for s in job.sources:
            os.close(s.fd)
        for group in job.groups:
            discard_group(group_prefix(job, group))
        self._busy.discard(job.plog)
        if isinstance(failed, Exception) and not isinstance(failed, CleaningAborted):
            self.uncleanable.add(job.plog.name)
            log.error("%s: log cleaning failed, the log is skipped until restart: %s",
                      job.plog.name, failed)
        elif failed is None and not stats.completed:
            log.info("%s: log cleaning given up: the log changed meanwhile", stats.log)
        elif failed is None:
            self.cleanings += 1
            log.info("%s: cleaned up to offset %d (dirty from %d): %d -> %d segment(s), "
                     "%d -> %d bytes, kept %d of %d records", stats.log, stats.end_offset,
                     stats.first_dirty, stats.segments_before, stats.segments_after,
                     stats.bytes_before, stats.bytes_after, stats.records_kept,
                     stats.records_read)

    def clean_log(self, plog: PartitionLog, now: int | None = None) -> CleanStats | None:
        """Clean ``plog`` now, synchronously, whatever its dirty ratio (for tests and tools).
        Returns None if it has nothing cleanable or is not compacted."""
        started = self._start(plog, now)
        if started is None:
            return None
        job, stats = started
        failed: BaseException | None = None
        try:
            steps = self._steps(job, stats)
            result: object = None
            with contextlib.suppress(StopIteration):
                while True:
                    result = steps.send(result)()
        except BaseException as e:
            failed = e
            raise
        finally:
            self._done(job, stats, failed)
        return stats

    async def compact_now(self, plog: PartitionLog, now: int | None = None) -> CleanStats | None:
        """Clean ``plog`` now, its heavy work in the cleaner thread, whatever its dirty ratio."""
        while plog in self._busy and not self._stopping:
            await asyncio.sleep(0.01)
        if self._stopping:
            return None
        started = self._start(plog, now)
        if started is None:
            return None
        job, stats = started
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="txbroker-cleaner")
        loop = asyncio.get_running_loop()
        failed: BaseException | None = None
        try:
            steps = self._steps(job, stats)
            result: object = None
            with contextlib.suppress(StopIteration):
                while True:
                    work = steps.send(result)
                    self._current = loop.run_in_executor(self._executor, work)
                    # Shielded: a cancellation must not mark the thread's work done early.
                    result = await asyncio.shield(self._current)
        except BaseException as e:
            failed = e
            if isinstance(e, CleaningAborted):
                return None
            raise
        finally:
            current, self._current = self._current, None
            if current is not None and not current.done():
                # Cancelled while the thread works: stop it, and close its fds only
                # once it has finished with them.
                job.cancelled.set()
                current.add_done_callback(lambda _f: self._done(job, stats, CleaningAborted()))
            else:
                self._done(job, stats, failed)
        return stats

    # --- background loop -------------------------------------------------------------------

    async def run(self, logs_provider: Callable[[], Iterable[PartitionLog]]) -> None:
        """Clean the filthiest eligible log, again at once if one was cleaned, else after
        ``log.cleaner.backoff.ms``."""
        self.adopt(logs_provider())
        while not self._stopping:
            cleaned = False
            try:
                best = self.filthiest(logs_provider(), _now_ms())
                if best is not None:
                    stats = await self.compact_now(best.plog)
                    cleaned = stats is not None and stats.completed
            except CleanerError:
                pass  # logged, and the log is marked uncleanable
            except Exception:
                log.exception("log cleaner round failed")
            await asyncio.sleep(0 if cleaned else self.backoff_ms / 1000)

    async def stop(self) -> None:
        """Abort a cleaning in progress (its files are discarded) and stop the thread."""
        self._stopping = True
        self._abort.set()
        current = self._current
        if current is not None:
            with contextlib.suppress(BaseException):
                await current
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CleanStats",
    "CleanerError",
    "LogCleaner",
    "recover_interrupted_cleaning",
]
