"""The transaction coordinator (KIP-98; transactions v1 and v2) as a sans-IO state machine.

Plain code over plain data: no asyncio, no sockets, no files, no clock. Time
comes in as ``now_ms`` arguments. The semantics follow Apache Kafka's
``TransactionCoordinator`` / ``TransactionMetadata`` / ``TransactionStateManager``
with transactions v1 (what kafka-python 3.x, aiokafka and librdkafka use) and
transactions v2 (KIP-890 part 2, what Java 4.x producers use when the broker
finalizes ``transaction.version`` 2), KIP-360 (InitProducerId v3+ with
the producer's id/epoch), KIP-588 (PRODUCER_FENCED, mapped back to
INVALID_PRODUCER_EPOCH for old request versions) and the KIP-664 admin views
(DescribeTransactions, ListTransactions v0-1).

How the async shell drives it
-----------------------------
* **Load first, partition by partition.** A new machine is *loading* every
  partition of ``__transaction_state`` (``partitions``; ``txn_partition(id)`` is an
  id's). The shell calls :meth:`begin_load` with the open transactions the logs
  hold, then per partition feeds its records to :meth:`replay` (in log order; a
  compacted log is fine) and calls :meth:`recover_partition`. A request for an id
  whose partition is still loading is answered COORDINATOR_LOAD_IN_PROGRESS, the
  ids of loaded partitions are served (Kafka loads each coordinator partition on
  its own the same way); ListTransactions waits for all of them, as Kafka's.
  :meth:`recover` is the one-call form (every partition at once). A crash is
  handled the same way: throw the machine away, build a fresh one, replay.
* **Tokens.** ``init_producer_id``, ``add_partitions``, ``add_offsets`` and
  ``end_txn`` take an opaque, hashable, non-None ``token`` standing for the
  request. The answer is either in the returned :class:`Effects` or, when it
  depends on a write, in the Effects of the later :meth:`persisted` call for
  that write. Every token is answered exactly once (:meth:`held_tokens` lists
  the ones still waiting).
* **Durable before acting.** ``Effects.persist`` lists ``__transaction_state``
  records (:class:`PersistRequest`) to append durably. Every state change is a
  write, and nothing that depends on it happens before the shell reports
  ``persisted(now_ms, write_id, error)``: the answer to the request, the next
  step of the transaction, the markers. The shell appends records in the
  order they were requested and calls ``persisted`` once per request (calls may
  come in any order). A transactional id has at most one write in flight. On
  failure the shell passes the coordinator error the client should see
  (:func:`coordinator_append_error` maps storage errors the way Kafka does).
  A failure should mean "not durable"; an ambiguous failure (the record may
  still show up on replay) is tolerated the way Kafka tolerates it.
* **EndTxn ordering.** PrepareCommit/PrepareAbort is persisted -> (in the Effects
  of that ``persisted`` call) the EndTxn answer NONE *and* a
  :class:`MarkerRequest` -> the shell writes the COMMIT/ABORT control batches
  into every listed partition and reports ``markers_written(now_ms, marker_id,
  error)`` once all are durable -> CompleteCommit/CompleteAbort is requested as
  a PersistRequest -> ``persisted``. The answer and the markers may go out in
  either order. A transaction without partitions skips the markers.
* **Markers.** A failed marker write (``error != NONE``) is retried: that call's
  Effects carry a new MarkerRequest for the same transaction (Kafka retries
  forever; the shell may back off before writing). Writing a marker twice is
  harmless (a partition without an open transaction for the producer ignores
  it); a partition that no longer exists counts as written (Kafka skips
  partitions whose topic was deleted). Markers carry ``coordinator_epoch``: the
  shell should construct each incarnation with a larger one: a partition refuses
  a marker older than the producer's last one there
  (TRANSACTION_COORDINATOR_FENCED). A failed CompleteCommit/CompleteAbort write
  is retried the same way (a new PersistRequest in that call's Effects).
* **Timers.** ``Effects.wake_at_ms`` (= :meth:`next_wake_ms`) is the next
  absolute time :meth:`tick` must be called: transactions Ongoing for longer
  than their timeout are aborted with an epoch bump (Kafka's
  abortTimedOutTransactions), idle transactional ids expire
  (``transactional.id.expiration.ms``). Like Kafka's periodic tasks, each of
  the two checks runs at most once per its interval
  (``abort_timed_out_check_interval_ms``, ``remove_expired_check_interval_ms``);
  a check runs at the first tick at which something is due. Only tick fires
  timers.
* **Expire now** (fault injection, for testing applications): :meth:`expire_now`
  aborts ongoing transactions at once, exactly as their timeout would (epoch
  bump, PrepareAbort, markers, CompleteAbort), without touching the timers.

Transactions v2
---------------
The version is decided per request, as Kafka does it (TransactionVersion's
``transactionVersionForEndTxn`` / ``...ForAddPartitionsToTxn``): EndTxn v5+ and
AddPartitionsToTxn v4+ (what a partition leader sends for Produce v12+ and
TxnOffsetCommit v5+: the implicit add) are version 2; older requests are version
0, so clients of transactions v1 keep their rules next to v2 producers. A v2
EndTxn bumps the producer epoch in its PrepareCommit/PrepareAbort record (the
markers carry the bumped epoch, and a partition refuses anything older) and
answers with the new id/epoch; when the epoch is exhausted it also allocates the
next producer id, which the transaction continues with at epoch 0 once it
completes. A v2 abort is also accepted with no transaction open (Empty,
CompleteCommit, CompleteAbort: an implicit add may have failed), and an EndTxn
retry carries the epoch before the bump. Aborts the coordinator starts itself
(timeout, fencing InitProducerId, recovery of lost records) bump the epoch once,
whatever the version, as Kafka 4.3.1 does (tests/differential/test_transactions_v2.py);
when that bump takes Short.MaxValue they too allocate the next producer id, which the
id continues with at epoch 0 (Kafka 4.3.1 ends them through its v2 path when the
broker finalizes transaction.version 2), so that no producer is ever handed
Short.MaxValue: a late EndTxn v5 abort of the producer (the epoch before the bump) is
answered with the next id at 0 (docs/transactions.md, "Epoch exhaustion").

What belongs where (the coordinator does not see these)
--------------------------------------------------------
* AddPartitionsToTxn v0-3: topic authorization and existence are checked by the
  handler first (UNKNOWN_TOPIC_OR_PARTITION / TOPIC_AUTHORIZATION_FAILED for the
  offending partitions, OPERATION_NOT_ATTEMPTED for the rest), then this
  machine is asked. AddOffsetsToTxn: the handler checks group authorization;
  the machine adds the group's ``__consumer_offsets`` partition
  (``partition_for_group``).
* TxnOffsetCommit: validated by the *group* coordinator (group, generation,
  member; KIP-447), and by the ``__consumer_offsets`` partition's producer
  state (epoch fencing) when the transactional batch is appended; the offsets
  stay pending until the marker. The transaction coordinator only answers
  whether the offsets partition is part of the producer's ongoing transaction
  (:meth:`check_txn_offset_commit`, Kafka >= 3.6's verification, KIP-890 part
  1); without that check a TxnOffsetCommit without AddOffsetsToTxn would leave
  offsets pending forever. :meth:`verify_partitions` is the same check for the
  produce path.
* KIP-664 "abort hanging transaction": the admin client sends WriteTxnMarkers
  (ABORT, producer id/epoch from DescribeProducers, coordinator epoch) straight
  to the partition leader; the transaction coordinator is not involved.
* Producer ids come from ``allocate_producer_id`` (a durable block allocator in
  the shell, so ids are never reused across restarts).

Where the code is
-----------------
:class:`TransactionCoordinatorState` is one object (all transactional ids, the
writes and markers in flight, the timers) put together from one mixin per
responsibility, as Kafka splits its coordinator:

* :mod:`.metadata`: one transactional id (Kafka's ``TransactionMetadata``): the
  states and legal transitions, the per-id record, prepare/complete of a transition,
  the epoch rules and the per-id request checks, as plain functions.
* :mod:`.loading`: loading ``__transaction_state`` partition by partition, recovery
  (``TransactionStateManager``'s load).
* :mod:`.timers`: transaction timeouts, transactional id expiration, ``expire_now``
  (``TransactionStateManager``'s periodic tasks).
* :mod:`.requests`: the request entry points (``TransactionCoordinator``'s handlers),
  produce/TxnOffsetCommit verification, the admin views.
* :mod:`.completions`: ``persisted`` and ``markers_written``, the marker requests.
* :mod:`.results`: the data types in and out (config, results, Effects, requests to
  the shell, events, admin views).

This module holds the combined class (its state, the shared helpers, introspection)
and re-exports every public name.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from txbroker.coordinator.transaction.completions import CompletionsMixin
from txbroker.coordinator.transaction.loading import LoadingMixin
from txbroker.coordinator.transaction.metadata import (
    _PREPARE,
    _S,
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TxnState,
    _Transit,
    _Txn,
    _Write,
    check_transition,
    prepare_transition,
)
from txbroker.coordinator.transaction.records import TxnLogValue, encode_key, encode_value
from txbroker.coordinator.transaction.requests import RequestsMixin
from txbroker.coordinator.transaction.results import (
    _E,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddOffsetsResult,
    AddPartitionsResult,
    Effects,
    EndTxnResult,
    InitProducerIdResult,
    ListTransactionsResult,
    MarkerRequest,
    PersistRequest,
    Result,
    Token,
    TopicPartition,
    TxnConfig,
    TxnDescription,
    TxnEvent,
    TxnListing,
    _client_error,
    _Fx,
    coordinator_append_error,
)
from txbroker.coordinator.transaction.timers import TimersMixin

__all__ = [
    "TxnState",
    "VALID_PREVIOUS_STATES",
    "IllegalTransitionError",
    "check_transition",
    "TxnConfig",
    "InitProducerIdResult",
    "AddPartitionsResult",
    "AddOffsetsResult",
    "EndTxnResult",
    "PersistRequest",
    "MarkerRequest",
    "Effects",
    "TxnEvent",
    "TxnDescription",
    "TxnListing",
    "ListTransactionsResult",
    "TransactionCoordinatorState",
    "coordinator_append_error",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
]


class TransactionCoordinatorState(LoadingMixin, TimersMixin, RequestsMixin, CompletionsMixin):
    """All transactional ids of this coordinator (see the module docstring)."""

    def __init__(
        self,
        config: TxnConfig,
        allocate_producer_id: Callable[[], int],
        partition_for_group: Callable[[str], TopicPartition],
        *,
        coordinator_epoch: int = 0,
        txn_first_offset: Callable[[int, TopicPartition], int | None] | None = None,
        partitions: int = 1,
        txn_partition: Callable[[str], int] | None = None,
    ) -> None:
        """``allocate_producer_id()`` returns a fresh producer id (never reused, also
        across restarts). Should it raise, the request is answered
        COORDINATOR_LOAD_IN_PROGRESS (retriable: Kafka's answer when no producer id
        block is available) and nothing changes.

        ``partition_for_group(group_id)`` is the group's ``__consumer_offsets``
        partition (AddOffsetsToTxn). ``coordinator_epoch`` goes into every marker.

        ``txn_first_offset(producer_id, partition)`` is the offset of the first batch
        of the producer's open transaction in that partition, or None (none open). It
        is asked when a transaction is decided, for the PrepareCommit/PrepareAbort
        record, so that recovery can tell this transaction's data from a later one's
        (see :meth:`recover`). Without it, records carry no first offsets and recovery
        trusts the partition list alone.

        ``partitions``: how many ``__transaction_state`` partitions load;
        ``txn_partition(transactional_id)`` is the one an id lives in (default: all in
        partition 0).
        """
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self._allocate_producer_id = allocate_producer_id
        self._partition_for_group = partition_for_group
        self._txn_first_offset = txn_first_offset
        self._txns: dict[str, _Txn] = {}
        self._partition_of: Callable[[str], int] = txn_partition or (lambda _tid: 0)
        self._loading: set[int] = set(range(partitions))
        self._loaded = not self._loading
        # producer id -> its open transactions (begin_load), until a loaded partition's
        # transaction claims them; what is left once all are loaded is unresolved.
        self._open_by_pid: dict[int, dict[TopicPartition, int | None]] = {}
        # The ids loaded into each partition still loading (recover_partition's work).
        self._members: dict[int, dict[str, None]] = {}
        # (producer id, partition) open transactions recover() could not abort.
        self.unresolved_orphans: list[tuple[int, TopicPartition]] = []
        self._writes: dict[int, _Write] = {}
        self._write_ids = itertools.count(1)
        self._markers: dict[int, _Txn] = {}
        self._marker_ids = itertools.count(1)
        # Per check ("timeout", "expire"): a heap of (deadline, seq, txn) entries,
        # validated lazily when popped, and when the check last ran.
        self._heaps: dict[str, list[tuple[int, int, _Txn]]] = {"timeout": [], "expire": []}
        self._last_check: dict[str, int | None] = {"timeout": None, "expire": None}
        self._seq = itertools.count()

    # ==============================================================================
    # Introspection (admin endpoints, tests)
    # ==============================================================================

    def transactional_ids(self) -> list[str]:
        return sorted(self._txns)

    def state_of(self, transactional_id: str) -> TxnState | None:
        txn = self._txns.get(transactional_id)
        return txn.state if txn is not None else None

    def record_of(self, transactional_id: str) -> TxnLogValue | None:
        """The current (completed) metadata as a record, None if unknown."""
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_epoch < 0:
            return None
        return txn.to_transit().record()

    def inspect(self, transactional_id: str) -> dict[str, Any] | None:
        txn = self._txns.get(transactional_id)
        if txn is None:
            return None
        return {
            "transactional_id": txn.transactional_id,
            "state": txn.state.value,
            "pending_state": txn.pending.value if txn.pending is not None else None,
            "producer_id": txn.producer_id,
            "previous_producer_id": txn.prev_producer_id,
            "next_producer_id": txn.next_producer_id,
            "producer_epoch": txn.producer_epoch,
            "last_producer_epoch": txn.last_producer_epoch,
            "timeout_ms": txn.timeout_ms,
            "partitions": sorted(txn.partitions),
            "txn_start_ms": txn.start_ms,
            "last_update_ms": txn.last_update_ms,
            "failed_epoch_fence": txn.failed_epoch_fence,
            "markers_in_flight": txn.marker_id is not None,
            "expire_requested": txn.expire_requested,
            "tombstone_maybe_written": txn.tombstone_maybe_written,
            "orphans": sorted(txn.orphans),
            "client_transaction_version": txn.tv,
        }

    def open_transaction_starts(self) -> list[int]:
        """Start times (ms) of the transactions not yet complete (Ongoing, Prepare*)."""
        return [txn.start_ms for txn in self._txns.values()
                if txn.state is _S.ONGOING or txn.state in _PREPARE]

    def state_counts(self) -> dict[str, int]:
        """Transactional ids per state (DescribeTransactions' state names)."""
        out: dict[str, int] = {}
        for txn in self._txns.values():
            out[txn.state.value] = out.get(txn.state.value, 0) + 1
        return out

    def held_tokens(self) -> set[Token]:
        """Tokens whose answer waits for a write."""
        return {w.token for w in self._writes.values() if w.token is not None}

    def pending_write_ids(self) -> list[int]:
        return list(self._writes)

    def pending_marker_ids(self) -> list[int]:
        return list(self._markers)

    # ==============================================================================
    # Helpers shared by the mixins
    # ==============================================================================

    def _prepare(self, txn: _Txn, target: TxnState, **changes: Any) -> _Transit:
        """:func:`.metadata.prepare_transition` with this coordinator's first offsets."""
        return prepare_transition(txn, target, self._first_offsets, **changes)

    def _write(self, fx: _Fx, w: _Write) -> None:
        write_id = next(self._write_ids)
        self._writes[write_id] = w
        tid = w.txn.transactional_id
        if w.kind == "dead":
            fx.persist.append(PersistRequest(write_id, tid, encode_key(tid), None, None))
            return
        record = w.transit.record()
        w.acted_on_append = w.kind == "complete" or (
            w.api == "add_partitions" and not w.txn.tombstone_maybe_written)
        fx.persist.append(PersistRequest(write_id, tid, encode_key(tid), encode_value(record), record,
                                         adds_data_partitions=w.acted_on_append and w.kind == "add"))

    def _note_fenced(self, fx: _Fx, error: int, tid: str, producer_id: int,
                     producer_epoch: int) -> None:
        if error == _E.producer_fenced.value:
            txn = self._txns.get(tid)
            fx.events.append(TxnEvent("rejected_fenced", tid, producer_id, producer_epoch,
                                      new_epoch=txn.producer_epoch if txn else -1))

    def _first_offsets(self, txn: _Txn) -> dict[TopicPartition, int] | None:
        if self._txn_first_offset is None:
            return None
        out = {}
        for tp in sorted(txn.partitions):
            first = self._txn_first_offset(txn.producer_id, tp)
            if first is not None:
                out[tp] = first
        return out

    def _allocate(self) -> int | None:
        try:
            pid = self._allocate_producer_id()
        except Exception:  # the allocator does I/O in the shell; see __init__
            return None
        if type(pid) is not int or pid < 0:
            raise ValueError(f"allocate_producer_id returned {pid!r}")
        return pid

    def _result(self, api: str, api_version: int, error: int,
                partitions: tuple[TopicPartition, ...]) -> Result:
        error = _client_error(api, api_version, error)
        if api == "add_partitions":
            return AddPartitionsResult(error, partitions)
        if api == "add_offsets":
            return AddOffsetsResult(error)
        if api == "end_txn":
            return EndTxnResult(error)
        return InitProducerIdResult(error)

    def _finish(self, fx: _Fx) -> Effects:
        return Effects(fx.responses, fx.persist, fx.markers, self.next_wake_ms(), fx.expired,
                       fx.events)
