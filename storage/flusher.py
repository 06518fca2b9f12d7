"""Group commit: fsync dirty partition logs off the event loop, one round at a time.

Appends mark their log dirty. A round takes every dirty log, fsyncs its files
in a helper process (one fsync per file per round, files in parallel; see
storage/fsync_helper.py, and a thread pool if the helper cannot run) and
then advances each log's flushed offset, which releases ``acks=all`` producers
and, with ``flush.messages=1``, moves the high watermark. Appends that arrive
during a round are picked up by the next one, so the fsync cost is shared by
every request that arrived while the previous one was running.

A failed fsync is not retried: Linux may have dropped the dirty pages it covered
(PostgreSQL's "fsyncgate"), so a later fsync that succeeds would not make them
durable. The partition goes offline until the broker restarts
(``PartitionLog.take_offline``: its files cut back to its flushed offset, appends
and reads refused with KAFKA_STORAGE_ERROR), every write waiting for its durability
fails with ``LogOfflineError``, and the condition is logged in a few lines
(``ConditionLog``), never once per attempt. Kafka takes the whole log directory
offline on such an error (its LogDirFailureChannel) because a broker has several and
its replicas elsewhere; here there is one data directory holding the coordinators'
topics too, and fsync reports its error per file, so only the partition whose fsync
failed goes offline: the others' successful fsyncs are as durable as before, and a
file system that is gone fails every partition at its next fsync anyway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from . import fsync_helper
from .condition_log import SUMMARY_INTERVAL_S, ConditionLog
from .durable_file import entries_synced, unsynced_entries
from .log import PartitionLog, now_ms
from .segment import LogSegment

log = logging.getLogger(__name__)

LAZY_FLUSH_MS = 1000  # at the latest, a batch appended with flush=False is fsynced then
# Descriptors one round duplicates at most (each log's are taken whole); the logs past it
# wait for the next round, so thousands of dirty partitions cannot exhaust RLIMIT_NOFILE.
MAX_FDS_PER_ROUND = 1024


def _sync_and_close(fds: list[int]) -> None:
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


class _Round:
    __slots__ = ("loop", "future", "errors", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop, jobs: int) -> None:
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()
        self.errors: list[BaseException | None] = [None] * jobs
        self.done: list[int] = []


def _finish_round(rnd: _Round) -> None:
    if not rnd.future.done():
        rnd.future.set_result(rnd.errors)


class FsyncPool:
    """Threads that fsync the files of one round in parallel. Leaner than a
    ThreadPoolExecutor with a future per job: the round's one asyncio future is
    resolved with a single wake-up of the event loop, by the job that ends last."""

    def __init__(self, workers: int) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"txbroker-fsync-{i}",
                                          daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def run(self, loop: asyncio.AbstractEventLoop, jobs: list[list[int]]) -> asyncio.Future:
        """fsync and close each job's fds; the future's result is the error (or None)
        of each job, in order."""
        rnd = _Round(loop, len(jobs))
        for i, fds in enumerate(jobs):
            self._jobs.put((rnd, i, fds))
        return rnd.future

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            rnd, i, fds = item
            try:
                _sync_and_close(fds)
            except BaseException as e:  # reported to the round, never kills the thread
                rnd.errors[i] = e
            rnd.done.append(i)  # atomic; the job that completes the round wakes the loop
            if len(rnd.done) == len(rnd.errors):
                try:
                    rnd.loop.call_soon_threadsafe(_finish_round, rnd)
                except RuntimeError:
                    pass  # the loop is closed (abandoned)

    def shutdown(self, wait: bool) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for t in self._threads:
                t.join()


class ProcessFsyncPool:
    """FsyncPool's interface, with the fsyncs done by the helper process
    (storage/fsync_helper.py), so that no thread of the broker needs the GIL for
    them. Each job's fds are sent to the helper and kept here until it answers;
    the round's future is resolved by one message per round. If the helper cannot
    be started, a send fails or the helper dies, the jobs not answered yet are
    fsynced by a thread pool instead (and every later round too), so nothing is
    reported durable that was not fsynced."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._fallback: FsyncPool | None = None
        self._rounds: dict[int, tuple[_Round, list[list[int]]]] = {}
        self._next_id = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, fsync_helper.__file__, str(theirs.fileno()), str(workers)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            log.warning("fsync helper process not started (%s); fsyncing in threads", e)
            ours.close()
            self._sock: socket.socket | None = None
            self._proc = None
            self._fallback = FsyncPool(workers)
        else:
            self._sock = ours
            ours.setblocking(False)
        finally:
            theirs.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def run(self, loop: asyncio.AbstractEventLoop, jobs: list[list[int]]) -> asyncio.Future:
        if self._sock is None:
            return self._threads().run(loop, jobs)
        if self._loop is not loop:
            if self._loop is not None:
                self._loop.remove_reader(self._sock.fileno())
            self._loop = loop
            loop.add_reader(self._sock.fileno(), self._on_readable)
        self._next_id += 1
        round_id = self._next_id
        rnd = _Round(loop, len(jobs))
        self._rounds[round_id] = (rnd, jobs)
        try:
            for data, fds in fsync_helper.requests(round_id, jobs):
                socket.send_fds(self._sock, [data], fds)
        except (OSError, ValueError) as e:  # EPIPE: it died; EAGAIN: it stopped reading
            self._broken(f"cannot send it a round: {e!r}")
        return rnd.future

    def _on_readable(self) -> None:
        # One answer per call: the reader is level-triggered, so the next comes next.
        assert self._sock is not None
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:  # it died with jobs of ours unread
            self._broken("it exited")
            return
        except OSError as e:
            self._broken(f"cannot read its answer: {e!r}")
            return
        if not data:
            self._broken("it exited")
            return
        round_id, size = fsync_helper.HEAD.unpack_from(data)
        entry = self._rounds.pop(round_id, None)
        if entry is None:
            return
        rnd, jobs = entry
        for index in range(size):
            (errno,) = fsync_helper.ERRNO.unpack_from(
                data, fsync_helper.HEAD.size + index * fsync_helper.ERRNO.size)
            if errno:
                rnd.errors[index] = OSError(errno, os.strerror(errno))
            _close(jobs[index])
        _finish_round(rnd)

    def _threads(self) -> FsyncPool:
        if self._fallback is None:
            self._fallback = FsyncPool(self._workers)
        return self._fallback

    def _broken(self, why: str) -> None:
        """Stop using the helper; fsync what it did not answer for in threads."""
        if self._sock is None:
            return
        log.error("fsync helper process: %s; fsyncing in threads from now on", why)
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        rounds, self._rounds = self._rounds, {}
        for rnd, jobs in rounds.values():
            # Its copies of the fds may or may not have been fsynced: do them all again.
            redo = self._threads().run(rnd.loop, jobs)
            redo.add_done_callback(lambda f, rnd=rnd: _adopt(rnd, f))
        self._reap(wait=False)

    def _reap(self, wait: bool) -> None:
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout=5 if wait else 0.5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def shutdown(self, wait: bool) -> None:
        if self._sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()  # the helper exits once its started fsyncs are done
            self._sock = None
        for _rnd, jobs in self._rounds.values():
            for fds in jobs:
                _close(fds)
        self._rounds = {}
        if wait:
            self._reap(wait=True)
        if self._fallback is not None:
            self._fallback.shutdown(wait)
            self._fallback = None


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _adopt(rnd: _Round, redone: asyncio.Future) -> None:
    if redone.cancelled():
        return
    rnd.errors[:] = redone.result()
    _finish_round(rnd)


class Flusher:
    def __init__(self, workers: int = 4) -> None:
        self._dirty: dict[PartitionLog, None] = {}
        self._waiters: dict[PartitionLog, list[tuple[int, asyncio.Future]]] = {}
        self._wake: asyncio.Event | None = None
        self._workers = workers
        self._pool: FsyncPool | None = None
        self._task: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        self._logs: dict[PartitionLog, None] = {}  # a dict: track() is O(1) for big creations
        self._inflight: dict[PartitionLog, int] = {}  # log -> offset its running fsync covers
        self._postponed = False  # a log's files could not be opened for the last round
        self.failed_fsyncs = 0  # fsync jobs that failed (each took its log offline)
        # Fault injection: each is called with a log whose fsync job just succeeded and
        # returns an errno to report instead (its budget taken), or None (faults.md).
        self.fsync_faults: list[Callable[[PartitionLog], int | None]] = []
        self._failures = ConditionLog(log, "fsync failed, partition(s) taken offline")
        self._no_fds = ConditionLog(log, "fsync postponed (cannot open the files)")
        self.rounds = 0
        self.fsyncs = 0
        # Told each round's duration (seconds) and file count, e.g. for a histogram.
        self.on_round: Callable[[float, int], None] | None = None

    def start(self, logs: list[PartitionLog]) -> None:
        self._wake = asyncio.Event()
        if self._pool is None:
            self._pool = ProcessFsyncPool(self._workers)
        self._logs = dict.fromkeys(logs)
        self._task = asyncio.create_task(self._run(), name="flusher")
        self._ticker = asyncio.create_task(self._tick(), name="flush-ticker")

    def track(self, plog: PartitionLog) -> None:
        plog.on_append = self.notify_append
        self._logs[plog] = None

    def untrack(self, plog: PartitionLog) -> None:
        plog.on_append = None
        self._logs.pop(plog, None)
        self._dirty.pop(plog, None)
        for _, fut in self._waiters.pop(plog, []):
            if not fut.done():
                fut.set_result(None)

    def notify_append(self, plog: PartitionLog) -> None:
        cfg = plog.config
        if cfg.fsync_every_append or plog.unflushed_messages >= cfg.flush_messages \
                or plog.directory_dirty or plog.pending_sync:
            self._mark(plog)

    def _mark(self, plog: PartitionLog) -> None:
        self._dirty[plog] = None
        if self._wake is not None:
            self._wake.set()

    def acked(self, plog: PartitionLog, offset: int) -> asyncio.Future | None:
        """What a write waits for before it is acknowledged (acks=all) or acted on
        (coordinator state, transaction markers), by the log's flush policy: the fsync
        of everything below ``offset`` when the log fsyncs every append
        (``flush.messages=1``, the default), nothing otherwise. The latter is Kafka's
        own behaviour: with its default flush policy a broker acknowledges and acts on
        writes in the page cache and leaves durability to replicas, which a single
        broker does not have, so a power loss can take them back."""
        return self.durable(plog, offset) if plog.config.fsync_every_append else None

    async def wait_acked(self, plog: PartitionLog, offset: int) -> None:
        """Await :meth:`acked`."""
        fut = self.acked(plog, offset)
        if fut is not None:
            await fut

    async def wait_durable(self, plog: PartitionLog, offset: int) -> None:
        """Return once everything below ``offset`` in ``plog`` is fsynced."""
        fut = self.durable(plog, offset)
        if fut is not None:
            await fut

    def durable(self, plog: PartitionLog, offset: int) -> asyncio.Future | None:
        """A future resolved once everything below ``offset`` in ``plog`` is fsynced,
        or None if it is already (no Task needed to wait: await it or add a callback)."""
        if plog.flushed_offset >= offset or plog.closed:
            return None
        fut = asyncio.get_running_loop().create_future()
        if plog.offline is not None:  # it never will be
            fut.set_exception(plog.offline_error())
            return fut
        self._waiters.setdefault(plog, []).append((offset, fut))
        if self._inflight.get(plog, -1) < offset:
            self._mark(plog)  # else the fsync in flight covers it
        return fut

    async def flush_now(self) -> None:
        """Flush every log once (used on shutdown and in tests)."""
        for plog in list(self._logs):
            if not plog.closed and plog.offline is None and (
                    plog.flushed_offset < plog.log_end_offset or plog.pending_sync
                    or plog.directory_dirty):
                self._dirty[plog] = None
        # Several rounds when more logs are dirty than one round takes (MAX_FDS_PER_ROUND);
        # a log whose files cannot be opened is retried a bounded number of times.
        for _ in range(len(self._dirty) // 64 + 3):
            if not self._dirty:
                break
            await self._round()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._round()
            except Exception:  # a failed fsync must not kill the flusher
                log.exception("flush round failed")
                await asyncio.sleep(0.1)
            if self._postponed:  # out of descriptors: give them time to come back
                self._postponed = False
                await asyncio.sleep(0.1)

    async def _round(self) -> None:
        if not self._dirty:
            return
        batch = list(self._dirty)
        self._dirty.clear()
        jobs: list[tuple[PartitionLog, int, int, tuple[list[LogSegment], bool],
                         frozenset[str] | None]] = []
        fd_jobs: list[list[int]] = []
        taken_fds = 0
        for n, plog in enumerate(batch):
            if taken_fds >= MAX_FDS_PER_ROUND:
                for later in batch[n:]:  # the next round, right after this one
                    self._mark(later)
                break
            if plog.closed or plog.offline is not None:
                continue
            target = plog.log_end_offset
            if plog.flushed_offset >= target and not plog.pending_sync \
                    and not plog.directory_dirty:
                self._release(plog, target)  # nothing new since the last fsync
                continue
            count = plog.unflushed_messages
            taken = (list(plog.pending_sync), plog.directory_dirty)  # handed out again on error
            # Entries the directory fsync of this round makes durable (fault injection).
            entries = unsynced_entries(plog.directory) if plog.directory_dirty else None
            try:
                fds = plog.take_sync_fds()
            except OSError as e:
                # EMFILE/ENFILE: this log's waiters wait for a round that can open its
                # files (take_sync_fds left nothing open and everything pending).
                self._no_fds.occurred(f"{plog.name}: {e}", plog.name)
                self._mark(plog)
                self._postponed = True
                continue
            taken_fds += len(fds)
            self.fsyncs += len(fds)
            jobs.append((plog, target, count, taken, entries))
            self._inflight[plog] = target
            fd_jobs.append(fds)
        if not jobs:
            return
        if self._pool is None:
            self._pool = ProcessFsyncPool(self._workers)
        started = time.perf_counter()
        try:
            results = await self._pool.run(asyncio.get_running_loop(), fd_jobs)
        except BaseException:
            for plog, _, _, taken, _ in jobs:
                plog.sync_failed(*taken)
                self._mark(plog)
            raise
        finally:
            for plog, _, _, _, _ in jobs:
                self._inflight.pop(plog, None)
        self.rounds += 1
        if self.on_round is not None:
            self.on_round(time.perf_counter() - started, taken_fds)
        now = now_ms()
        failed = False
        for (plog, target, count, _taken, entries), result in zip(jobs, results, strict=True):
            if result is None and self.fsync_faults:
                result = self._injected(plog)
            if result is not None:
                failed = True
                self._failed(plog, result)
                continue
            if entries:
                entries_synced(plog.directory, entries)
            plog.flushed(target, count, now)
            self._release(plog, target)
        if not self._postponed:
            self._no_fds.cleared()
        if not failed and self._failures.active:
            offline = [p.name for p in self._logs if p.offline is not None]
            self._failures.cleared(quiet=SUMMARY_INTERVAL_S, detail=(
                f"fsyncs succeed again; {len(offline)} partition(s) stay offline until the "
                f"broker restarts: {', '.join(offline[:10])}{' ...' if len(offline) > 10 else ''}"))

    def _injected(self, plog: PartitionLog) -> OSError | None:
        for fault in list(self.fsync_faults):
            code = fault(plog)
            if code is not None:
                return OSError(code, f"{os.strerror(code)} (injected fault)")
        return None

    def _failed(self, plog: PartitionLog, error: BaseException) -> None:
        """The fsync of ``plog``'s files failed: no retry (see the module's docstring).
        The log goes offline and every write waiting for its durability fails."""
        self.failed_fsyncs += 1
        if not isinstance(error, OSError):  # (the pools report OSErrors; be safe)
            error = OSError(str(error))
        outcome = plog.take_offline(error)
        self._dirty.pop(plog, None)
        waiters = self._waiters.pop(plog, [])
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(plog.offline_error())
        self._failures.occurred(
            f"{plog.name}: {error}; {len(waiters)} waiting write(s) failed with "
            f"KAFKA_STORAGE_ERROR; the partition refuses appends and fetches until the broker "
            f"restarts; files {outcome}", plog.name)

    def _release(self, plog: PartitionLog, target: int) -> None:
        """Answer the waiters of ``plog`` at or below ``target`` (durable now); the
        others need another fsync."""
        waiters = self._waiters.get(plog)
        if waiters:
            keep = []
            for offset, fut in waiters:
                if offset <= target:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((offset, fut))
            if keep:
                self._waiters[plog] = keep
                self._mark(plog)
            else:
                del self._waiters[plog]

    async def _tick(self) -> None:
        """flush.ms for logs that do not fsync every append; for those that do, the
        batches appended with ``flush=False`` within LAZY_FLUSH_MS."""
        while True:
            await asyncio.sleep(0.1)
            self._failures.tick()
            self._no_fds.tick()
            now = now_ms()
            for plog in self._logs:
                if plog.closed or plog.offline is not None \
                        or plog.flushed_offset >= plog.log_end_offset:
                    continue
                interval = LAZY_FLUSH_MS if plog.config.fsync_every_append \
                    else plog.config.flush_ms
                if now - plog.last_flush_ms >= interval:
                    self._mark(plog)

    def abandon(self) -> None:
        """Stop without flushing (simulated crash); waiters are released unanswered."""
        for task in (self._task, self._ticker):
            if task is not None:
                task.cancel()
        self._task = self._ticker = None
        self._dirty.clear()
        for waiters in self._waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    async def stop(self) -> None:
        for task in (self._task, self._ticker):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = self._ticker = None
        await self.flush_now()
        for _plog, waiters in self._waiters.items():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._waiters.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
