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
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.coordinator.transaction.records import (
    PERSISTED_STATES,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
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

Token = Hashable
TopicPartition = tuple[str, int]

_E = ErrorCode
NONE = _E.none.value
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 32767  # Short.MaxValue


def _epoch_exhausted(epoch: int) -> bool:
    # Kafka keeps Short.MaxValue for the coordinator, so it can always fence a producer.
    return epoch >= _MAX_EPOCH - 1


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_S = TxnState
# Kafka's TransactionState.validPreviousStates. The edges Empty/CompleteCommit/
# CompleteAbort -> PrepareAbort are transactions v2 only (an abort with nothing
# open); end_txn takes them only for a v2 request.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY,
                                 _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
_PREPARE = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
_COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
_IDLE = (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)  # Kafka's isExpirationAllowed
_STATE_BY_ID = {i: TxnState(name) for name, i in PERSISTED_STATES.items()}
_NO_PARTITIONS: frozenset = frozenset()


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's table forbids, or a transition applied inconsistently: a bug."""


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransitionError(f"illegal transition {current.value} -> {target.value}")


# Below these request versions PRODUCER_FENCED is reported as INVALID_PRODUCER_EPOCH (KIP-588).
_FENCED_SINCE = {
    "init_producer_id": 4,
    "add_partitions": 2,
    "add_offsets": 2,
    "end_txn": 2,
}


def _client_error(api: str, api_version: int, error: int) -> int:
    if error == _E.producer_fenced.value and api_version < _FENCED_SINCE[api]:
        return _E.invalid_producer_epoch.value
    return error


def _outcome_of(txn: _Txn) -> str:
    # After a replay the reason is not known: the decision is.
    if txn.outcome is not None:
        return txn.outcome
    return "committed" if _S.PREPARE_COMMIT in (txn.state, txn.pending) else "aborted"


def coordinator_append_error(storage_error: int) -> int:
    """Kafka's mapping of a failed ``__transaction_state`` append to the client's error."""
    if storage_error in (
        _E.unknown_topic_or_partition.value,
        _E.not_enough_replicas.value,
        _E.not_enough_replicas_after_append.value,
        _E.request_timed_out.value,
    ):
        return _E.coordinator_not_available.value
    if storage_error in (_E.not_leader_or_follower.value, _E.kafka_storage_error.value):
        return _E.not_coordinator.value
    if storage_error in (_E.message_too_large.value, _E.record_list_too_large.value):
        return _E.unknown_server_error.value
    return storage_error


@dataclass(frozen=True)
class TxnConfig:
    transaction_max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_check_interval_ms: int = 10000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_check_interval_ms: int = 3600000


# -- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class InitProducerIdResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitionsResult:
    """AddPartitionsToTxn v0-3 answers per partition; the coordinator's error is the same
    for every requested partition (an empty request gets an empty answer)."""

    error: int
    partitions: tuple[TopicPartition, ...]

    @property
    def errors(self) -> dict[TopicPartition, int]:
        return dict.fromkeys(self.partitions, self.error)


@dataclass(frozen=True)
class AddOffsetsResult:
    error: int


@dataclass(frozen=True)
class EndTxnResult:
    """EndTxn's answer; v5 (transactions v2) also carries the producer id/epoch the
    producer continues with (-1/-1 otherwise and on errors)."""

    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


Result = InitProducerIdResult | AddPartitionsResult | AddOffsetsResult | EndTxnResult


@dataclass(frozen=True)
class PersistRequest:
    """A ``__transaction_state`` record to append durably, then report with persisted()."""

    write_id: int
    transactional_id: str
    key: bytes
    value: bytes | None  # None: a tombstone (expired transactional id)
    record: TxnLogValue | None  # ``value`` decoded, for logging and tests
    # AddPartitionsToTxn's Ongoing record. The shell may act on it (report persisted())
    # once it is appended, before it is fsynced: the transaction's PrepareCommit comes
    # after it in the same log, so it cannot commit without it. If the record is lost
    # while data of the transaction reached the partitions, recovery must be told
    # (recover()'s open_transactions) and aborts the transaction. (False for the adds of an
    # id whose tombstone write failed, until a record of it is durable: the tombstone may
    # be the id's last durable record, and recovery would not know the producer id.)
    adds_data_partitions: bool = False


@dataclass(frozen=True)
class MarkerRequest:
    """Write COMMIT/ABORT control batches for a producer into partitions, then markers_written()."""

    marker_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]  # sorted
    coordinator_epoch: int
    # The transaction's version (WriteTxnMarkers v2, KIP-1228): at 2 a partition
    # takes the marker only with an epoch above the producer's there.
    transaction_version: int = 0


@dataclass(frozen=True)
class TxnEvent:
    """What the shell tells operators about (log lines, metrics); no effect on state.

    kind:
    * ``timed_out``: an Ongoing transaction passed its timeout and is being aborted
      with an epoch bump (``age_ms``: since it started; ``new_epoch``: the bump).
    * ``fenced``: InitProducerId of a new producer instance found the id's
      transaction Ongoing: aborted with an epoch bump (``new_epoch``).
    * ``rejected_fenced``: a request with an old epoch was answered PRODUCER_FENCED
      (``new_epoch``: the current one).
    * ``expired``: an idle transactional id was removed (``age_ms``: idle time).
    * ``recovering``: recovery found a decided transaction (PrepareCommit/PrepareAbort)
      and writes its ``markers`` again.
    * ``completed``: Complete* is durable (``outcome``, ``markers`` written,
      ``age_ms``: duration, ``recovered``: finished by recovery).
    """

    kind: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    age_ms: int = -1
    new_epoch: int = -1
    outcome: str = ""  # committed | aborted | timed_out | fenced
    markers: int = 0
    recovered: bool = False


@dataclass
class Effects:
    responses: dict[Token, Result] = field(default_factory=dict)
    persist: list[PersistRequest] = field(default_factory=list)
    markers: list[MarkerRequest] = field(default_factory=list)
    wake_at_ms: int | None = None
    # expire_now(): the transactional ids acted on (aborted now, or once their write in flight is done)
    expired: list[str] = field(default_factory=list)
    events: list[TxnEvent] = field(default_factory=list)


@dataclass(frozen=True)
class TxnDescription:
    """DescribeTransactions, one transactional id (numeric defaults as Kafka's message)."""

    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    start_time_ms: int = 0
    topics: dict[str, list[int]] = field(default_factory=dict)  # topic -> sorted partitions


@dataclass(frozen=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class ListTransactionsResult:
    error: int
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[TxnListing] = field(default_factory=list)


# -- internal data -------------------------------------------------------------------


@dataclass(frozen=True)
class _Transit:
    """Kafka's TxnTransitMetadata: the metadata a pending transition will install."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    # Prepare* only: partition -> offset of the transaction's first batch there.
    first_offsets: dict[TopicPartition, int] | None = field(default=None, hash=False)
    tv: int = 0  # Kafka's clientTransactionVersion of the transition

    def record(self) -> TxnLogValue:
        return TxnLogValue(
            producer_id=self.producer_id,
            previous_producer_id=self.prev_producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state.value,
            partitions=self.partitions,
            txn_start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
            txn_first_offsets=self.first_offsets,
            client_transaction_version=self.tv,
        )


@dataclass(eq=False, slots=True)
class _Txn:
    """Kafka's TransactionMetadata for one transactional id."""

    transactional_id: str
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    # The state a prepared transition (a write in flight, or markers then a write)
    # leads to; blocks every other transition meanwhile.
    pending: TxnState | None = None
    # A fence's PrepareAbort write failed: the bumped epoch stays in memory, never
    # returned to a client, and the next fence does not bump again.
    failed_epoch_fence: bool = False
    complete: _Transit | None = None  # the Complete* transit awaiting the markers
    marker_id: int | None = None  # the markers in flight
    marker_partitions: frozenset[TopicPartition] = frozenset()  # ... and their partitions
    # expire_now() found a write in flight: abort once it is done, if still Ongoing then.
    expire_requested: bool = False
    # A tombstone write (expiration) failed: it may be in the log all the same (an
    # ambiguous failure), after every record of the id, and recovery would then not know
    # the id's producer id. Until a record of the id is durable after it, the shell may
    # not act on an Ongoing record before it is durable (PersistRequest
    # adds_data_partitions): data written on the strength of one a power failure then
    # takes could not be aborted (an orphan of an unknown producer id).
    tombstone_maybe_written: bool = False
    # Partitions holding this producer's data of a later transaction whose records were
    # lost with the unsynced completion of this one; aborted once this one completes.
    orphans: frozenset = frozenset()
    # Of the Prepare* record (see _Transit); None in other states and in old records.
    first_offsets: dict[TopicPartition, int] | None = None
    # Why the decided transaction ends (TxnEvent.outcome); None after a replay.
    outcome: str | None = None
    recovering: bool = False  # recovery is completing it (TxnEvent.recovered)
    marker_count: int = 0  # partitions the decided transaction's markers go to
    tv: int = 0  # client transaction version of the last transition (Kafka's)

    def to_transit(self) -> _Transit:
        return _Transit(
            self.producer_id, self.prev_producer_id, self.next_producer_id, self.producer_epoch,
            self.last_producer_epoch, self.timeout_ms, self.state, self.partitions, self.start_ms,
            self.last_update_ms, self.first_offsets, self.tv,
        )


@dataclass(eq=False)
class _Write:
    kind: str  # "init" | "add" | "prepare" | "complete" | "dead"
    txn: _Txn
    transit: _Transit
    token: Token | None = None
    api: str = ""  # the request kind the token belongs to
    api_version: int = 0
    partitions: tuple[TopicPartition, ...] = ()  # AddPartitionsToTxn: as requested
    fence: bool = False  # a PrepareAbort that fences the producer (InitProducerId on Ongoing, timeout)
    acted_on_append: bool = False  # persisted() may come before the record is durable


class _Fx:
    """Accumulates one call's effects."""

    def __init__(self) -> None:
        self.responses: dict[Token, Result] = {}
        self.persist: list[PersistRequest] = []
        self.markers: list[MarkerRequest] = []
        self.expired: list[str] = []
        self.events: list[TxnEvent] = []

    def respond(self, token: Token, result: Result) -> None:
        assert token not in self.responses, f"token {token!r} answered twice"
        self.responses[token] = result


class TransactionCoordinatorState:
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
    # Loading
    # ==============================================================================

    def replay(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        """Load one ``__transaction_state`` record (before its partition's
        :meth:`recover_partition`); ``partition``: the one it was read from (default:
        the id's, computed).

        Raises ValueError on a malformed record (the shell decides whether to skip it).
        """
        self.load(decode_key(key), decode_value(value), partition)

    def _loading_into(self, tid: str, partition: int | None, tombstone: bool = False) -> None:
        """Note ``tid`` as an id of its partition (which must be loading), in the order
        of ``_txns`` (a tombstone removes it; loading it again puts it last)."""
        p = self._partition_of(tid) if partition is None else partition
        members = self._members.get(p)  # present only while p loads (recovery pops it)
        if members is None:
            if p not in self._loading:
                raise RuntimeError("replay() after recover(): build a fresh machine to reload")
            members = self._members[p] = {}
        if tombstone:
            members.pop(tid, None)
        else:
            members.setdefault(tid)

    def load_row(self, row: list, partition: int | None = None) -> None:
        """Load one row of a coordinator snapshot (``snapshot.row_of``'s layout): the
        fast path of a load, a record already validated when it was first written.
        Raises ValueError on a row that does not fit."""
        self._loading_into(row[0], partition)
        (tid, pid, prev, nxt, epoch, last_epoch, timeout, state_id, parts, start, update,
         firsts) = row[:12]
        tv = row[12] if len(row) > 12 else 0  # rows from before transactions v2: 0
        try:
            state = _STATE_BY_ID[state_id]
            partitions = frozenset((t, p) for t, p in parts) if parts else _NO_PARTITIONS
            first_offsets = None if firsts is None else {(t, p): o for t, p, o in firsts}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"snapshot row of {tid!r}: {e!r}") from None
        if type(tv) is not int:
            raise ValueError(f"snapshot row of {tid!r}: client transaction version {tv!r}")
        self._txns[tid] = _Txn(tid, pid, prev, nxt, epoch, last_epoch, timeout, state,
                               partitions, start, update, first_offsets=first_offsets, tv=tv)

    def load(self, tid: str, rec: TxnLogValue | None, partition: int | None = None) -> None:
        """:meth:`replay` of a record already decoded (a coordinator snapshot's row)."""
        self._loading_into(tid, partition, rec is None)
        if rec is None:
            self._txns.pop(tid, None)
            return
        self._txns[tid] = _Txn(
            transactional_id=tid,
            producer_id=rec.producer_id,
            prev_producer_id=rec.previous_producer_id,
            next_producer_id=rec.next_producer_id,
            producer_epoch=rec.producer_epoch,
            last_producer_epoch=rec.last_producer_epoch,
            timeout_ms=rec.timeout_ms,
            state=TxnState(rec.state),
            partitions=rec.partitions,
            start_ms=rec.txn_start_ms,
            last_update_ms=rec.last_update_ms,
            first_offsets=rec.txn_first_offsets,
            tv=rec.client_transaction_version,
        )

    def recover(self, now_ms: int,
                open_transactions: Mapping[int, Mapping[TopicPartition, int | None]
                                           | Iterable[TopicPartition]] | None = None) -> Effects:
        """End the load of every partition still loading at once: :meth:`begin_load`
        then :meth:`recover_partition` for each (their Effects together)."""
        if self._loaded:
            raise RuntimeError("recover() called twice")
        self.begin_load(open_transactions)
        fx = _Fx()
        for p in sorted(self._loading):
            self._recover_partition(fx, p, now_ms)
        return self._finish(fx)

    def begin_load(self, open_transactions: Mapping[int, Mapping[TopicPartition, int | None]
                                                    | Iterable[TopicPartition]] | None = None
                   ) -> None:
        """Before the first :meth:`recover_partition`: the open transactions the
        partition logs recovered (taken before any request is served, so that none
        of them is a transaction begun since).

        ``open_transactions``: producer id -> the partitions holding an open
        transaction of that producer (data with no COMMIT/ABORT marker after it),
        as the partition logs recovered them, each with the offset of that open
        transaction's first batch (a plain list of partitions: offsets unknown). A
        partition the producer's transaction here does not include is an orphan: the AddPartitionsToTxn
        record that added it was acted on before it was fsynced and then lost (a
        power failure), while some of the data reached the disk. The transaction
        cannot have committed (its PrepareCommit would follow that record), so it is
        aborted as a timeout would abort it: epoch bump (the producer is fenced),
        PrepareAbort, ABORT markers into every partition, orphans included. If the
        durable record is a PrepareCommit/PrepareAbort, its unsynced completion was
        lost with the next transaction's records: that transaction is aborted the
        same way once recovery has completed the decided one (in the Effects of the
        Complete* write's persisted()). That next transaction may have written to a
        partition of the decided one too, after the decided one's durable marker:
        there the open transaction's first offset differs from the one the Prepare*
        record holds, so that partition is an orphan as well and gets no second
        marker of the decided transaction (which would end the wrong one). Orphans of a producer id unknown here are
        listed in :attr:`unresolved_orphans` for the shell to report once every
        partition is loaded; they are what ``find-hanging`` shows.
        """
        for pid, entries in (open_transactions or {}).items():
            self._open_by_pid[pid] = (
                {(str(t), int(p)): o for (t, p), o in entries.items()} if isinstance(entries, Mapping)
                else {(str(t), int(p)): None for t, p in entries})

    def recover_partition(self, partition: int, now_ms: int) -> Effects:
        """End the load of one partition: serve its ids, and finish each of its
        PrepareCommit/PrepareAbort (request its markers again, then Complete*), like
        Kafka after loading a partition of ``__transaction_state``; abort the
        transactions of its ids that lost their AddPartitionsToTxn record (see
        :meth:`begin_load`)."""
        if partition not in self._loading:
            raise RuntimeError(f"partition {partition} is not loading")
        fx = _Fx()
        self._recover_partition(fx, partition, now_ms)
        return self._finish(fx)

    def _recover_partition(self, fx: _Fx, partition: int, now_ms: int) -> None:
        self._loading.discard(partition)
        txns = self._txns
        mine = [txns[tid] for tid in self._members.pop(partition, ())]
        if self._open_by_pid:
            self._abort_orphans(fx, now_ms, mine)
        for txn in mine:
            if txn.state in _PREPARE and txn.pending is None:
                marked = txn.partitions - txn.orphans
                txn.recovering = True
                fx.events.append(TxnEvent("recovering", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch, outcome=_outcome_of(txn),
                                          markers=len(marked)))
                self._send_markers(fx, txn, self._prepare_complete(txn, now_ms), marked)
        self._arm_all(mine)
        if not self._loading:
            self._loaded = True
            for pid in sorted(self._open_by_pid):
                self.unresolved_orphans.extend((pid, tp) for tp in sorted(self._open_by_pid[pid]))
            self._open_by_pid.clear()

    def _ready(self, transactional_id: str) -> bool:
        """Is the id's partition loaded (its requests served)?"""
        return self._loaded or self._partition_of(transactional_id) not in self._loading

    def partition_loaded(self, partition: int) -> bool:
        return partition not in self._loading

    def _arm_all(self, txns: Iterable[_Txn]) -> None:
        """:meth:`_arm` for these transactions at once (the end of a partition's load:
        one heapify instead of a push per id, the same deadlines)."""
        txns = list(txns)
        for kind, heap in self._heaps.items():
            entries = [(deadline, next(self._seq), txn) for txn in txns
                       if (deadline := self._deadline(kind, txn)) is not None]
            if len(entries) * 8 < len(heap):
                # A partition's few into a big heap (the earlier partitions'): pushes,
                # not a heapify of everything again per partition.
                for entry in entries:
                    heapq.heappush(heap, entry)
            else:
                heap.extend(entries)
                heapq.heapify(heap)

    def deferred_orphan_aborts(self) -> list[str]:
        """Transactional ids whose next transaction recovery aborts once their decided
        one is completed (see :meth:`recover`)."""
        return sorted(tid for tid, txn in self._txns.items() if txn.orphans)

    def _abort_orphans(self, fx: _Fx, now: int, txns: list[_Txn]) -> None:
        """The open transactions of these (just loaded) transactions' producer ids:
        those their durable record does not cover are orphans (see :meth:`begin_load`)."""
        open_by_pid = self._open_by_pid
        by_pid = {txn.producer_id: txn for txn in txns if txn.producer_id in open_by_pid}
        # Transactions v2: a decided transaction that exhausted its epoch continues under
        # its next producer id; data of that id is the next transaction's.
        by_pid.update({txn.next_producer_id: txn for txn in txns
                       if txn.state in _PREPARE and txn.next_producer_id in open_by_pid})
        for pid in sorted(by_pid):
            opened = open_by_pid.pop(pid)
            txn = by_pid[pid]
            orphans = frozenset(tp for tp, first in opened.items()
                                if txn.producer_id != pid or not self._covers(txn, tp, first))
            if not orphans:
                continue
            if txn.state in _PREPARE:
                # The completion of this decided transaction was lost too (it is not
                # fsynced either), with the next transaction's records: that one is
                # aborted once recovery has completed this one.
                txn.orphans = txn.orphans | orphans
            else:
                self._abort_lost_transaction(fx, txn, now, orphans)

    @staticmethod
    def _covers(txn: _Txn | None, tp: TopicPartition, first_offset: int | None) -> bool:
        """Is the producer's open data in ``tp`` (from ``first_offset``) part of the
        transaction the durable record describes?"""
        if txn is None or txn.state in _IDLE or tp not in txn.partitions:
            return False
        if txn.state in _PREPARE and txn.first_offsets is not None and first_offset is not None:
            # Decided: only its own data. Data from another offset on is a later
            # transaction's, written after this one's (durable) marker there.
            return txn.first_offsets.get(tp) == first_offset
        return True

    def _abort_lost_transaction(self, fx: _Fx, txn: _Txn, now: int, orphans: frozenset) -> None:
        """Rebuild the lost Ongoing record (in memory, never written) with the orphaned
        partitions, then abort it as a timeout would: epoch bump, PrepareAbort."""
        transit = self._prepare(txn, _S.ONGOING, partitions=txn.partitions | orphans,
                                start_ms=now if txn.state in _IDLE else txn.start_ms,
                                last_update_ms=now)
        self._complete_transition(txn, transit)
        if self._fence_and_abort(fx, txn, now, None, 0, "aborted"):
            fx.expired.append(txn.transactional_id)
        else:
            # No producer id for the abort at the last epoch: Ongoing (in memory) until
            # its timeout aborts it.
            self._arm(txn)

    @property
    def loaded(self) -> bool:
        return self._loaded

    # ==============================================================================
    # InitProducerId
    # ==============================================================================

    def init_producer_id(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str | None,
        txn_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        *,
        api_version: int,
    ) -> Effects:
        """InitProducerId. ``transactional_id=None``: an idempotent producer, answered at
        once with a fresh producer id at epoch 0. ``producer_id``/``producer_epoch``
        are the KIP-360 fields (v3+; pass -1/-1 for older versions)."""
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        api = "init_producer_id"

        def fail(error: int) -> Effects:
            fx.respond(token, InitProducerIdResult(_client_error(api, api_version, error)))
            return self._finish(fx)

        # KafkaApis: exactly one of id/epoch given is a malformed request.
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return fail(_E.invalid_request.value)
        if transactional_id is None:
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            fx.respond(token, InitProducerIdResult(NONE, pid, 0))
            return self._finish(fx)
        if transactional_id == "":
            return fail(_E.invalid_request.value)
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return fail(_E.invalid_transaction_timeout.value)
        if not self._ready(transactional_id):
            return fail(_E.coordinator_load_in_progress.value)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)

        txn = self._txns.get(transactional_id)
        if txn is None:
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            # Like Kafka, the metadata exists (epoch -1, Empty) before anything is written.
            txn = _Txn(transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                       NO_PRODUCER_EPOCH, txn_timeout_ms, _S.EMPTY, frozenset(), -1, now_ms)
            self._txns[transactional_id] = txn
            self._arm(txn)

        if txn.pending is not None:
            return fail(_E.concurrent_transactions.value)
        if expected is not None and not self._valid_expected_producer(txn, *expected):
            self._note_fenced(fx, _E.producer_fenced.value, transactional_id, *expected)
            return fail(_E.producer_fenced.value)
        if txn.state in _PREPARE:
            return fail(_E.concurrent_transactions.value)
        if txn.state is _S.ONGOING:
            # Abort the ongoing transaction with a bumped epoch (fencing its producer) and
            # answer CONCURRENT_TRANSACTIONS once PrepareAbort is durable; the retry then
            # finds CompleteAbort and bumps the epoch a second time.
            old_epoch = txn.producer_epoch
            if self._fence_and_abort(fx, txn, now_ms, token, api_version, "fenced"):
                fx.events.append(TxnEvent("fenced", transactional_id, txn.producer_id, old_epoch,
                                          age_ms=now_ms - txn.start_ms,
                                          new_epoch=txn.producer_epoch))
            return self._finish(fx)
        if txn.state not in _IDLE:
            raise IllegalTransitionError(f"{transactional_id}: InitProducerId in state {txn.state.value}")

        if _epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            # Epochs used up: continue under a new producer id at epoch 0.
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            transit = self._prepare(
                txn, _S.EMPTY, producer_id=pid, producer_epoch=0,
                last_producer_epoch=txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
            )
        else:
            bumped = self._next_epochs(txn, None if expected is None else expected[1])
            if bumped is None:
                assert expected is not None
                self._note_fenced(fx, _E.producer_fenced.value, transactional_id, *expected)
                return fail(_E.producer_fenced.value)
            epoch, last_epoch = bumped
            transit = self._prepare(
                txn, _S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
            )
        self._write(fx, _Write("init", txn, transit, token, api, api_version))
        return self._finish(fx)

    def _valid_expected_producer(self, txn: _Txn, producer_id: int, producer_epoch: int) -> bool:
        """KIP-360: may a producer presenting this id/epoch re-initialize?"""
        return (
            # the metadata was just created: hand out the new id
            txn.producer_epoch == NO_PRODUCER_EPOCH
            # the current id; the epoch is checked when it is bumped
            or producer_id == txn.producer_id
            # a retry of the InitProducerId that rotated an exhausted producer id
            or (producer_id == txn.prev_producer_id and _epoch_exhausted(producer_epoch))
        )

    def _next_epochs(self, txn: _Txn, expected_epoch: int | None) -> tuple[int, int] | None:
        """Kafka's prepareIncrementProducerEpoch: (epoch, last epoch), or None = fenced."""
        if expected_epoch is None:
            # A new producer instance: bump; a later retry with the old epoch is fenced.
            return txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        if txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            # The current producer recovers (KIP-360): bump, remember the epoch it had.
            return txn.producer_epoch + 1, txn.producer_epoch
        if expected_epoch == txn.last_producer_epoch:
            # A retry of a bump that succeeded: same answer, no second bump.
            return txn.producer_epoch, txn.last_producer_epoch
        return None

    # ==============================================================================
    # AddPartitionsToTxn / AddOffsetsToTxn
    # ==============================================================================

    def add_partitions(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        api_version: int,
    ) -> Effects:
        """AddPartitionsToTxn v0-3 (the partitions exist and are authorized)."""
        assert token is not None, "tokens must not be None"
        parts = tuple(dict.fromkeys((str(t), int(p)) for t, p in partitions))
        return self._add(token, now_ms, transactional_id, producer_id, producer_epoch, parts,
                         "add_partitions", api_version)

    def add_offsets(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        api_version: int,
    ) -> Effects:
        """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition."""
        assert token is not None, "tokens must not be None"
        tp = self._partition_for_group(group_id)
        return self._add(token, now_ms, transactional_id, producer_id, producer_epoch, (tp,),
                         "add_offsets", api_version)

    def _add(self, token: Token, now: int, tid: str, producer_id: int, producer_epoch: int,
             parts: tuple[TopicPartition, ...], api: str, api_version: int) -> Effects:
        fx = _Fx()
        error = self._add_check(tid, producer_id, producer_epoch, parts)
        if error is None:
            txn = self._txns[tid]
            new_txn = txn.state in _IDLE
            transit = self._prepare(
                txn, _S.ONGOING, partitions=txn.partitions | frozenset(parts),
                # The transaction (and its timeout) starts with its first partition.
                start_ms=now if new_txn else txn.start_ms, last_update_ms=now,
                # Kafka's transactionVersionForAddPartitionsToTxn: v4+ (a leader's
                # implicit add) is a transactions v2 client; AddOffsetsToTxn is v0.
                tv=2 if api == "add_partitions" and api_version >= 4 else 0,
            )
            self._write(fx, _Write("add", txn, transit, token, api, api_version, parts))
        else:
            self._note_fenced(fx, error, tid, producer_id, producer_epoch)
            fx.respond(token, self._result(api, api_version, error, parts))
        return self._finish(fx)

    def _add_check(self, tid: str, producer_id: int, producer_epoch: int,
                   parts: tuple[TopicPartition, ...]) -> int | None:
        """The error to answer at once, or None: write Ongoing with the partitions."""
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        txn = self._txns.get(tid)
        if txn is not None and txn.pending is not None:
            # Kafka 4 asks this first, before the producer id and epoch: a transition in
            # progress may be the one that moves them on (KAFKA-18464, see _end_check_v2).
            return _E.concurrent_transactions.value
        if txn is None or txn.producer_id != producer_id:
            return _E.invalid_producer_id_mapping.value
        if txn.producer_epoch != producer_epoch:
            return _E.producer_fenced.value
        if txn.producer_epoch == NO_PRODUCER_EPOCH:
            # InitProducerId never completed for this id: no producer holds an epoch.
            # (Kafka fails the transition with an exception -> UNKNOWN_SERVER_ERROR.)
            return _E.invalid_producer_id_mapping.value
        if txn.state in _PREPARE:
            return _E.concurrent_transactions.value
        if txn.state is _S.ONGOING and set(parts) <= txn.partitions:
            return NONE  # already in the transaction: nothing to write
        return None

    # ==============================================================================
    # EndTxn
    # ==============================================================================

    def end_txn(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        api_version: int,
    ) -> Effects:
        """EndTxn: transactions v1 below v5, v2 from v5 (see the module docstring)."""
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        api = "end_txn"
        if api_version >= 5:
            self._end_txn_v2(fx, token, now_ms, transactional_id, producer_id, producer_epoch,
                             commit, api_version)
            return self._finish(fx)
        error = self._end_check(transactional_id, producer_id, producer_epoch, commit)
        if error is None:
            txn = self._txns[transactional_id]
            target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            # The EndTxn's version is the transaction's from here on, as in Kafka's
            # endTransactionWithTV1 (prepareAbortOrCommit with transaction version 0),
            # even if a v2 producer's implicit add wrote the Ongoing record (another
            # instance holding the same epoch, after a KIP-360 retry): no bump, so the
            # markers go with v1 rules (a v2 marker of the data's own epoch is refused,
            # and the decision would never complete), and the answer has no id/epoch.
            transit = self._prepare(txn, target, last_update_ms=now_ms, tv=0)
            txn.outcome = "committed" if commit else "aborted"
            self._write(fx, _Write("prepare", txn, transit, token, api, api_version))
        else:
            self._note_fenced(fx, error, transactional_id, producer_id, producer_epoch)
            fx.respond(token, EndTxnResult(_client_error(api, api_version, error)))
        return self._finish(fx)

    def _end_txn_v2(self, fx: _Fx, token: Token, now: int, tid: str, producer_id: int,
                    producer_epoch: int, commit: bool, api_version: int) -> None:
        """Kafka's endTransaction for a transactions v2 client (EndTxn v5+)."""
        txn = self._txns.get(tid) if tid and self._ready(tid) else None
        decision = self._end_check_v2(txn, tid, producer_id, producer_epoch, commit)
        if isinstance(decision, int):
            if decision == NONE:  # a retry of a completed EndTxn: the epoch it got
                assert txn is not None
                fx.respond(token, EndTxnResult(NONE, txn.producer_id, txn.producer_epoch))
                return
            self._note_fenced(fx, decision, tid, producer_id, producer_epoch)
            fx.respond(token, EndTxnResult(decision))
            return
        assert txn is not None
        target, no_partition_added = decision
        next_pid = NO_PRODUCER_ID
        if _epoch_exhausted(txn.producer_epoch):
            # The bump below is the id's last epoch: the transaction continues under a
            # new producer id (at epoch 0) once it completes.
            allocated = self._allocate()
            if allocated is None:
                fx.respond(token, EndTxnResult(_E.coordinator_load_in_progress.value))
                return
            next_pid = allocated
        transit = self._prepare_end_v2(txn, target, now, next_pid, no_partition_added)
        txn.outcome = "committed" if commit else "aborted"
        self._write(fx, _Write("prepare", txn, transit, token, "end_txn", api_version))

    def _end_check_v2(self, txn: _Txn | None, tid: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> int | tuple[TxnState, bool]:
        """An error (NONE: a retry already done), or (target state, no partition added)."""
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        if txn is None:
            return _E.invalid_producer_id_mapping.value
        if txn.pending is not None and txn.pending is not _S.PREPARE_EPOCH_FENCE:
            # Kafka 4 (KAFKA-18464) answers a transition in progress before it checks the
            # epoch: the previous transaction's markers may still be on their way (its
            # PrepareCommit holds the epoch it bumped) when the producer, already told
            # that epoch, ends its next transaction; the epoch checks below would call
            # that current epoch fenced. The producer retries once Complete* is durable.
            return _E.concurrent_transactions.value
        st = txn.state
        # A retry carries the epoch before the bump (or, after a producer id
        # rotation, the old id at the last epoch); the same epoch is the next EndTxn.
        retry_on_overflow = (txn.prev_producer_id == producer_id
                             and producer_epoch == _MAX_EPOCH - 1 and txn.producer_epoch == 0)
        retry_on_bump = txn.producer_epoch == producer_epoch + 1
        if txn.producer_id != producer_id and not retry_on_overflow:
            return _E.invalid_producer_id_mapping.value
        current = producer_epoch == txn.producer_epoch
        if st in _PREPARE:
            valid = retry_on_bump
        elif st in _COMPLETE:
            valid = retry_on_bump or retry_on_overflow or current
        else:
            valid = current
        if not valid:
            return _E.producer_fenced.value
        retry = retry_on_bump or retry_on_overflow
        abort = _S.PREPARE_ABORT, True
        if st is _S.ONGOING:
            return (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT), False
        if st is _S.COMPLETE_COMMIT:
            if commit:
                return NONE if retry else _E.invalid_txn_state.value
            return _E.invalid_txn_state.value if retry else abort
        if st is _S.COMPLETE_ABORT:
            if commit:
                return _E.invalid_txn_state.value
            return NONE if retry else abort
        if st is _S.PREPARE_COMMIT:
            return _E.concurrent_transactions.value if commit else _E.invalid_txn_state.value
        if st is _S.PREPARE_ABORT:
            return _E.invalid_txn_state.value if commit else _E.concurrent_transactions.value
        if st is _S.EMPTY:
            return _E.invalid_txn_state.value if commit else abort
        raise IllegalTransitionError(f"{tid}: EndTxn in state {st.value}")

    def _prepare_end_v2(self, txn: _Txn, target: TxnState, now: int, next_pid: int,
                        no_partition_added: bool) -> _Transit:
        """Kafka's prepareAbortOrCommit at transactions v2: the epoch is bumped (never
        past Short.MaxValue: an abort there goes through unbumped), the old one kept
        as the last epoch; an abort with nothing open starts now."""
        epoch = txn.producer_epoch
        bumped = epoch if epoch >= _MAX_EPOCH and target is _S.PREPARE_ABORT else epoch + 1
        return self._prepare(txn, target, producer_epoch=bumped, last_producer_epoch=epoch,
                             next_producer_id=next_pid, tv=2, last_update_ms=now,
                             start_ms=now if no_partition_added else txn.start_ms)

    def _end_check(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> int | None:
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        txn = self._txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            return _E.invalid_producer_id_mapping.value
        if txn.producer_epoch != producer_epoch:
            return _E.producer_fenced.value
        if txn.pending is not None:
            # Includes a transaction whose markers are being written (pending Complete*).
            return _E.concurrent_transactions.value
        st = txn.state
        if st is _S.ONGOING:
            return None
        if st is _S.COMPLETE_COMMIT:
            return NONE if commit else _E.invalid_txn_state.value  # a retry is fine
        if st is _S.COMPLETE_ABORT:
            return _E.invalid_txn_state.value if commit else NONE
        if st is _S.PREPARE_COMMIT:
            return _E.concurrent_transactions.value if commit else _E.invalid_txn_state.value
        if st is _S.PREPARE_ABORT:
            return _E.invalid_txn_state.value if commit else _E.concurrent_transactions.value
        if st is _S.EMPTY:
            return _E.invalid_txn_state.value
        raise IllegalTransitionError(f"{tid}: EndTxn in state {st.value}")

    def _fence_and_abort(self, fx: _Fx, txn: _Txn, now: int, token: Token | None,
                         api_version: int, outcome: str) -> bool:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false).

        False if nothing could be done: the abort takes the producer id's last epoch and
        no next producer id could be allocated (the transaction stays Ongoing, unchanged;
        a timeout's abort is tried again at the next check, ``token`` is answered
        COORDINATOR_LOAD_IN_PROGRESS)."""
        epoch = txn.producer_epoch
        # No second bump after a failed fence (that epoch was never handed out), and
        # never past Short.MaxValue.
        bumped = epoch if txn.failed_epoch_fence or epoch >= _MAX_EPOCH else epoch + 1
        next_pid = NO_PRODUCER_ID
        if bumped >= _MAX_EPOCH:
            # The abort takes Short.MaxValue, the epoch the coordinator keeps for fencing:
            # the id is used up. Kafka 4.3.1 ends the aborts it starts itself (timeout,
            # InitProducerId fencing) through its transactions v2 path whenever the
            # broker finalizes transaction.version 2 (the broker's level, not the
            # client's: TransactionCoordinator passes transactionVersionLevel()), and
            # that path allocates the next producer id when the epoch before the bump is
            # exhausted, fence or not (generateTxnTransitMetadataForTxnCompletion ->
            # prepareAbortOrCommit(nextProducerId)); prepareComplete then continues
            # under it at epoch 0. Without it the id would stay at Short.MaxValue after
            # the abort, an epoch no producer may hold: a v2 EndTxn retry would be handed
            # it, its next transaction could not be aborted with a bump (the partition
            # refuses a v2 marker of the epoch of its open transaction) nor committed.
            allocated = self._allocate()
            if allocated is None:
                if token is not None:
                    fx.respond(token, InitProducerIdResult(_client_error(
                        "init_producer_id", api_version, _E.coordinator_load_in_progress.value)))
                return False
            next_pid = allocated
        txn.outcome = outcome
        self._prepare(txn, _S.PREPARE_EPOCH_FENCE, producer_epoch=bumped)
        # endTransaction clears the PrepareEpochFence pending state and installs the bumped
        # epoch in memory right away: from now on the old producer is fenced.
        txn.pending = None
        txn.producer_epoch = bumped
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        if next_pid == NO_PRODUCER_ID:
            # One bump whatever the transaction's version (Kafka 4.3.1: a fenced transaction
            # of either version ends one epoch up; the next InitProducerId bumps again).
            transit = self._prepare(txn, _S.PREPARE_ABORT, last_update_ms=now)
        else:
            # As a v2 EndTxn that exhausts the epoch (Kafka's record: transaction version
            # 2, the next producer id, and the last epoch the producer held, Short.MaxValue
            # - 1, which a late EndTxn or KIP-360 InitProducerId of that producer names).
            transit = self._prepare(txn, _S.PREPARE_ABORT, last_update_ms=now,
                                    next_producer_id=next_pid, last_producer_epoch=_MAX_EPOCH - 1,
                                    tv=2)
        self._write(fx, _Write("prepare", txn, transit, token, "init_producer_id", api_version, fence=True))
        return True

    # ==============================================================================
    # Completions reported by the shell
    # ==============================================================================

    def persisted(self, now_ms: int, write_id: int, error: int = NONE) -> Effects:
        """PersistRequest ``write_id`` is durable (``error == NONE``) or failed."""
        fx = _Fx()
        w = self._writes.pop(write_id, None)
        if w is None:
            return self._finish(fx)
        txn = w.txn
        if self._txns.get(txn.transactional_id) is not txn:
            raise IllegalTransitionError(f"write {write_id} outlived its transaction metadata")
        if w.kind == "complete":
            if error == NONE:
                fx.events.append(TxnEvent(
                    "completed", txn.transactional_id, txn.producer_id, txn.producer_epoch,
                    age_ms=now_ms - txn.start_ms, outcome=_outcome_of(txn),
                    markers=txn.marker_count,
                    recovered=txn.recovering))
                txn.outcome, txn.recovering = None, False
                self._complete_transition(txn, w.transit)
                txn.complete = None
                self._arm(txn)
                if txn.orphans:
                    orphans, txn.orphans = txn.orphans, frozenset()
                    self._abort_lost_transaction(fx, txn, now_ms, orphans)
            else:
                # Kafka retries this append until it succeeds (pending state kept).
                self._write(fx, _Write("complete", txn, w.transit))
        elif w.kind == "dead":
            if error == NONE:
                if txn.pending is not _S.DEAD:
                    raise IllegalTransitionError(f"{txn.transactional_id}: tombstone without pending Dead")
                check_transition(txn.state, _S.DEAD)
                fx.events.append(TxnEvent("expired", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch,
                                          age_ms=now_ms - txn.last_update_ms))
                txn.state, txn.pending = _S.DEAD, None
                del self._txns[txn.transactional_id]
            else:
                txn.pending = None
                txn.tombstone_maybe_written = True
                self._arm(txn)  # expired still: retried at the next expiration check
        elif error != NONE:
            txn.pending = None
            if w.fence:
                txn.failed_epoch_fence = True
            if w.token is not None:
                fx.respond(w.token, self._result(w.api, w.api_version, error, w.partitions))
            self._arm(txn)
        else:
            if not w.acted_on_append:
                txn.tombstone_maybe_written = False  # durable after any tombstone
            self._complete_transition(txn, w.transit)
            if w.kind == "prepare":
                # PrepareCommit/PrepareAbort is durable: the outcome is decided. Answer,
                # then write the markers; Complete* follows once they are durable.
                txn.expire_requested = False  # decided: nothing left to expire
                if w.token is not None and w.api == "end_txn" and w.transit.tv >= 2:
                    # EndTxn v5 answers with what the producer continues with.
                    if txn.next_producer_id != NO_PRODUCER_ID:
                        fx.respond(w.token, EndTxnResult(NONE, txn.next_producer_id, 0))
                    else:
                        fx.respond(w.token, EndTxnResult(NONE, txn.producer_id,
                                                         txn.producer_epoch))
                elif w.token is not None:
                    # InitProducerId that fenced an ongoing transaction: retry later.
                    result = _E.concurrent_transactions.value if w.fence else NONE
                    fx.respond(w.token, self._result(w.api, w.api_version, result, ()))
                self._send_markers(fx, txn, self._prepare_complete(txn, now_ms))
            elif w.kind == "init":
                fx.respond(w.token, InitProducerIdResult(NONE, txn.producer_id, txn.producer_epoch))
            else:  # "add"
                fx.respond(w.token, self._result(w.api, w.api_version, NONE, w.partitions))
            self._arm(txn)
        if txn.expire_requested and txn.pending is None and self._txns.get(txn.transactional_id) is txn:
            # expire_now() came while this write was in flight.
            txn.expire_requested = False
            if txn.state is _S.ONGOING:
                self._fence_and_abort(fx, txn, now_ms, None, 0, "timed_out")
        return self._finish(fx)

    def markers_written(self, now_ms: int, marker_id: int, error: int = NONE,
                        failed: Iterable[TopicPartition] | None = None) -> Effects:
        """Every marker of MarkerRequest ``marker_id`` is durable (or, on error, not all:
        ``failed`` names the partitions still without theirs, default all the request's;
        only those are asked for again, as Kafka's marker channel retries per partition)."""
        fx = _Fx()
        txn = self._markers.pop(marker_id, None)
        if txn is None:
            return self._finish(fx)
        if txn.marker_id != marker_id or self._txns.get(txn.transactional_id) is not txn:
            raise IllegalTransitionError(f"markers {marker_id} outlived their transaction")
        txn.marker_id = None
        assert txn.complete is not None
        if error != NONE:
            asked = txn.marker_partitions or txn.partitions
            retry = asked if failed is None else asked & frozenset(failed)
            self._request_markers(fx, txn, retry or asked)
        else:
            self._write(fx, _Write("complete", txn, txn.complete))
        return self._finish(fx)

    def _prepare_complete(self, txn: _Txn, now: int) -> _Transit:
        """Kafka's prepareComplete: computed when the markers are requested."""
        txn.failed_epoch_fence = False  # the fence (if any) is durable
        target = _S.COMPLETE_COMMIT if txn.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        if txn.tv >= 2 and txn.next_producer_id != NO_PRODUCER_ID:
            # The epoch was exhausted: continue under the next producer id at epoch 0
            # (the last epoch stays the one the client saw before it).
            return self._prepare(txn, target, producer_id=txn.next_producer_id,
                                 producer_epoch=0, next_producer_id=NO_PRODUCER_ID,
                                 partitions=frozenset(), last_update_ms=now)
        return self._prepare(txn, target, next_producer_id=NO_PRODUCER_ID, partitions=frozenset(),
                             last_update_ms=now)

    def _send_markers(self, fx: _Fx, txn: _Txn, complete: _Transit,
                      partitions: frozenset[TopicPartition] | None = None) -> None:
        txn.complete = complete
        partitions = txn.partitions if partitions is None else partitions
        txn.marker_count = len(partitions)
        if partitions:
            self._request_markers(fx, txn, partitions)
        else:
            self._write(fx, _Write("complete", txn, complete))  # nothing to mark

    def _request_markers(self, fx: _Fx, txn: _Txn,
                         partitions: frozenset[TopicPartition] | None = None) -> None:
        marker_id = next(self._marker_ids)
        txn.marker_id = marker_id
        txn.marker_partitions = txn.partitions if partitions is None else partitions
        self._markers[marker_id] = txn
        commit = txn.state is _S.PREPARE_COMMIT
        tv = txn.tv
        if not commit and txn.producer_epoch >= _MAX_EPOCH:
            # An ABORT at Short.MaxValue goes with the rules of transactions v1 (an epoch
            # at or above the producer's): the producer id is used up, so no later
            # transaction of it can be open at that epoch for a late marker to end, and
            # the partition must take it even where data of that epoch is open, which
            # only a txbroker before issue 25 wrote (it handed Short.MaxValue to v2
            # producers; their aborts, recovered from such a log, would hang with a v2
            # marker the partition refuses). Kafka never gets there.
            tv = 0
        fx.markers.append(MarkerRequest(
            marker_id=marker_id,
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            commit=commit,
            partitions=tuple(sorted(txn.marker_partitions)),
            coordinator_epoch=self.coordinator_epoch,
            transaction_version=tv,
        ))

    # ==============================================================================
    # Timers: transaction timeouts and transactional id expiration
    # ==============================================================================

    def tick(self, now_ms: int) -> Effects:
        """Abort timed-out transactions (epoch bump) and expire idle transactional ids."""
        fx = _Fx()
        # Only loaded partitions' transactions are armed: nothing else to check.
        for txn in self._due("timeout", now_ms, self.config.abort_timed_out_check_interval_ms):
            # Kafka's abortTimedOutTransactions: nobody waits for the outcome.
            old_epoch = txn.producer_epoch
            if not self._fence_and_abort(fx, txn, now_ms, None, 0, "timed_out"):
                # No producer id for an abort at the last epoch (Kafka logs the error
                # and tries again at its next check): still due at the next check.
                self._arm(txn)
                continue
            fx.events.append(TxnEvent("timed_out", txn.transactional_id, txn.producer_id,
                                      old_epoch, age_ms=now_ms - txn.start_ms,
                                      new_epoch=txn.producer_epoch))
        for txn in self._due("expire", now_ms, self.config.remove_expired_check_interval_ms):
            transit = self._prepare(txn, _S.DEAD, partitions=frozenset())
            self._write(fx, _Write("dead", txn, transit))
        return self._finish(fx)

    def expire_now(self, now_ms: int, transactional_id: str | None = None) -> Effects:
        """Fault injection: abort every ongoing transaction (or only the one of
        ``transactional_id``) now, exactly as its timeout would: the epoch is bumped at
        once (the producer is fenced), then PrepareAbort (stamped ``now_ms``), ABORT
        markers, CompleteAbort. The timers are left alone, so later timeouts and
        expirations fire when they are due.

        A transaction whose state write is in flight (AddPartitionsToTxn, including the
        first one of a transaction, or EndTxn) is aborted once that write is done, if
        it is Ongoing then: an EndTxn whose PrepareCommit/PrepareAbort lands has decided
        the outcome first. ``Effects.expired`` lists the ids acted on (aborted now, or
        marked to be); ids without an ongoing transaction (or unknown) are left alone."""
        fx = _Fx()
        if transactional_id is None:
            targets = [self._txns[tid] for tid in sorted(self._txns) if self._ready(tid)]
        else:
            txn = self._txns.get(transactional_id) if self._ready(transactional_id) else None
            targets = [] if txn is None else [txn]
        for txn in targets:
            if _S.ONGOING not in (txn.state, txn.pending):
                continue
            if txn.pending is not None:
                txn.expire_requested = True
            elif not self._fence_and_abort(fx, txn, now_ms, None, 0, "timed_out"):
                continue  # no producer id for an abort at the last epoch: left alone
            fx.expired.append(txn.transactional_id)
        return self._finish(fx)

    def next_wake_ms(self) -> int | None:
        wake: int | None = None
        for kind, interval in (
            ("timeout", self.config.abort_timed_out_check_interval_ms),
            ("expire", self.config.remove_expired_check_interval_ms),
        ):
            heap = self._heaps[kind]
            while heap and not self._timer_valid(kind, heap[0]):
                heapq.heappop(heap)
            if not heap:
                continue
            at = heap[0][0]
            last = self._last_check[kind]
            if last is not None:
                at = max(at, last + interval)
            wake = at if wake is None else min(wake, at)
        return wake

    def _deadline(self, kind: str, txn: _Txn) -> int | None:
        if txn.pending is not None:
            return None  # re-armed when the transition completes or fails
        if kind == "timeout":
            # Kafka: txnStartTimestamp + txnTimeoutMs < now
            return txn.start_ms + txn.timeout_ms + 1 if txn.state is _S.ONGOING else None
        # Kafka: txnLastUpdateTimestamp <= now - transactional.id.expiration.ms
        if txn.state in _IDLE:
            return txn.last_update_ms + self.config.transactional_id_expiration_ms
        return None

    def _arm(self, txn: _Txn) -> None:
        for kind in ("timeout", "expire"):
            deadline = self._deadline(kind, txn)
            if deadline is None:
                continue
            heap = self._heaps[kind]
            heapq.heappush(heap, (deadline, next(self._seq), txn))
            if len(heap) > 2 * len(self._txns) + 64:
                # Stale entries (superseded deadlines) otherwise linger until they reach the
                # top, days later for expiration: keep one live entry per transaction.
                live: dict[int, tuple[int, int, _Txn]] = {}
                for entry in heap:
                    if self._timer_valid(kind, entry):
                        live.setdefault(id(entry[2]), entry)
                heap[:] = live.values()
                heapq.heapify(heap)

    def _timer_valid(self, kind: str, entry: tuple[int, int, _Txn]) -> bool:
        deadline, _, txn = entry
        return self._txns.get(txn.transactional_id) is txn and self._deadline(kind, txn) == deadline

    def _due(self, kind: str, now: int, interval: int) -> list[_Txn]:
        """The transactions whose ``kind`` deadline has passed, if the periodic check may run."""
        last = self._last_check[kind]
        if last is not None and now < last + interval:
            return []  # the periodic check ran recently
        heap = self._heaps[kind]
        due: dict[int, _Txn] = {}
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._timer_valid(kind, entry):
                due.setdefault(id(entry[2]), entry[2])
        if due:
            self._last_check[kind] = now
        return list(due.values())

    # ==============================================================================
    # TxnOffsetCommit / produce verification (KIP-890 part 1)
    # ==============================================================================

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Kafka's handleVerifyPartitionsInTransaction: per partition NONE if it is part of
        the producer's ongoing transaction, else TRANSACTION_ABORTABLE; or one error for
        all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS in
        Prepare*). Raw coordinator codes: callers map them for their API version."""
        parts = list(dict.fromkeys(partitions))
        if not transactional_id:
            error = _E.invalid_request.value
        elif not self._ready(transactional_id):
            error = _E.coordinator_load_in_progress.value
        else:
            txn = self._txns.get(transactional_id)
            if txn is None or txn.producer_id != producer_id:
                error = _E.invalid_producer_id_mapping.value
            elif txn.producer_epoch != producer_epoch:
                error = _E.producer_fenced.value
            elif txn.state in _PREPARE or txn.pending in _PREPARE:
                # Decided, or being decided: its PrepareCommit/PrepareAbort records where
                # its data starts in each partition, so no partition may join now.
                error = _E.concurrent_transactions.value
            else:
                # Other pending transitions are not checked (Kafka: the log append
                # validates again).
                return {tp: NONE if tp in txn.partitions else _E.transaction_abortable.value for tp in parts}
        return {tp: error for tp in parts}

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, *, api_version: int) -> int:
        """What the group coordinator asks before appending a TxnOffsetCommit: is the
        group's offsets partition part of this producer's ongoing transaction?

        NONE, or the error for the whole request: INVALID_PRODUCER_EPOCH for a fenced
        producer (every version: Kafka's verification turns PRODUCER_FENCED into it, and
        TxnOffsetCommit never got the KIP-588 code), INVALID_PRODUCER_ID_MAPPING,
        CONCURRENT_TRANSACTIONS, and INVALID_TXN_STATE when AddOffsetsToTxn was not done
        (TRANSACTION_ABORTABLE from v4, KIP-890's GENERIC_ERROR_SUPPORTED). Group membership and generation are the
        group coordinator's part.
        """
        tp = self._partition_for_group(group_id)
        error = self.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
        if error == _E.transaction_abortable.value and api_version < 4:
            error = _E.invalid_txn_state.value
        if error == _E.producer_fenced.value:
            error = _E.invalid_producer_epoch.value
        return error

    # ==============================================================================
    # Admin: DescribeTransactions, ListTransactions (KIP-664)
    # ==============================================================================

    def describe(self, transactional_id: str) -> TxnDescription:
        """DescribeTransactions for one transactional id."""
        if not transactional_id:
            return TxnDescription(transactional_id, _E.invalid_request.value)
        if not self._ready(transactional_id):
            return TxnDescription(transactional_id, _E.coordinator_load_in_progress.value)
        txn = self._txns.get(transactional_id)
        if txn is None or txn.state is _S.DEAD:
            return TxnDescription(transactional_id, _E.transactional_id_not_found.value)
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            topics.setdefault(topic, []).append(partition)
        return TxnDescription(
            transactional_id=transactional_id,
            error=NONE,
            state=txn.state.value,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            timeout_ms=txn.timeout_ms,
            start_time_ms=txn.start_ms,
            topics=topics,
        )

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1, now_ms: int | None = None) -> ListTransactionsResult:
        """ListTransactions v0-1. State names match exactly (Kafka's names); unknown ones
        are reported back. ``duration_filter_ms >= 0`` (v1; needs ``now_ms``) keeps only
        transactions whose start time is more than that long ago (pass -1 for v0)."""
        if duration_filter_ms >= 0 and now_ms is None:
            raise ValueError("a duration filter needs now_ms")
        now = 0 if now_ms is None else now_ms
        if not self._loaded:
            return ListTransactionsResult(_E.coordinator_load_in_progress.value)
        names = {s.value for s in TxnState}
        wanted_states: set[str] = set()
        unknown: list[str] = []
        for name in dict.fromkeys(state_filters):
            if name in names:
                wanted_states.add(name)
            else:
                unknown.append(name)
        states_given = bool(wanted_states or unknown)
        pids = set(producer_id_filters)
        out = []
        for tid in sorted(self._txns):
            txn = self._txns[tid]
            if txn.state is _S.DEAD:
                continue
            if pids and txn.producer_id not in pids:
                continue
            if states_given and txn.state.value not in wanted_states:
                continue
            if duration_filter_ms >= 0 and now - txn.start_ms <= duration_filter_ms:
                continue
            out.append(TxnListing(tid, txn.producer_id, txn.state.value))
        return ListTransactionsResult(NONE, unknown, out)

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
    # Transitions (Kafka's prepareTransitionTo / completeTransitionTo)
    # ==============================================================================

    def _prepare(self, txn: _Txn, target: TxnState, **changes: Any) -> _Transit:
        if txn.pending is not None:
            raise IllegalTransitionError(
                f"{txn.transactional_id}: transition to {target.value} while {txn.pending.value} is pending")
        check_transition(txn.state, target)
        if target in _PREPARE:
            changes.setdefault("first_offsets", self._first_offsets(txn))
        else:
            changes.setdefault("first_offsets", None)
        transit = replace(txn.to_transit(), state=target, prev_producer_id=txn.producer_id, **changes)
        if transit.producer_id < 0:
            raise IllegalTransitionError(f"{txn.transactional_id}: producer id {transit.producer_id}")
        if target is not _S.DEAD and not 0 <= transit.producer_epoch <= _MAX_EPOCH:
            raise IllegalTransitionError(f"{txn.transactional_id}: producer epoch {transit.producer_epoch}")
        txn.pending = target
        return transit

    def _complete_transition(self, txn: _Txn, t: _Transit) -> None:
        """Install a transit whose record is durable, with Kafka's sanity checks."""
        target = t.state
        if txn.pending is not target:
            raise IllegalTransitionError(f"{txn.transactional_id}: completing {target.value} but pending is "
                                         f"{txn.pending.value if txn.pending else None}")
        same_producer = t.producer_id == txn.producer_id and t.producer_epoch == txn.producer_epoch
        if target is _S.EMPTY:  # InitProducerId
            valid_bump = t.producer_epoch == txn.producer_epoch + 1 or (
                t.producer_epoch == 0 and t.producer_id != txn.producer_id)
            ok = (same_producer or valid_bump) and not t.partitions and t.start_ms == -1
        elif target is _S.ONGOING:  # AddPartitions
            ok = same_producer and t.partitions >= txn.partitions and t.timeout_ms == txn.timeout_ms
        elif target in _PREPARE:  # EndTxn / fence
            if t.tv >= 2 and t.producer_epoch != txn.producer_epoch:
                # A v2 EndTxn bumped the epoch (Kafka's validProducerEpoch); a fence's
                # abort did its bump before.
                same_producer = (t.producer_id == txn.producer_id
                                 and t.last_producer_epoch == txn.producer_epoch)
            # v2 may abort with nothing open: that transaction starts now.
            empty_abort = t.tv >= 2 and target is _S.PREPARE_ABORT and txn.state in _IDLE
            ok = (same_producer and t.partitions == txn.partitions and t.timeout_ms == txn.timeout_ms
                  and (t.start_ms == txn.start_ms or empty_abort))
        elif target in _COMPLETE:  # markers written
            if t.tv >= 2 and t.producer_epoch == 0 and t.producer_id != txn.producer_id:
                # Rotated to the next producer id (epoch exhausted).
                same_producer = (t.last_producer_epoch == txn.last_producer_epoch
                                 and t.prev_producer_id == txn.producer_id
                                 and t.producer_id == txn.next_producer_id)
            ok = same_producer and t.timeout_ms == txn.timeout_ms and t.start_ms != -1
        else:  # PrepareEpochFence and Dead are never completed this way
            ok = False
        if not ok:
            raise IllegalTransitionError(f"{txn.transactional_id}: inconsistent transition to {t}")
        txn.producer_id = t.producer_id
        txn.prev_producer_id = t.prev_producer_id
        txn.next_producer_id = t.next_producer_id
        txn.producer_epoch = t.producer_epoch
        txn.last_producer_epoch = t.last_producer_epoch
        txn.timeout_ms = t.timeout_ms
        txn.partitions = t.partitions
        txn.start_ms = t.start_ms
        txn.last_update_ms = t.last_update_ms
        txn.first_offsets = t.first_offsets
        txn.tv = t.tv
        txn.state = target
        txn.pending = None

    # ==============================================================================
    # Small helpers
    # ==============================================================================

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
