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
:class:`TransactionCoordinatorState` is the one front door; behind it, objects with
seams, as Kafka splits its coordinator (each module's docstring says what it owns
and who may touch it):

* :mod:`.coordinator_state`: ``TransactionCoordinatorState``, the request coordinator
  (Kafka's ``TransactionCoordinator``): the public methods, acting on what the state
  manager hands back (recovered, lost, timed-out, expired transactions).
* :mod:`.requests`: the client requests that change a transaction (InitProducerId,
  AddPartitionsToTxn / AddOffsetsToTxn, EndTxn v1 and v2), functions over the state
  manager and the writes.
* :mod:`.state_manager`: ``TransactionStateManager`` (Kafka's): the cache of ids,
  loading partition by partition and the orphans of recovery, the timer heaps of
  timeouts and expiration, producer id allocation.
* :mod:`.writes`: ``TransactionWrites``: the ``__transaction_state`` writes and marker
  requests in flight, what follows each (``persisted``, ``markers_written``: answers,
  markers, Complete*, tombstones), the fencing abort (Kafka's append callbacks and
  ``TransactionMarkerChannelManager``).
* :mod:`.metadata`: one transactional id (Kafka's ``TransactionMetadata``): the
  states and legal transitions, the per-id record, prepare/complete of a transition,
  the epoch rules and the per-id request checks, as plain functions.
* :mod:`.views`: read-only answers (DescribeTransactions, ListTransactions, the
  produce/TxnOffsetCommit verification, introspection).
* :mod:`.results`: the data types in and out (config, results, Effects, requests to
  the shell, events, admin views).

This module holds the shell's contract (above) and re-exports every public name.
"""

from __future__ import annotations

from txbroker.coordinator.transaction.coordinator_state import TransactionCoordinatorState
from txbroker.coordinator.transaction.metadata import (
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TxnState,
    check_transition,
)
from txbroker.coordinator.transaction.results import (
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
    TxnConfig,
    TxnDescription,
    TxnEvent,
    TxnListing,
    coordinator_append_error,
)

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
