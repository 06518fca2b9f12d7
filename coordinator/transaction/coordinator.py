"""The transaction coordinator: answers InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn (Kafka's ``TransactionCoordinator``) by driving the sans-IO
state machine (``state.py``) through the coordinators' one async shell
(:mod:`..shell`), of which this class is the adapter: which partition of
``__transaction_state`` a record goes to, which records are acted on once appended,
the fault point after a PrepareCommit/PrepareAbort is durable, the markers to write,
the events to log. It also loads ``__transaction_state`` on start (per partition its
snapshot, :mod:`.snapshots`, then the records after it) and recovers unfinished
commits.

Who may touch what: the state machine (``self.state``) is this object's; handlers and
the admin console call the public methods below ("front doors": verification, the
admin views, the turns of Produce's implicit adds), never ``state`` itself; tests and
fault injection (``testing/``) may. The shell's futures and timer are the shell's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.storage.log import PartitionLog
from txbroker.storage.manager import LogManager

from ..internal_topic import OFFSETS_TOPIC, TXN_TOPIC, partition_for
from ..shell import CoordinatorShell, now_ms, read_batches
from .faults import FaultInjector
from .markers import write_marker_request
from .records import decode_key, decode_value
from .snapshots import SnapshotKeeper, View
from .state import (
    AddOffsetsResult,
    AddPartitionsResult,
    Effects,
    EndTxnResult,
    InitProducerIdResult,
    ListTransactionsResult,
    MarkerRequest,
    PersistRequest,
    TransactionCoordinatorState,
    TxnConfig,
    TxnDescription,
    TxnEvent,
    TxnState,
)

log = logging.getLogger(__name__)

EPOCH_FILE = "transaction-coordinator-epoch"
_COMPLETE_STATES = ("CompleteCommit", "CompleteAbort")
_PREPARE_STATES = ("PrepareCommit", "PrepareAbort")
COMPLETION_WAIT_S = 1.0  # longest an AddPartitionsToTxn waits for the previous commit
MARKER_RETRY_BACKOFF_S = 0.1  # between a failed marker write and its retry
_E = ErrorCode
# The AddPartitionsToTxn version of a partition leader's implicit add (transactions v2).
ADD_PARTITIONS_FROM_LEADER = 5
TXN_OUTCOMES = ("committed", "aborted", "timed_out", "fenced")
# A partition of __transaction_state is snapshotted once this many records (or a
# fraction of its ids, snapshots.py) were appended since its last snapshot. Read at
# each append (a test lowers it on a running broker).
SNAPSHOT_MIN_RECORDS = 100
# How long a request for an id whose partition is still loading waits for it (that
# partition loads next) before it is answered COORDINATOR_LOAD_IN_PROGRESS. A partition
# loads in milliseconds; a client retries the error only after its backoff (librdkafka:
# 500 ms for InitProducerId).
PARTITION_LOAD_WAIT_S = 0.5


@dataclass
class TxnCoordinatorConfig:
    state_log_partitions: int = 50  # transaction.state.log.num.partitions
    state_log_segment_bytes: int = 104857600  # transaction.state.log.segment.bytes
    txn: TxnConfig = field(default_factory=TxnConfig)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class TransactionCoordinator:
    def __init__(self, logs: LogManager, groups, producer_ids, config: TxnCoordinatorConfig,
                 faults: FaultInjector) -> None:
        self.logs = logs
        self.groups = groups
        self.producer_ids = producer_ids
        self.config = config
        self.faults = faults
        self.coordinator_epoch = 0
        self._epoch_bumped = False  # bump_epoch() ran for the coming start()
        self.shell = CoordinatorShell(logs, TXN_TOPIC, self,
                                      partitions=config.state_log_partitions,
                                      segment_bytes=config.state_log_segment_bytes,
                                      faults=faults, keep_earlier_wake=True)
        self.state = self._new_state()
        # AddPartitionsToTxn/AddOffsetsToTxn held while their id's commit completes.
        self._completion_waiters: dict[str, list[asyncio.Future]] = {}
        # While loading: the __transaction_state partitions still to load, in order (a
        # partition asked for moves to the front), and the waiters of each.
        self._load_queue: collections.deque[int] = collections.deque()
        self._partition_waiters: dict[int, asyncio.Event] = {}
        self.snapshots = SnapshotKeeper(logs, self.shell.spawn, lambda: self.shell.stopped)
        # Finished transactions by outcome, for /metrics (this process's lifetime).
        self.outcomes: dict[str, int] = dict.fromkeys(TXN_OUTCOMES, 0)
        # Produce v12+ (transactions v2): per (topic, partition, producer id), the turn
        # of the producer's latest request that may add the partition (take_add_turn).
        self._add_turns: dict[tuple[str, int, int], asyncio.Future] = {}

    def _new_state(self) -> TransactionCoordinatorState:
        topic = self.logs.topics.get(TXN_TOPIC)
        partitions = topic.partitions if topic is not None else 1  # no topic: nothing loads
        return TransactionCoordinatorState(
            self.config.txn, self.producer_ids.next_id, self._offsets_partition,
            coordinator_epoch=self.coordinator_epoch, txn_first_offset=self._txn_first_offset,
            partitions=partitions, txn_partition=lambda tid: partition_for(tid, partitions))

    def _txn_first_offset(self, producer_id: int, tp: tuple[str, int]) -> int | None:
        plog = self.logs.get_log(*tp)
        return None if plog is None else plog.ongoing_transaction_start(producer_id)

    def _offsets_partition(self, group_id: str) -> tuple[str, int]:
        self.groups.ensure_offsets_topic()
        return OFFSETS_TOPIC, partition_for(group_id, self.logs.topics[OFFSETS_TOPIC].partitions)

    # --- lifecycle --------------------------------------------------------------------

    def bump_epoch(self) -> None:
        """Take this incarnation's coordinator epoch now (a file write and two fsyncs),
        for the coming start(): the broker does it in a worker thread right after the
        logs open, while its event loop thread does other start-up work."""
        self.coordinator_epoch = self._bump_epoch()
        self._epoch_bumped = True

    async def start(self) -> None:
        self.shell.start()
        if not self._epoch_bumped:
            self.coordinator_epoch = self._bump_epoch()
        self._epoch_bumped = False
        self.state = self._new_state()
        self.snapshots.clear()
        if TXN_TOPIC in self.logs.topics:
            self.shell.start(self._load(), "txn-coordinator-load")
        else:
            self.shell.apply(self.state.recover(now_ms()))

    def _bump_epoch(self) -> int:
        """Each incarnation writes markers with a larger coordinator epoch: one more
        than the last one, and than any a partition recorded (partitions refuse a
        marker older than a producer's last one, so a lost epoch file must not make
        this incarnation look stale)."""
        path = os.path.join(self.logs.data_dir, EPOCH_FILE)
        try:
            with open(path) as f:
                epoch = int(f.read().strip() or 0) + 1
        except (FileNotFoundError, ValueError):
            epoch = 0
        recorded = max((plog.max_coordinator_epoch() for plog in list(self.logs.logs.values())),
                       default=-1)
        if recorded >= epoch:
            log.warning("%s says coordinator epoch %d, but markers of epoch %d are in the "
                        "logs: using %d", EPOCH_FILE, epoch, recorded, recorded + 1)
            epoch = recorded + 1
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{epoch}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(self.logs.data_dir, os.O_RDONLY)  # the rename survives a power loss
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return epoch

    async def stop(self) -> None:
        await self.shell.stop()
        for waiters in self._completion_waiters.values():
            for fut in waiters:
                _resolve(fut)
        self._completion_waiters.clear()

    @property
    def load_task(self) -> asyncio.Task | None:
        """The load of ``__transaction_state`` started by :meth:`start` (None: nothing
        to load)."""
        return self.shell.load_task

    def ensure_topic(self) -> None:
        self.shell.ensure_topic()

    def status(self) -> ErrorCode:
        return _E.none if self.state.loaded else _E.coordinator_load_in_progress

    # --- loading ----------------------------------------------------------------------

    async def _load(self) -> None:
        """Replay ``__transaction_state`` into the state machine: per partition its
        snapshot (the latest record of each id up to an offset), then the records
        after it; a partition without a usable snapshot is replayed whole. Each
        partition's ids are served as soon as it is loaded (the others answer
        COORDINATOR_LOAD_IN_PROGRESS meanwhile), as Kafka loads its coordinator
        partitions one by one."""
        started = time.monotonic()
        count = snapshot_rows = 0
        # Before anything is served: the open transactions recovery looks at are those
        # the logs recovered, not ones begun since (see begin_load).
        self.state.begin_load(self._open_transactions())
        queue = self._load_queue
        queue.extend(range(self.logs.topics[TXN_TOPIC].partitions))
        while queue:
            p = queue.popleft()
            plog = self.logs.get_log(TXN_TOPIC, p)
            if plog is None:
                self._recovered(p)
                continue
            view: View = {}
            self.snapshots.latest[p] = view
            start = await self._load_snapshot(plog, view)
            snapshot_rows += len(view)
            tail = 0
            async for header, recs in read_batches(plog, start):
                if header.is_control:
                    continue
                for rec in recs:
                    if rec.key is None or rec.offset < start:
                        continue
                    try:
                        tid, value = decode_key(rec.key), decode_value(rec.value)
                    except ValueError as e:
                        log.warning("%s: skipping unreadable record at offset %d: %s",
                                    plog.name, rec.offset, e)
                        continue
                    self.state.load(tid, value, p)
                    self.snapshots.loaded_record(view, tid, value)
                    tail += 1
            count += tail
            self.snapshots.since_snapshot[p] = tail
            self._recovered(p)
            await asyncio.sleep(0)  # serve others between partitions
        deferred = self.state.deferred_orphan_aborts()
        if deferred:
            log.warning("the transaction(s) of %s will be aborted (epoch bump) once their "
                        "previous transaction is completed: its completion was lost in a crash "
                        "with the next transaction's AddPartitionsToTxn record, whose data is "
                        "open", ", ".join(deferred))
        for pid, (topic, partition) in self.state.unresolved_orphans:
            log.error("%s-%d has an open transaction of producer %d that the coordinator "
                      "cannot end; see `txbroker transactions find-hanging`", topic, partition,
                      pid)
        log.info("transaction coordinator (epoch %d) loaded %d record(s) from %s in %.2fs: "
                 "%d transactional id(s) (%d from snapshots)", self.coordinator_epoch, count,
                 TXN_TOPIC, time.monotonic() - started, len(self.state.transactional_ids()),
                 snapshot_rows)
        for p in list(self.snapshots.since_snapshot):  # a long tail (an old data
            self.snapshots.maybe_snapshot(p, SNAPSHOT_MIN_RECORDS)  # directory): now

    def _recovered(self, p: int) -> None:
        """Partition ``p`` is loaded: serve its ids, finish its decided transactions."""
        effects = self.state.recover_partition(p, now_ms())
        waiters = self._partition_waiters.pop(p, None)
        if waiters is not None:
            waiters.set()
        if effects.expired:
            log.warning("aborting the transaction(s) of %s (epoch bump): their partitions hold "
                        "data of a transaction whose AddPartitionsToTxn record was not fsynced "
                        "before a crash; the transaction had not committed",
                        ", ".join(effects.expired))
        self.shell.apply(effects)

    async def _load_snapshot(self, plog: PartitionLog, view: View) -> int:
        """Load the partition's snapshot into the state machine and ``view``; the
        offset to replay from (the log start if there is no usable snapshot)."""
        return await self.snapshots.load(self.state, plog, view)

    async def write_snapshots(self) -> None:
        """Snapshot every partition with records since its last snapshot (at a clean
        shutdown, before the logs close: the next start replays nothing)."""
        await self.snapshots.write_all()

    def _open_transactions(self) -> dict[int, dict[tuple[str, int], int]]:
        """Producer id -> partitions holding its open transaction, each with the offset
        of that transaction's first batch there (for recover())."""
        out: dict[int, dict[tuple[str, int], int]] = {}
        for tp, plog in self.logs.logs.items():
            for txn in plog.open_transactions():
                out.setdefault(txn.producer_id, {})[tp] = txn.first_offset
        return out

    # --- the shell's adapter ------------------------------------------------------------

    def placement(self, request: PersistRequest) -> str:
        return request.transactional_id

    def persisted(self, now: int, write_id: int, error: int) -> Effects:
        return self.state.persisted(now, write_id, error)

    def tick(self, now: int) -> Effects:
        return self.state.tick(now)

    def next_wake(self, effects: Effects | None) -> int | None:
        # The next wake is the earliest timeout of an ongoing transaction: it moves later
        # as transactions end, several times per transaction; the shell keeps an earlier
        # timer (tick checks deadlines; one that fires early finds nothing due). The
        # effects carry the wake the state machine computed as it returned them.
        wake = effects.wake_at_ms if effects is not None else None
        return self.state.next_wake_ms() if wake is None else wake

    def on_effects(self, effects: Effects) -> None:
        for marker in effects.markers:
            self.shell.spawn(self._write_markers(marker))
        if self._completion_waiters:
            self._release_completion_waiters()

    def persist_options(self, request: PersistRequest) -> tuple[bool, str | None]:
        """(act on it once appended, its fault point).

        Two kinds of record are acted on at once (reported as persisted when appended)
        and ask for no fsync of their own. The next record of the same transactional id
        (same partition, fsynced before it is acted on), or the flusher within
        LAZY_FLUSH_MS, makes them durable.
        - CompleteCommit/CompleteAbort: nothing outside this process depends on it.
          The markers it follows are durable already. If the broker crashes before
          it is, recovery finds the PrepareCommit/PrepareAbort and writes the markers
          again, which the partitions accept.
        - AddPartitionsToTxn's Ongoing: the transaction cannot commit before it is
          durable, because its PrepareCommit comes after it in the same log. If it is
          lost while some of the transaction's data reached the disk (a power
          failure), recovery finds that data open in a partition the coordinator does
          not know of, and aborts the transaction with an epoch bump, as a timeout
          would (TransactionCoordinatorState.recover). Acknowledged produce records
          of an uncommitted transaction may always end up aborted, so the client is
          told nothing a crash can make untrue. This takes one fsync wait, and one
          fsync, off every transaction.

        With a flush policy that does not fsync every append (``flush.messages`` > 1
        for ``__transaction_state``, e.g. Kafka's default), no record waits for an
        fsync: as in Kafka, state is acted on once written (Flusher.acked).
        """
        record = request.record
        state = record.state if record is not None else None
        lazy = record is not None and (state in _COMPLETE_STATES or request.adds_data_partitions)
        return lazy, "after_prepare_durable" if state in _PREPARE_STATES else None

    def appended(self, plog: PartitionLog, request: PersistRequest) -> None:
        """Keep the partition's latest records (the next snapshot) in step with the log."""
        self.snapshots.note(plog.partition, request.transactional_id, request.record,
                            SNAPSHOT_MIN_RECORDS)

    def report(self, e: TxnEvent) -> None:
        """Log an event of the state machine for operators, and count outcomes."""
        tid, pid, epoch = e.transactional_id, e.producer_id, e.producer_epoch
        if e.kind == "completed":
            self.outcomes[e.outcome] = self.outcomes.get(e.outcome, 0) + 1
            if e.recovered:
                log.info("recovery: transaction of transactional.id %r (producer id %d, epoch "
                         "%d) completed (%s), %d marker(s) written", tid, pid, epoch,
                         e.outcome, e.markers)
            else:
                log.debug("transaction of %r (producer id %d, epoch %d) %s after %d ms, "
                          "%d marker(s)", tid, pid, epoch, e.outcome, e.age_ms, e.markers)
        elif e.kind == "timed_out":
            log.info("aborting the transaction of transactional.id %r (producer id %d, epoch "
                     "%d): open for %.1fs, past its transaction timeout; epoch bumped to %d, "
                     "so that producer is fenced", tid, pid, epoch, e.age_ms / 1000,
                     e.new_epoch)
        elif e.kind == "fenced":
            log.info("producer fenced: InitProducerId for transactional.id %r bumped producer "
                     "id %d from epoch %d to %d; its ongoing transaction (open for %.1fs) is "
                     "aborted", tid, pid, epoch, e.new_epoch, e.age_ms / 1000)
        elif e.kind == "rejected_fenced":
            log.info("producer fenced: a request of transactional.id %r with producer id %d, "
                     "epoch %d (current epoch %d) was answered PRODUCER_FENCED", tid, pid,
                     epoch, e.new_epoch)
        elif e.kind == "expired":
            log.info("transactional.id %r expired after %.0fs without a transaction "
                     "(transactional.id.expiration.ms); producer id %d, epoch %d forgotten",
                     tid, e.age_ms / 1000, pid, epoch)
        elif e.kind == "recovering":
            log.info("recovery: completing the %s of transactional.id %r (producer id %d, "
                     "epoch %d): writing %d %s marker(s)",
                     "commit" if e.outcome == "committed" else "abort", tid, pid, epoch,
                     e.markers, "COMMIT" if e.outcome == "committed" else "ABORT")

    async def _write_markers(self, marker: MarkerRequest) -> None:
        """Write one MarkerRequest and always report it to the state machine (an error
        makes it ask for the markers again), unless the coordinator stopped meanwhile:
        the next start recovers the transaction from its Prepare* record."""
        failed: set | None = set()
        try:
            error = await write_marker_request(self.logs, self.groups, self.faults, marker,
                                               failed)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not self.logs.disk.refused(e, "markers"):  # (expected errnos: a condition)
                log.exception("markers of %r (producer %d) failed; retrying",
                              marker.transactional_id, marker.producer_id)
            error, failed = _E.kafka_storage_error.value, None  # not known which: all again
        if error != _E.none.value:
            # Before the retry the machine asks for; longer while the disk is full.
            # A partition a failed fsync took offline stays so until a restart.
            offline = bool(failed) and any(
                (plog := self.logs.get_log(*tp)) is not None and plog.offline is not None
                for tp in failed)
            await asyncio.sleep(self.logs.disk.retry_delay("marker", MARKER_RETRY_BACKOFF_S,
                                                           lasting=offline))
        if not self.shell.stopped:
            self.shell.apply(self.state.markers_written(now_ms(), marker.marker_id, error,
                                                        failed or None))

    # --- front doors: what handlers and the console ask (the state machine is ours) ------

    @property
    def loaded(self) -> bool:
        """Every partition of ``__transaction_state`` is loaded."""
        return self.state.loaded

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """KIP-890 verification: per partition NONE if it is in the producer's ongoing
        transaction (else the error code to answer)."""
        return self.state.verify_partitions(transactional_id, producer_id, producer_epoch,
                                            partitions)

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, group_id: str, *, api_version: int) -> int:
        return self.state.check_txn_offset_commit(transactional_id, producer_id,
                                                  producer_epoch, group_id,
                                                  api_version=api_version)

    def describe(self, transactional_id: str) -> TxnDescription:
        return self.state.describe(transactional_id)

    def list_transactions(self, state_filters: Iterable[str] = (),
                          producer_id_filters: Iterable[int] = (), duration_filter_ms: int = -1,
                          now_ms: int | None = None) -> ListTransactionsResult:
        return self.state.list_transactions(state_filters, producer_id_filters,
                                            duration_filter_ms, now_ms)

    def transactional_ids(self) -> list[str]:
        return self.state.transactional_ids()

    def state_of(self, transactional_id: str) -> TxnState | None:
        return self.state.state_of(transactional_id)

    def inspect(self, transactional_id: str) -> dict[str, Any] | None:
        return self.state.inspect(transactional_id)

    def open_transaction_starts(self) -> list[int]:
        return self.state.open_transaction_starts()

    def state_counts(self) -> dict[str, int]:
        return self.state.state_counts()

    def transactional_ids_of(self, producer_ids: Iterable[int]) -> dict[int, str]:
        """Producer id -> the transactional id whose current producer id it is (none
        while loading)."""
        wanted = set(producer_ids)
        if not wanted or not self.state.loaded:
            return {}
        result = self.state.list_transactions((), wanted)
        return {t.producer_id: t.transactional_id for t in result.transactions
                if t.producer_id in wanted}

    def includes_partition(self, transactional_id: str, producer_id: int, topic: str,
                           partition: int) -> bool:
        """The transaction of ``transactional_id`` is the producer's and counts the
        partition (a partition's open transaction that no coordinator counts hangs)."""
        d = self.state.describe(transactional_id)
        return d.error == 0 and d.producer_id == producer_id and \
            partition in d.topics.get(topic, ())

    def take_add_turn(self, key: tuple[str, int, int]
                      ) -> tuple[asyncio.Future | None, asyncio.Future]:
        """Produce v12+: a turn for the producer's request that may add (topic,
        partition) to its transaction: (the turn of its previous such request, to await
        first, or None; this one's, to end with :meth:`end_add_turn`). Taken in arrival
        order, so the producer's later batch is not appended before an earlier one
        that awaits the add (it would be OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        mine = asyncio.get_running_loop().create_future()
        earlier = self._add_turns.get(key)
        self._add_turns[key] = mine
        return earlier, mine

    def end_add_turn(self, key: tuple[str, int, int], mine: asyncio.Future) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._add_turns.get(key) is mine:
            del self._add_turns[key]

    def expire_transactions_now(self, transactional_id: str | None = None) -> list[str]:
        """Fault injection: abort every ongoing transaction (or the one of
        ``transactional_id``) now, as its timeout would: the producer is fenced at once
        (epoch bump), the ABORT markers follow. Real timeouts are not disturbed.
        Returns the transactional ids acted on; see :meth:`wait_settled`."""
        effects = self.state.expire_now(now_ms(), transactional_id)
        self.shell.apply(effects)
        if effects.expired:
            log.warning("fault injection: expired the transaction(s) of %s now",
                        ", ".join(effects.expired))
        return effects.expired

    def abort_now(self, transactional_id: str) -> list[str]:
        """An operator's abort (the console): as :meth:`expire_transactions_now` for one
        id, counted as "aborted". The caller checked that it is Ongoing and logs who."""
        effects = self.state.expire_now(now_ms(), transactional_id, "aborted")
        self.shell.apply(effects)
        return effects.expired

    async def wait_settled(self, transactional_ids, timeout: float = 10.0) -> bool:
        """Wait (bounded) until none of the ids has an ongoing or completing transaction
        or a write in flight: e.g. the aborts of expire_transactions_now() are done
        (markers written). True if they settled in time."""
        open_states = ("Ongoing", "PrepareCommit", "PrepareAbort")
        deadline = time.monotonic() + timeout
        while True:
            busy = [tid for tid in transactional_ids
                    if (info := self.state.inspect(tid)) is not None
                    and (info["state"] in open_states or info["pending_state"] is not None)]
            if not busy:
                return True
            if time.monotonic() > deadline or self.shell.stopped:
                return False
            await asyncio.sleep(0.01)

    async def _call(self, start: Callable[[int], Effects],
                    what: Callable[[], str] | None = None) -> Any:
        result = await self.shell.call(start)
        if what is not None and log.isEnabledFor(logging.DEBUG):
            # The coordinator's answers with the state they left, to trace a client's
            # view of its transactions (docs/operations.md, debugging). ``what`` is
            # formatted only then: a repr of the partitions cost ~4 us per request.
            text = what()
            tid = text.split(" ", 1)[0]
            log.debug("%s -> %s; now %s", text, result, self.state.inspect(tid) if tid else None)
        return result

    # --- requests -------------------------------------------------------------------

    async def _partition_loaded(self, transactional_id: str) -> None:
        """While the id's partition loads: load it next and wait for it (bounded), so
        that the request is answered then rather than COORDINATOR_LOAD_IN_PROGRESS."""
        queue = self._load_queue
        if self.state.loaded or not queue or not transactional_id:
            return
        p = partition_for(transactional_id, self.logs.topics[TXN_TOPIC].partitions)
        if self.state.partition_loaded(p):
            return
        if p in queue and queue[0] != p:
            queue.remove(p)
            queue.appendleft(p)
        event = self._partition_waiters.setdefault(p, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), PARTITION_LOAD_WAIT_S)
        except TimeoutError:
            pass  # answered COORDINATOR_LOAD_IN_PROGRESS: the client retries

    async def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                               producer_id: int, producer_epoch: int,
                               api_version: int) -> InitProducerIdResult:
        self.ensure_topic()
        await self._partition_loaded(transactional_id)
        result = await self._call(lambda t: self.state.init_producer_id(
            t, now_ms(), transactional_id, txn_timeout_ms, producer_id, producer_epoch,
            api_version=api_version), lambda: f"{transactional_id} InitProducerId "
            f"v{api_version} producer {producer_id} epoch {producer_epoch}")
        return result or InitProducerIdResult(_E.coordinator_not_available.value)

    def _completing(self, transactional_id: str) -> bool:
        state = self.state.state_of(transactional_id)
        return state is not None and state.value in ("PrepareCommit", "PrepareAbort")

    def _release_completion_waiters(self) -> None:
        for tid in [t for t in self._completion_waiters if not self._completing(t)]:
            for fut in self._completion_waiters.pop(tid):
                _resolve(fut)

    async def _wait_completion(self, transactional_id: str) -> bool:
        """Wait (bounded) while the id's previous transaction is completing. True if it
        completed, so a CONCURRENT_TRANSACTIONS answer is worth retrying here."""
        if not self._completing(transactional_id):
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        waiters = self._completion_waiters.setdefault(transactional_id, [])
        waiters.append(fut)
        # A timer, not asyncio.wait_for (a task step and a future more, per transaction).
        timeout = loop.call_later(COMPLETION_WAIT_S, _resolve, fut)
        try:
            await fut
        finally:
            timeout.cancel()
            if fut in waiters:
                waiters.remove(fut)
                if not waiters and self._completion_waiters.get(transactional_id) is waiters:
                    del self._completion_waiters[transactional_id]
        return not self._completing(transactional_id)

    async def _add_with_wait(self, transactional_id: str, call, empty,
                             what: Callable[[], str]):
        # The producer's next transaction usually starts (AddPartitionsToTxn) while the
        # previous commit's markers are still being written. Clients back off ~20 ms on
        # CONCURRENT_TRANSACTIONS; waiting here for the completion (milliseconds) and
        # answering then is the same outcome, sooner. The wait comes first when the
        # previous transaction is known to be completing: asking the state machine
        # before it would only be answered CONCURRENT_TRANSACTIONS.
        await self._partition_loaded(transactional_id)
        waited = self._completing(transactional_id)
        if waited:  # (one wait in all: a timeout is answered CONCURRENT_TRANSACTIONS)
            await self._wait_completion(transactional_id)
        result = await self._call(call, what)
        if not waited and result is not None and \
                result.error == _E.concurrent_transactions.value and \
                await self._wait_completion(transactional_id):
            result = await self._call(call, lambda: what() + " (after the completion)")
        return result or empty

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]],
                             api_version: int) -> AddPartitionsResult:
        return await self._add_with_wait(
            transactional_id,
            lambda t: self.state.add_partitions(t, now_ms(), transactional_id, producer_id,
                                                producer_epoch, partitions,
                                                api_version=api_version),
            AddPartitionsResult(_E.coordinator_not_available.value, tuple(partitions)),
            lambda: f"{transactional_id} AddPartitionsToTxn v{api_version} producer "
            f"{producer_id} epoch {producer_epoch} {partitions}")

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, api_version: int) -> AddOffsetsResult:
        return await self._add_with_wait(
            transactional_id,
            lambda t: self.state.add_offsets(t, now_ms(), transactional_id, producer_id,
                                             producer_epoch, group_id, api_version=api_version),
            AddOffsetsResult(_E.coordinator_not_available.value),
            lambda: f"{transactional_id} AddOffsetsToTxn v{api_version} producer "
            f"{producer_id} epoch {producer_epoch} group {group_id!r}")

    async def add_offsets_partition(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int, group_id: str) -> int:
        """TxnOffsetCommit v5+ (transactions v2): add the group's offsets partition to
        the transaction, as Kafka's group coordinator does through its leader's
        AddPartitionsToTxn v5. The error for the request (NONE if added)."""
        tp = self._offsets_partition(group_id)
        result = await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp],
                                           ADD_PARTITIONS_FROM_LEADER)
        error = result.errors[tp]
        # TxnOffsetCommit never got the KIP-588 code.
        return _E.invalid_producer_epoch.value if error == _E.producer_fenced.value else error

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, api_version: int) -> EndTxnResult:
        if "before_end_txn" in self.faults.armed:
            await self.faults.hit("before_end_txn",
                                  expire=lambda: self.expire_transactions_now(transactional_id))
        await self._partition_loaded(transactional_id)
        result = await self._call(lambda t: self.state.end_txn(
            t, now_ms(), transactional_id, producer_id, producer_epoch, commit,
            api_version=api_version), lambda: f"{transactional_id} EndTxn v{api_version} "
            f"producer {producer_id} epoch {producer_epoch} {'commit' if commit else 'abort'}")
        return result or EndTxnResult(_E.coordinator_not_available.value)
