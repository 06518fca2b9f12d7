"""The transaction coordinator's snapshots of ``__transaction_state``, at run time:
per partition the latest record of every id (what the next snapshot holds), kept in
step with the log as records are appended; a snapshot written once everything below
its offset is fsynced; and a snapshot loaded into the state machine on start. The
file format is :mod:`.snapshot`'s.

Owned by one :class:`SnapshotKeeper`, which the transaction coordinator's shell
adapter (:mod:`.coordinator`) holds; nothing else touches its dictionaries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from txbroker.storage.log import PartitionLog
from txbroker.storage.manager import LogManager

from ..internal_topic import TXN_TOPIC
from .records import TxnLogValue
from .snapshot import read_snapshot, row_of, snapshot_path, write_snapshot
from .state import TransactionCoordinatorState

log = logging.getLogger("txbroker.coordinator.transaction.coordinator")

# A partition is snapshotted once max(min_records, its ids / SNAPSHOT_TAIL_FRACTION)
# records were appended since its last snapshot: a load replays at most about that
# many records per partition (the snapshot written is the cost).
SNAPSHOT_TAIL_FRACTION = 16
# Snapshot rows loaded between two turns of the event loop: requests for the ids of
# partitions already loaded wait at most that long (~1 ms) while the others load.
SNAPSHOT_ROWS_PER_TURN = 250

View = dict[str, list | TxnLogValue]  # id -> its snapshot row (loaded) or latest record


def _note(view: View, tid: str, value: TxnLogValue | None) -> None:
    # The record itself: its snapshot row is built when a snapshot is written (an id
    # is written three times per transaction, a snapshot every few thousand records).
    if value is None:  # a tombstone: the id expired
        view.pop(tid, None)
    else:
        view[tid] = value


def _snapshot_rows(view: View) -> list[list]:
    return [v if type(v) is list else row_of(tid, v) for tid, v in view.items()]


class SnapshotKeeper:
    def __init__(self, logs: LogManager, spawn: Callable[[Coroutine[Any, Any, Any]], None],
                 stopped: Callable[[], bool]) -> None:
        self.logs = logs
        self._spawn = spawn
        self._stopped = stopped
        # Per partition: the view, records appended since the last snapshot, and the
        # partitions whose snapshot is being written.
        self.latest: dict[int, View] = {}
        self.since_snapshot: dict[int, int] = {}
        self._writing: set[int] = set()

    def clear(self) -> None:
        self.latest.clear()
        self.since_snapshot.clear()
        self._writing.clear()

    def note(self, partition: int, tid: str, value: TxnLogValue | None,
             min_records: int) -> None:
        """A record of ``tid`` was appended to ``partition``; snapshot it if due."""
        _note(self.latest.setdefault(partition, {}), tid, value)
        self.since_snapshot[partition] = self.since_snapshot.get(partition, 0) + 1
        self.maybe_snapshot(partition, min_records)

    @staticmethod
    def loaded_record(view: View, tid: str, value: TxnLogValue | None) -> None:
        """A record read while loading a partition (after its snapshot) into its view."""
        _note(view, tid, value)

    def maybe_snapshot(self, p: int, min_records: int) -> None:
        view = self.latest.get(p, {})
        due = max(min_records, len(view) // SNAPSHOT_TAIL_FRACTION)
        if self.since_snapshot.get(p, 0) >= due and p not in self._writing \
                and not self._stopped():
            self._writing.add(p)
            self._spawn(self._write(p))

    async def _write(self, p: int) -> None:
        """Snapshot partition ``p`` at its log end, once everything below is fsynced."""
        try:
            plog = self.logs.get_log(TXN_TOPIC, p)
            if plog is None:
                return
            rows = _snapshot_rows(self.latest.get(p, {}))
            offset = plog.log_end_offset
            self.since_snapshot[p] = 0
            await self.logs.flusher.wait_durable(plog, offset)
            if self._stopped() or plog.closed or plog.flushed_offset < offset:
                return  # a crash: what is not durable must not reach a snapshot
            await asyncio.get_running_loop().run_in_executor(
                None, write_snapshot, plog.directory, offset, rows)
        except OSError as e:  # only an optimisation: the next load replays more
            log.warning("cannot write the coordinator snapshot of %s-%d: %r", TXN_TOPIC, p, e)
        finally:
            self._writing.discard(p)

    async def write_all(self) -> None:
        """Snapshot every partition with records since its last snapshot."""
        for p in [p for p, n in self.since_snapshot.items() if n]:
            if p not in self._writing:
                self._writing.add(p)
                await self._write(p)

    async def load(self, state: TransactionCoordinatorState, plog: PartitionLog,
                   view: View) -> int:
        """Load the partition's snapshot into ``state`` and ``view``; the offset to
        replay from (the log start if there is no usable snapshot)."""
        try:
            snap = read_snapshot(plog.directory)
        except (ValueError, OSError) as e:
            log.warning("%s: %s; replaying the whole partition", plog.name, e)
            if isinstance(e, ValueError):  # torn or garbage: else it warns at every start
                with contextlib.suppress(OSError):
                    os.unlink(snapshot_path(plog.directory))
            return plog.log_start_offset
        if snap is None:
            return plog.log_start_offset
        offset, rows = snap
        if not plog.log_start_offset <= offset <= plog.log_end_offset:
            log.warning("%s: coordinator snapshot at offset %d is outside the log [%d, %d]; "
                        "replaying the whole partition", plog.name, offset,
                        plog.log_start_offset, plog.log_end_offset)
            return plog.log_start_offset
        try:
            for n, row in enumerate(rows):
                if n % SNAPSHOT_ROWS_PER_TURN == SNAPSHOT_ROWS_PER_TURN - 1:
                    await asyncio.sleep(0)  # serve the loaded partitions' ids meanwhile
                state.load_row(row, plog.partition)
                view[row[0]] = row
        except ValueError as e:
            log.warning("%s: %s; replaying the whole partition", plog.name, e)
            for tid in view:  # forget the rows loaded: the replay loads every id again
                state.load(tid, None, plog.partition)
            view.clear()
            return plog.log_start_offset
        return offset
